//! TLS to PostgreSQL (`sslmode`, issue #13): private clusters on loopback TCP, one with
//! `ssl = on` and a certificate for `localhost` signed by a throwaway CA made with the
//! `openssl` CLI, one without TLS; the real binary connects with each mode. Whether a session
//! was encrypted is read from the server's own connection log (`log_connections`), which says
//! `SSL enabled` for a TLS session.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{expect_exit, Root};
use crate::pg::Cluster;

/// A password in every URL: the clusters trust loopback, so it is never checked, only shown
/// (it must not be).
const PW: &str = "tls-secret-pw";

/// Runs `openssl ARGS` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Makes a CA named `name` in `dir` (`name.crt`, `name.key`).
fn make_ca(dir: &Path, name: &str) -> PathBuf {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    dir.join(crt)
}

/// A server certificate for DNS name `localhost` only, signed by CA `ca` in `dir`; returns
/// (certificate, key).
fn make_server_cert(dir: &Path, ca: &str) -> (PathBuf, PathBuf) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    (dir.join("server.crt"), dir.join("server.key"))
}

/// `slm ARGS` on a fresh data root against `url`.
fn slm(url: &str, args: &[&str]) -> Output {
    Root::on(url).run(args)
}

/// Asserts a failure: exit `code`, one line containing `needle`, no password.
fn fails(o: &Output, code: i32, what: &str, needle: &str) {
    let err = expect_exit(o, code, what);
    let all = format!("{err}{}", String::from_utf8_lossy(&o.stdout));
    assert!(!all.contains(PW), "{what}: password shown: {all}");
    assert!(err.contains(needle), "{what}: expected {needle:?} in: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
}

/// Asserts success and returns stdout.
fn works(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
    assert!(!out.contains(PW), "{what}: password shown: {out}");
    out
}

/// The server's "connection authorized" log lines for database `db`.
fn sessions(cluster: &Cluster, db: &str) -> Vec<String> {
    let tag = format!("database={db} ");
    cluster.log().lines().filter(|l| l.contains("connection authorized") && l.contains(&tag)).map(str::to_string).collect()
}

/// True when slm's sessions on `db` were all encrypted (and there was at least one).
fn all_encrypted(cluster: &Cluster, db: &str) -> bool {
    let s = sessions(cluster, db);
    assert!(!s.is_empty(), "no session of slm on {db} in the server log:\n{}", cluster.log());
    s.iter().all(|l| l.contains("SSL enabled"))
}

/// Against a server with TLS: `require` and the default (`prefer`) encrypt; `verify-full`
/// with the right CA and host name works; a wrong CA, or a host name the certificate does not
/// name, fails with one line (exit 1), while `verify-ca` ignores the name; an unknown
/// `sslmode` or an unreadable `sslrootcert` is invalid input naming `store` (exit 2).
#[test]
fn sslmode_against_a_tls_server() {
    let certs = tempfile::tempdir().unwrap();
    let ca = make_ca(certs.path(), "ca");
    let wrong_ca = make_ca(certs.path(), "other-ca");
    let (crt, key) = make_server_cert(certs.path(), "ca");
    let cluster = Cluster::private_tcp(Some((&crt, &key)));
    let port = cluster.port;
    let ca = ca.display().to_string();
    let wrong_ca = wrong_ca.display().to_string();
    // Host `localhost` for the name check, dialled at 127.0.0.1 (the server listens on IPv4).
    let by_name = |db: &str, params: &str| format!("postgres://slm:{PW}@localhost:{port}/{db}?hostaddr=127.0.0.1&{params}");
    let by_ip = |db: &str, params: &str| format!("postgres://slm:{PW}@127.0.0.1:{port}/{db}?{params}");

    let db = cluster.database_name();
    works(&slm(&by_ip(&db, "sslmode=require"), &["remember", "encrypted with require"]), "require");
    assert!(all_encrypted(&cluster, &db), "require: a plain session: {:?}", sessions(&cluster, &db));

    let db = cluster.database_name();
    works(&slm(&by_ip(&db, "connect_timeout=5"), &["remember", "encrypted by default"]), "prefer");
    assert!(all_encrypted(&cluster, &db), "prefer: a plain session: {:?}", sessions(&cluster, &db));

    let db = cluster.database_name();
    let url = by_name(&db, &format!("sslmode=verify-full&sslrootcert={ca}"));
    works(&slm(&url, &["remember", "verified in full"]), "verify-full");
    assert!(all_encrypted(&cluster, &db));
    let out = works(&slm(&url, &["status"]), "verify-full status");
    assert!(out.contains("slm:***@localhost"), "status shows the URL redacted: {out}");

    let wrong = by_name(&db, &format!("sslmode=verify-full&sslrootcert={wrong_ca}"));
    fails(&slm(&wrong, &["remember", "never stored"]), 1, "a wrong CA", "certificate");
    let wrong_name = by_ip(&db, &format!("sslmode=verify-full&sslrootcert={ca}"));
    fails(&slm(&wrong_name, &["remember", "never stored"]), 1, "a host name not in the certificate", "certificate");
    // verify-ca checks the chain only: the same URL works, a wrong CA still fails.
    works(&slm(&by_ip(&db, &format!("sslmode=verify-ca&sslrootcert={ca}")), &["status"]), "verify-ca by IP");
    fails(&slm(&by_ip(&db, &format!("sslmode=verify-ca&sslrootcert={wrong_ca}")), &["status"]), 1, "verify-ca, wrong CA", "certificate");
    // require with a root file verifies the chain, as libpq does.
    fails(&slm(&by_ip(&db, &format!("sslmode=require&sslrootcert={wrong_ca}")), &["status"]), 1, "require, wrong CA", "certificate");
    assert_eq!(Root::on(&url).count(), 1, "only the verified remember was stored");

    fails(&slm(&by_ip(&db, "sslmode=sometimes"), &["status"]), 2, "an unknown sslmode", "invalid store");
    let o = slm(&by_ip(&db, "sslmode=sometimes"), &["status", "--json"]);
    fails(&o, 2, "an unknown sslmode (JSON)", "\"field\":\"store\"");
    fails(&slm(&by_ip(&db, "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"), &["status"]), 2, "a missing root file", "sslrootcert");
}

/// Against a server without TLS: `require` and `verify-full` fail with one line (exit 1),
/// `prefer` and `disable` connect in plain text.
#[test]
fn sslmode_against_a_server_without_tls() {
    let cluster = Cluster::private_tcp(None);
    let db = cluster.database_name();
    let url = |params: &str| format!("postgres://slm:{PW}@127.0.0.1:{}/{db}?{params}", cluster.port);
    fails(&slm(&url("sslmode=require"), &["remember", "never stored"]), 1, "require, no TLS", "server does not support TLS");
    let certs = tempfile::tempdir().unwrap();
    let ca = make_ca(certs.path(), "ca");
    let verify = url(&format!("sslmode=verify-full&sslrootcert={}", ca.display()));
    fails(&slm(&verify, &["remember", "never stored"]), 1, "verify-full, no TLS", "server does not support TLS");
    works(&slm(&url("sslmode=prefer"), &["remember", "plain text is fine here"]), "prefer, no TLS");
    works(&slm(&url("sslmode=disable"), &["remember", "plain text on purpose"]), "disable");
    assert_eq!(Root::on(&url("sslmode=disable")).count(), 2, "both plain remembers stored, nothing else");
}
