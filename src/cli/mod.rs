//! The command-line surface: clap definitions and one small function per command.
//!
//! Each command opens the engine, calls one engine method and prints the result with
//! [`output`], as a table for people or as JSON (`--json`) with the same field names as the
//! MCP tools. Exit codes: 0 ok, 1 operational failure or not found, 2 invalid input (clap's
//! own usage errors also exit 2).

mod index;
mod loops;
mod output;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, CommandFactory, Parser, Subcommand};
use serde_json::json;

use slm::embed::query_cache::QueryCache;
use slm::embed::OnnxEmbedder;
use slm::engine::{DataRoot, Engine, RecallQuery};
use slm::Error;

/// Exit code for invalid input.
pub const EXIT_INVALID: i32 = 2;
/// Exit code for operational failures and not-found.
pub const EXIT_FAILURE: i32 = 1;

/// `slm --help`: the exit codes every command shares.
const EXIT_CODES_HELP: &str = "\
Exit codes: 0 ok; 1 operational failure or not found; 2 invalid input or usage.
`slm loop run`, `slm loop demo`, `slm loop step` and `slm gate check` add 3 (a bound ended the
loop, or the gate would not pass) and 130 (cancelled). Output closed early (`slm list | head -1`)
ends the process quietly.";

#[derive(Parser, Debug)]
#[command(
    name = "slm",
    version,
    about = "A local memory engine for AI agents, with gate-verified bounded loops",
    after_help = EXIT_CODES_HELP
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct Global {
    /// Data root (the SQLite database shared by every process, or with --store the local feed
    /// and index files). Default: $XDG_DATA_HOME/slm.
    #[arg(long, global = true, env = "SLM_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// A shared PostgreSQL store (postgres://user@host/db) used by every host instead of the
    /// data root's SQLite file; the data root stays local (feed and derived index files).
    #[arg(long, global = true, env = "SLM_STORE", hide_env_values = true, value_name = "URL")]
    store: Option<String>,
    /// Print structured JSON (the same field names as the MCP tools).
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store a memory (the same content and tags again returns the existing id).
    Remember {
        /// The text to remember (1 byte to 64 KiB).
        content: String,
        /// A tag (1-128 characters, no whitespace or commas); repeat for several.
        #[arg(long = "tag", short = 't', value_name = "TAG")]
        tags: Vec<String>,
        /// Expire the memory after this long (90s, 15m, 2h, 1d, or seconds): from then on no
        /// loop gate counts it and recall and list hide it. Remembering it again renews it.
        #[arg(long, value_name = "DURATION", conflicts_with = "expires_at", allow_hyphen_values = true)]
        ttl: Option<String>,
        /// Expire the memory at this RFC 3339 time (in the future).
        #[arg(long, value_name = "TIME")]
        expires_at: Option<String>,
    },
    /// Semantic search, best first, scored by exact cosine similarity.
    #[command(visible_alias = "search")]
    Recall {
        /// What to look for.
        query: String,
        /// Most hits to return (1-1000).
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Only memories carrying every one of these tags.
        #[arg(long = "tag", short = 't', value_name = "TAG")]
        tags: Vec<String>,
        /// Only hits scoring at least this (in [-1, 1]).
        #[arg(long, allow_hyphen_values = true)]
        min_score: Option<f64>,
        /// Include loop ledger laps (they are included anyway when a loop:* tag is given).
        #[arg(long)]
        laps: bool,
        /// Include memories that have expired (hidden by default).
        #[arg(long)]
        include_expired: bool,
    },
    /// List memories, newest first.
    List {
        /// Only memories carrying every one of these tags.
        #[arg(long = "tag", short = 't', value_name = "TAG")]
        tags: Vec<String>,
        /// Most memories to list (1-1000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Which kind of rows to list.
        #[arg(long, default_value = "memory", value_parser = ["memory", "lap", "all"])]
        kind: String,
        /// Only ids below this one (for paging).
        #[arg(long)]
        before: Option<i64>,
        /// Include memories that have expired (hidden by default).
        #[arg(long)]
        include_expired: bool,
    },
    /// Delete memories by id, or every memory that has expired (--expired).
    Forget {
        /// Memory ids.
        #[arg(required_unless_present = "expired", conflicts_with = "expired")]
        ids: Vec<i64>,
        /// Delete every memory that has expired by now (none is not an error).
        #[arg(long)]
        expired: bool,
    },
    /// Show the data root, counts, model and index state, access and integrity.
    #[command(after_help = "Exit codes: 0 ok; 1 operational failure, or --check found damage (the status is still printed).")]
    Status {
        /// Run SQLite's full integrity check (reads every page; slow on a large store).
        #[arg(long)]
        check: bool,
    },
    /// Serve the MCP tools over stdio (for Claude Code, Codex, any MCP client).
    Mcp {
        /// Tool profile: core, code, full, power or whole (nested; loop tools from code up).
        #[arg(long, env = "SLM_MCP_PROFILE", default_value = "full")]
        profile: String,
    },
    /// Bounded loops: wait for a gate to pass, under hard bounds, with a durable ledger.
    #[command(subcommand)]
    Loop(loops::LoopCommand),
    /// Explain loop gate decisions without running a loop.
    #[command(subcommand)]
    Gate(loops::GateCommand),
    /// A read-only web page of memories and loops (live while a run is going).
    #[command(after_help = DASHBOARD_HELP)]
    Dashboard {
        /// Port to listen on (0 = any free port).
        #[arg(long, default_value_t = slm::dashboard::DEFAULT_PORT)]
        port: u16,
        /// Address to bind; anything but loopback needs --allow-remote (0.0.0.0 or :: = every interface).
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// Allow a non-loopback --bind (the page shows every memory; a secret is then required).
        #[arg(long)]
        allow_remote: bool,
        /// Read the secret from this file (trimmed, at least 32 characters) instead of
        /// generating one; on a loopback bind it turns the secret on.
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// Also accept requests whose Host header is NAME (a host name or IP address, no port;
        /// repeat for several), e.g. the name a reverse proxy forwards.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_hosts: Vec<String>,
        /// Open the page in the default browser.
        #[arg(long)]
        open: bool,
    },
    /// The derived vector files (memory-mapped copies of the store's vectors): their state, or
    /// `slm index rebuild` to rewrite them.
    Index {
        #[command(subcommand)]
        cmd: Option<index::IndexCommand>,
    },
    /// Where the agent plugin lives, to install it in Claude Code or Codex.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Embed rows stored without a vector (agent-driven ledger laps); `loop step` starts this.
    #[command(hide = true)]
    EmbedPending,
    /// Precompute the optimised model files (scripts/setup.sh runs this once).
    #[command(hide = true)]
    PrepareModel,
    /// Bulk-remember a JSON Lines file of {"content": "...", "tags": [...], "embedding": [...]}
    /// objects (tags and embedding optional; an embedding is 384 numbers from the same model).
    #[command(
        after_help = "Exit codes: 0 every line imported; 2 some lines were skipped (the rest is stored) or invalid input; 1 operational failure."
    )]
    Import {
        /// The .jsonl file ("-" for standard input).
        file: PathBuf,
    },
    /// Write the whole store as JSON Lines that `slm import` reads back: memories with their
    /// embeddings, kinds and times, then loop runs and laps.
    #[command(
        after_help = "Example: slm export --data-dir A | slm import --data-dir B -\nThe summary goes to standard error when the lines go to standard output."
    )]
    Export {
        /// Write to this file (written whole, then renamed into place) instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Print a shell completion script (e.g. `slm completions bash > ~/.local/share/bash-completion/completions/slm`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `slm man > ~/.local/share/man/man1/slm.1`.
    Man,
}

