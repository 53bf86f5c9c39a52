//! A private PostgreSQL cluster for the tests: `initdb` in a temporary directory as the
//! unprivileged `postgres` user (when the tests run as root), a server listening only on a Unix
//! socket in that directory. The shared one is started on first use and stopped
//! (`pg_ctl -m immediate stop`, its directory removed) when the test process exits; a private
//! one when its handle drops. Each test gets a database of its own (`CREATE DATABASE`).
//!
//! `scripts/test.sh` installs Debian's `postgresql` where no `initdb` is found.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// A running private cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// The OS user the server runs as (`None`: the current user).
    user: Option<&'static str>,
    /// The server options (`pg_ctl -o`), kept for a restart.
    opts: String,
    next_db: Mutex<u32>,
}

/// The cluster shared by the tests of this process.
static SHARED: OnceLock<Cluster> = OnceLock::new();

/// Stops the shared cluster when the test process exits (statics are never dropped).
extern "C" fn stop_shared() {
    if let Some(c) = SHARED.get() {
        c.stop();
        let _ = std::fs::remove_dir_all(c.dir.path());
    }
}

/// The newest installed server binaries (`/usr/lib/postgresql/<v>/bin`).
fn server_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop()
}

/// True when running as root (the server refuses to run as root).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Cluster {
    /// The shared cluster, started on first use. Panics with a clear message when no
    /// PostgreSQL server binaries are installed (run scripts/test.sh).
    pub fn shared() -> &'static Cluster {
        SHARED.get_or_init(|| {
            // SAFETY: registers a plain function with no arguments; it runs once at exit.
            unsafe { libc::atexit(stop_shared) };
            Cluster::private()
        })
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let mut c = match self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(self.bin.join(args[0]));
                c
            }
            None => Command::new(self.bin.join(args[0])),
        };
        c.args(&args[1..]).output().expect("run a PostgreSQL tool")
    }

    /// A cluster of the caller's own (for a test that stops the server).
    pub fn private() -> Cluster {
        Cluster::start(None)
    }

    /// A cluster of the caller's own that also listens on loopback TCP (127.0.0.1, trust) on a
    /// free port, with `ssl = on` when `tls` gives the server's certificate and key files.
    pub fn private_tcp(tls: Option<(&Path, &Path)>) -> Cluster {
        Cluster::start(Some(tls))
    }

    fn start(tcp: Option<Option<(&Path, &Path)>>) -> Cluster {
        let bin = server_bin().expect("PostgreSQL server binaries (initdb) not found; run scripts/test.sh");
        let dir = tempfile::Builder::new().prefix("slm-pg-").tempdir().expect("tempdir");
        let user = is_root().then_some("postgres");
        if user.is_some() {
            let st = Command::new("chown").arg("postgres").arg(dir.path()).status().expect("chown");
            assert!(st.success(), "chown the cluster directory to postgres");
        }
        // A port per process, so parallel test binaries never share a socket name.
        let mut port = 20_000 + (std::process::id() % 40_000) as u16;
        if tcp.is_some() {
            // TCP ports are shared by every cluster on the machine: ask the kernel for a free one.
            port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        }
        let mut c = Cluster { dir, bin, port, user, opts: String::new(), next_db: Mutex::new(0) };
        let data = c.data_dir();
        let out = c.run(&["initdb", "-D", data.to_str().unwrap(), "-U", "slm", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        // A second role with a password, for the wrong-credentials tests.
        std::fs::write(data.join("pg_hba.conf"), "local all secret scram-sha-256\nlocal all all trust\nhost all all 127.0.0.1/32 trust\n")
            .expect("pg_hba.conf");
        let listen = if tcp.is_some() { "127.0.0.1" } else { "" };
        let mut opts =
            format!("-k {} -c listen_addresses='{listen}' -p {} -c fsync=off -c max_connections=200", c.dir.path().display(), c.port);
        if let Some(Some((cert, key))) = tcp {
            for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
                std::fs::copy(from, data.join(to)).expect("copy the server's TLS files");
            }
            let key = data.join("server.key");
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod key");
            if let Some(u) = user {
                let st = Command::new("chown").arg(u).arg(data.join("server.crt")).arg(&key).status().expect("chown");
                assert!(st.success(), "chown the TLS files to {u}");
            }
            opts.push_str(" -c ssl=on -c log_connections=on");
        }
        c.opts = opts.clone();
        let log = c.dir.path().join("log");
        let out = c.run(&["pg_ctl", "-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &opts, "-w", "start"]);
        if !out.status.success() {
            // The port may be taken by an unrelated server: one more try on another.
            c.port = c.port.wrapping_add(7919) % 40_000 + 20_000;
            let opts = opts.replace(&format!("-p {}", port), &format!("-p {}", c.port));
            c.opts = opts.clone();
            let out = c.run(&["pg_ctl", "-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &opts, "-w", "start"]);
            assert!(out.status.success(), "pg_ctl start: {}", String::from_utf8_lossy(&out.stderr));
        }
        c.sql("postgres", "CREATE ROLE secret LOGIN SUPERUSER PASSWORD 'hunter2-pw'");
        c
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs SQL in `db` as the superuser `slm` (psql).
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.socket_dir())
            .args(["-p", &self.port.to_string(), "-U", "slm", "-d", db, "-c", sql])
            .output()
            .expect("psql");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The URL of database `db` for user `user` (with `password` if given).
    pub fn url_for(&self, user: &str, password: Option<&str>, db: &str) -> String {
        let auth = match password {
            Some(p) => format!("{user}:{p}"),
            None => user.to_string(),
        };
        format!("postgres://{auth}@localhost/{db}?host={}&port={}", self.socket_dir().display(), self.port)
    }

    /// A fresh database for one test; returns its URL.
    pub fn database(&self) -> String {
        let db = self.database_name();
        self.url_for("slm", None, &db)
    }

    /// A fresh database for one test; returns its name.
    pub fn database_name(&self) -> String {
        let n = {
            let mut n = self.next_db.lock().unwrap();
            *n += 1;
            *n
        };
        let db = format!("t{n}");
        self.sql("postgres", &format!("CREATE DATABASE {db}"));
        db
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Stops the server at once (as a crash would), keeping its files.
    pub fn stop(&self) {
        let data = self.data_dir();
        let _ = self.run(&["pg_ctl", "-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
    }

    /// Stops the server as an administrator would (`-m fast`: sessions are ended, open
    /// transactions rolled back), keeping its files.
    pub fn stop_fast(&self) {
        let data = self.data_dir();
        let out = self.run(&["pg_ctl", "-D", data.to_str().unwrap(), "-m", "fast", "-w", "stop"]);
        assert!(out.status.success(), "pg_ctl stop: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Starts the stopped server again on the same port.
    pub fn restart(&self) {
        let data = self.data_dir();
        let opts = &self.opts;
        let log = self.dir.path().join("log");
        let out = self.run(&["pg_ctl", "-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", opts, "-w", "start"]);
        assert!(out.status.success(), "pg_ctl start: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
