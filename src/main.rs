//! The `slm` binary: parses the command line and hands off to [`cli`].
//!
//! Everything here is surface: argument parsing, exit codes and printing. The work is done by
//! the library's engine, which is why the binary is the only place `anyhow`-style reporting
//! and `process::exit` appear.

mod cli;

use std::sync::atomic::{AtomicBool, Ordering};

/// Set while serving MCP: a panic in one request must not take the server down (tokio turns it
/// into that request's error), so the hook only reports it.
pub static SERVER_MODE: AtomicBool = AtomicBool::new(false);

fn main() {
    // Microsoft's builds of ONNX Runtime (1.31, the one scripts/setup.sh installs) open an
    // event database in ~/.cache/Microsoft/DeveloperTools when their environment is created
    // and try to send usage events to Microsoft. This variable keeps that from starting at
    // all (the library also turns events off, see slm::embed, but only after creation). It
    // is set here, before any thread exists, because setting the environment later races
    // with C code reading it. (Edition 2024 makes set_var unsafe: this is why it is sound.)
    // Processes slm starts (verifiers, gate commands, embed-pending) inherit it.
    if std::env::var_os("ORT_DISABLE_TELEMETRY").is_none() {
        std::env::set_var("ORT_DISABLE_TELEMETRY", "1");
    }
    // A bug must never show a user a backtrace: one line, exit 1.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        // A closed stdout (`slm dashboard | head -1`, where SIGPIPE stays ignored) is not a bug.
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("slm: internal error: {msg}{at}; please report this");
        if !SERVER_MODE.load(Ordering::Acquire) {
            std::process::exit(1);
        }
    }));
    let code = cli::run();
    // Leave without running the C++ exit handlers of ONNX Runtime (its static teardown took
    // ~30 ms after the answer was printed, which `loop run` callers waited for). Everything
    // slm writes is committed and stdout is flushed by now.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process at once; no Rust state is touched after it.
    unsafe { libc::_exit(code) }
}