/// `slm dashboard --help`: remote use.
const DASHBOARD_HELP: &str = "\
Loopback (the default) needs no secret. Remote use: `slm dashboard --bind 0.0.0.0 --allow-remote`
generates a 256-bit secret (or reads --token-file) and prints it once, in the URL it announces
(http://HOST:PORT/?token=...). Opening that URL trades the secret for a session cookie
(HttpOnly, SameSite=Strict) and removes it from the address bar; API clients send
`Authorization: Bearer SECRET`. Without it every path answers 401. The secret is never printed
again: keep the first line. Requests must name the dashboard in their Host header: the bound
address; for 0.0.0.0 or :: also localhost, 127.0.0.1, [::1], the machine's hostname and its
interface addresses; plus every --allow-host.

Plain HTTP: the secret and every memory cross the network unencrypted. Beyond a trusted
network, keep the dashboard on loopback with --token-file and put a TLS-terminating reverse
proxy in front of it (with --allow-host for the name the proxy forwards).";

#[derive(Subcommand, Debug)]
enum PluginCommand {
    /// Print the path of the Claude Code plugin (or, with --codex, of the Codex skill).
    Path {
        /// The Codex skill folder instead of the Claude Code plugin.
        #[arg(long)]
        codex: bool,
    },
}

/// The folder holding the plugin marketplace (`.claude-plugin/marketplace.json`, `plugin/`,
/// `codex/`): the installed wheel's copy (`PREFIX/share/slm-memory/marketplace`, beside its
/// models), else the repository holding them, walking up from the (symlink-resolved)
/// executable, then from the working directory.
fn plugin_root() -> slm::Result<PathBuf> {
    let exe = std::env::current_exe().ok().and_then(|p| p.canonicalize().ok());
    let installed = slm::embed::locate::package_share().map(|share| share.join("marketplace"));
    if let Some(dir) = installed.filter(|d| d.join("plugin/.claude-plugin/plugin.json").is_file()) {
        return Ok(dir);
    }
    let cwd = std::env::current_dir().ok();
    exe.iter()
        .filter_map(|p| p.parent().map(std::path::Path::to_path_buf))
        .chain(cwd)
        .find_map(|start| start.ancestors().find(|d| d.join("plugin/.claude-plugin/plugin.json").is_file()).map(|d| d.to_path_buf()))
        .ok_or_else(|| Error::NotFound { what: "plugin folder", id: "plugin/.claude-plugin/plugin.json near the slm binary".into() })
}

/// Parses arguments, runs the command and returns the process exit code.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            quiet_on_closed_pipe();
            let code = if e.use_stderr() { EXIT_INVALID } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    // The servers write to sockets and to an MCP client's pipe: a peer going away is an error
    // they handle, never a signal that kills them. Every other command prints and ends.
    if !matches!(cli.command, Command::Mcp { .. } | Command::Dashboard { .. }) {
        quiet_on_closed_pipe();
    }
    init_tracing();
    let json = cli.global.json;
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => report_error(&e, json),
    };
    flush_engines();
    code
}

/// Restores SIGPIPE's default action, as in C programs (and ripgrep, cargo): writing to a
/// closed pipe (`slm list | head -1`) ends the process quietly by the signal instead of failing
/// the write with EPIPE, which `println!` turns into a panic. Rust ignores SIGPIPE by default.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler code; it runs
    // before this process starts any thread that writes.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn init_tracing() {
    // Logs go to stderr and are off unless SLM_LOG is set (e.g. SLM_LOG=info).
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLM_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Prints an error on stderr (as JSON with `--json`) and returns its exit code.
pub fn report_error(e: &Error, json: bool) -> i32 {
    let code = match e {
        Error::InvalidInput { .. } => EXIT_INVALID,
        _ => EXIT_FAILURE,
    };
    if json {
        eprintln!("{}", json!(slm::ErrorEnvelope::from(e)));
    } else {
        eprintln!("slm: error: {e}");
    }
    code
}

/// Engines this process opened, to flush before it exits.
static OPENED: parking_lot::Mutex<Vec<&'static Engine>> = parking_lot::Mutex::new(Vec::new());

/// Opens the data root for a one-shot command. The engine is never dropped: that would unload
/// the ONNX model, which took tens of milliseconds after the command's work was done. The OS
/// reclaims it at exit; [`flush_engines`] first prints, then writes what its ledger writer
/// still holds and closes the store, so the data root is left cleanly closed.
fn open(global: &Global) -> slm::Result<&'static Arc<Engine>> {
    open_with(global, Embeds::No, None)
}

/// What a one-shot command will ask of the model, so that loading it can start at once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Embeds {
    /// Nothing (or rarely): the model loads on first use, if ever.
    No,
    /// It embeds a text (recall, remember, a gate query): the model loads on a background
    /// thread while the store opens and the index maps.
    Text,
    /// It embeds and counts tokens (a loop run): the token counter loads alongside.
    TextAndTokens,
    /// It only counts tokens (the demo's laps): the counter loads while the store opens.
    Tokens,
}

/// Background loads still running inside ONNX Runtime; joined before the process exits, so
/// that exit never tears the runtime down under a loading thread.
static LOADS: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>> = parking_lot::Mutex::new(Vec::new());

/// `query`: the one text the command embeds, when known. If an earlier process left its
/// vector in the data root (`slm::embed::query_cache`), the model is not loaded at all.
fn open_with(global: &Global, embeds: Embeds, query: Option<&str>) -> slm::Result<&'static Arc<Engine>> {
    let embedder = Arc::new(OnnxEmbedder::locate().quick_start());
    let root = DataRoot::resolve(global.data_dir.clone())?.with_store(global.store.as_deref())?;
    let cached = || {
        let files = slm::embed::Embedder::model_files(&*embedder);
        query.zip(files).and_then(|(q, f)| QueryCache::new(&root.dir, f).map(|c| c.contains(q))).unwrap_or(false)
    };
    let model = matches!(embeds, Embeds::Text | Embeds::TextAndTokens) && !cached();
    let count = matches!(embeds, Embeds::Tokens | Embeds::TextAndTokens);
    LOADS.lock().extend(embedder.preload(model, count));
    let engine: &'static Arc<Engine> = Box::leak(Box::new(Arc::new(Engine::open(&root, embedder)?)));
    attach_progress(engine, global.json, "indexing vectors");
    OPENED.lock().push(engine.as_ref());
    Ok(engine)
}

/// Stores every lap still queued in the ledger writers of the engines this process opened.
fn flush_engines() {
    // The answer goes out first; closing the store (a WAL checkpoint) follows it.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // The process `_exit`s next: PostgreSQL sessions need no goodbye (see leave_at_exit).
    slm::storage::pg::leave_at_exit();
    for e in OPENED.lock().drain(..) {
        e.close();
    }
    for h in LOADS.lock().drain(..) {
        let _ = h.join();
    }
}
/// Shows long index work (the first search of a large store without derived files, a
/// rebuild) as a progress line on a terminal; nothing otherwise.
fn attach_progress(engine: &Engine, json: bool, what: &'static str) {
    if json || !std::io::stderr().is_terminal() {
        return;
    }
    let bar: Arc<std::sync::OnceLock<indicatif::ProgressBar>> = Arc::default();
    engine.set_progress(Arc::new(move |done, _| {
        let b = bar.get_or_init(|| {
            let b = indicatif::ProgressBar::new_spinner();
            if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} rows ({per_sec})") {
                b.set_style(style);
            }
            b.set_message(what);
            b
        });
        b.set_position(done);
    }));
}

fn dispatch(cli: Cli) -> slm::Result<i32> {
    let g = &cli.global;
    let out = output::Printer { json: g.json };
    match cli.command {
        Command::Remember { content, tags, ttl, expires_at } => {
            // Checked before the data root opens: bad input writes nothing.
            let expires = slm::expiry::from_inputs(
                ttl.map(|t| move || slm::expiry::parse_ttl("ttl", &t)),
                expires_at.as_deref(),
                "ttl",
                "expires_at",
            )?;
            let r = open_with(g, Embeds::Text, None)?.remember_expiring(&content, &tags, expires.as_deref())?;
            out.remembered(&r);
        }
        Command::Recall { query, limit, tags, min_score, laps, include_expired } => {
            let q = RecallQuery { query, limit, tags, min_score, include_laps: laps, include_expired };
            let r = open_with(g, Embeds::Text, Some(&q.query))?.recall(&q)?;
            out.recalled(&r);
        }
        Command::List { tags, limit, kind, before, include_expired } => {
            let kind = slm::memory::parse_kind_filter("kind", &kind)?;
            let rows = open(g)?.list(&slm::engine::ListQuery { tags: &tags, kind, limit, before, include_expired })?;
            out.memories(&rows);
        }
        Command::Forget { ids, expired } => {
            let gone = if expired { open(g)?.forget_expired()? } else { open(g)?.forget(&ids)? };
            out.forgotten(&gone);
        }
        Command::Status { check } => {
            let engine = open(g)?;
            let verdict = if check { Some(engine.check_integrity()?) } else { None };
            out.status(&engine.status()?);
            if verdict.is_some_and(|v| v != "ok") {
                return Ok(EXIT_FAILURE);
            }
        }
        Command::Import { file } => return import(g, &out, &file),
        Command::Export { output } => export(g, output.as_deref())?,
        Command::Index { cmd } => return index::dispatch(open(g)?, cmd, g.json),
        Command::Dashboard { port, bind, allow_remote, token_file, allow_hosts, open: open_browser } => {
            let o = slm::dashboard::Options { bind, port, allow_remote, open: open_browser, token_file, allow_hosts, json: g.json };
            slm::dashboard::check_bind(&o)?;
            crate::SERVER_MODE.store(true, std::sync::atomic::Ordering::Release);
            let root = DataRoot::resolve(g.data_dir.clone())?.with_store(g.store.as_deref())?;
            slm::dashboard::serve(&root, &o, Arc::new(OnnxEmbedder::locate()))?;
        }
        Command::Plugin(PluginCommand::Path { codex }) => {
            let root = plugin_root()?;
            let path = if codex { root.join("codex/skills/slm-loop") } else { root.join("plugin") };
            if g.json {
                println!("{}", json!({"path": path, "marketplace": root}));
            } else {
                println!("{}", path.display());
            }
        }
        Command::EmbedPending => {
            let n = open(g)?.backfill_pending_alone()?;
            if g.json {
                println!("{}", json!({"embedded": n}));
            }
        }
        Command::PrepareModel => {
            let files = slm::embed::ModelFiles::locate()?;
            let path = slm::embed::prepare_optimized_model(&files).map_err(|message| Error::Model { message })?;
            if g.json {
                println!("{}", json!({"path": path}));
            } else {
                println!("{}", path.display());
            }
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "slm", &mut script);
            print_text(g.json, "script", script)?;
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .map_err(|source| Error::Io { context: "cannot render the man page".into(), source })?;
            print_text(g.json, "man", page)?;
        }
        Command::Mcp { profile } => {
            let profile = slm::mcp::Profile::parse(&profile)?;
            crate::SERVER_MODE.store(true, std::sync::atomic::Ordering::Release);
            let root = DataRoot::resolve(g.data_dir.clone())?.with_store(g.store.as_deref())?;
            slm::mcp::serve_stdio(&root, profile, Arc::new(OnnxEmbedder::locate()))?;
        }
        Command::Gate(loops::GateCommand::Eval(args)) => return loops::gate_eval(args, g.json),
        Command::Gate(loops::GateCommand::Check(args)) => {
            let req = args.request();
            // Bad input is refused before the data root is opened (or created).
            slm::loops::explain::validate(&req)?;
            return loops::gate_check(open_with(g, Embeds::TextAndTokens, None)?, &req, g.json);
        }
        Command::Loop(cmd) => {
            // Reject bad loop input before touching the data root: nothing is written.
            let checked = cmd.check()?;
            let (embeds, query) = match &checked {
                loops::Checked::Run(c) => match &c.gate {
                    slm::record::GateSpec::Memory { gate_query, .. } => (Embeds::TextAndTokens, Some(gate_query.clone())),
                    // Tag-only gates embed nothing: the model and ONNX Runtime stay unloaded.
                    slm::record::GateSpec::Gates { gates, .. } => match gates.iter().find_map(|g| g.query.clone()) {
                        Some(q) => (Embeds::TextAndTokens, Some(q)),
                        None => (Embeds::Tokens, None),
                    },
                    _ => (Embeds::Tokens, None),
                },
                _ => (Embeds::No, None),
            };
            return loops::dispatch(open_with(g, embeds, query.as_deref())?, checked, g.json);
        }
    }
    Ok(0)
}

/// Prints generated text as is, or with `--json` as `{"<key>": text}`.
fn print_text(json: bool, key: &str, text: Vec<u8>) -> slm::Result<()> {
    let text = String::from_utf8(text).map_err(|e| Error::Internal(e.to_string()))?;
    if json {
        println!("{}", json!({ key: text }));
    } else {
        print!("{text}");
    }
    Ok(())
}

/// `slm export`: to a file written aside and renamed into place (a failed export leaves no
/// half file), or to standard output.
fn export(g: &Global, output: Option<&std::path::Path>) -> slm::Result<()> {
    let engine = open(g)?;
    let summary = match output {
        Some(path) => {
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            let io = |e| Error::Io { context: format!("cannot write {}", tmp.display()), source: e };
            let file = std::fs::File::create(&tmp).map_err(io)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
            let written = slm::export::export_jsonl(engine, &mut w).and_then(|s| {
                let file = w.into_inner().map_err(|e| io(e.into_error()))?;
                file.sync_all().map_err(io)?;
                std::fs::rename(&tmp, path).map_err(io)?;
                Ok(s)
            });
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            written?
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            slm::export::export_jsonl(engine, &mut w)?
        }
    };
    let line = if g.json {
        json!(summary).to_string()
    } else {
        format!("exported {} memories, {} loop runs, {} laps", summary.memories, summary.runs, summary.laps)
    };
    if output.is_some() {
        println!("{line}");
    } else {
        eprintln!("{line}");
    }
    Ok(())
}

fn import(g: &Global, out: &output::Printer, file: &std::path::Path) -> slm::Result<i32> {
    let engine = open(g)?;
    let (reader, total): (Box<dyn std::io::BufRead>, Option<u64>) = if file.as_os_str() == "-" {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let f = std::fs::File::open(file).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::invalid("file", file.display(), "must be an existing JSON Lines file")
            } else {
                Error::Io { context: format!("cannot open {}", file.display()), source: e }
            }
        })?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(std::io::BufReader::with_capacity(1 << 20, f)), len)
    };
    let bar = if std::io::stderr().is_terminal() && !g.json {
        let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} importing [{bar:30}] {bytes}/{total_bytes} ({eta})") {
            bar.set_style(style.progress_chars("=> "));
        }
        Some(bar)
    } else {
        None
    };
    let summary = slm::import::import_jsonl(engine, reader, &mut |done| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let summary = match summary {
        Ok(s) => s,
        Err(stopped) => {
            let slm::import::ImportStopped { summary, error } = *stopped;
            let code = report_error(&error, g.json);
            out.import_stopped(&summary);
            return Ok(code);
        }
    };
    out.imported(&summary);
    // Skipped lines are invalid input: the rest was imported, but the caller must know.
    Ok(if summary.skipped.is_empty() { 0 } else { EXIT_INVALID })
}
