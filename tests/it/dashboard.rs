//! `slm dashboard`: the JSON API against a real data root over real HTTP, the Host check and
//! the read-only rule, and the page in a real browser (Debian's Chromium via playwright-core).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

use crate::common::{expect_exit, Root};

struct Dashboard {
    child: Child,
    /// Where to connect (`127.0.0.1:PORT` even for a 0.0.0.0 bind).
    addr: String,
    /// A Host header the server accepts.
    host: String,
    /// The first line's URL, secret included.
    url: String,
    /// The rest of stdout, for the "never printed again" check.
    out: BufReader<ChildStdout>,
    /// Stderr, drained on a thread (SLM_LOG=trace can fill the pipe).
    err: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dashboard {
    /// Stops the server and returns everything it printed after the first line.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut rest = String::new();
        let _ = self.out.read_to_string(&mut rest);
        rest + &self.err.take().unwrap().join().unwrap()
    }

    /// The secret in the announced URL.
    fn token(&self) -> &str {
        self.url.split_once("?token=").map(|(_, t)| t).expect("the URL carries a token")
    }
}

fn start(root: &Root) -> Dashboard {
    start_with(root, &["dashboard", "--port", "0"])
}

/// Starts `slm ARGS` (a dashboard) with SLM_LOG=trace and reads its announced URL.
fn start_with(root: &Root, args: &[&str]) -> Dashboard {
    let mut child = root.cmd(args).env("SLM_LOG", "trace").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let url = match line.trim().strip_prefix("dashboard: ") {
        Some(u) => u.to_string(),
        None => serde_json::from_str::<Value>(line.trim())
            .ok()
            .and_then(|v| v["url"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}")),
    };
    let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let port = authority.rsplit(':').next().unwrap().to_string();
    let (addr, host) = if authority.starts_with("127.0.0.1:") {
        (authority.clone(), authority)
    } else {
        (format!("127.0.0.1:{port}"), format!("localhost:{port}"))
    };
    Dashboard { child, addr, host, url, out, err: Some(err) }
}

/// One HTTP/1.1 request; returns (status, body).
fn http(addr: &str, method: &str, path: &str, host: &str) -> (u16, String) {
    let (status, _, body) = http_full(addr, method, path, host, &[]);
    (status, body)
}

/// One HTTP/1.1 request with extra headers; returns (status, lowercased response headers, body).
fn http_full(addr: &str, method: &str, path: &str, host: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}Content-Length: 0\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status: u16 = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").map(|(h, b)| (h.to_ascii_lowercase(), b.to_string())).unwrap_or_default();
    // Chunked bodies: axum sends JSON with a length, HTML too; keep it simple.
    (status, head, body)
}

fn get(d: &Dashboard, path: &str) -> Value {
    let (status, body) = http(&d.addr, "GET", path, &d.host);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// The value of response header `name` (lowercase) in `head`.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')).map(str::trim))
}

#[test]
fn api_serves_memories_loops_runs_and_laps() {
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &["pr-42"]);
    root.remember("the weather is nice", &[]);
    let demo = root.run(&["loop", "demo", "--json"]);
    assert!(demo.status.success());
    let d = start(&root);

    let (status, html) = http(&d.addr, "GET", "/", &d.addr);
    assert_eq!(status, 200);
    assert!(html.contains("<title>slm dashboard</title>") && !html.contains("https://"), "assets are inline, no CDN");

    let s = get(&d, "/api/status");
    assert_eq!(s["memories"], 2);
    let r = get(&d, "/api/memories?q=PR%2042%20approved&limit=1");
    assert_eq!(r["hits"][0]["content"], "review complete: PR #42 is approved");
    assert!((r["hits"][0]["score"].as_f64().unwrap() - 0.834).abs() < 0.01);
    let l = get(&d, "/api/memories?limit=1");
    assert_eq!(l["memories"].as_array().unwrap().len(), 1);
    let next = l["next_before"].as_i64().unwrap();
    let l2 = get(&d, &format!("/api/memories?limit=1&before={next}"));
    assert_eq!(l2["memories"][0]["content"], "review complete: PR #42 is approved");
    assert_eq!(get(&d, "/api/memories?tags=pr-42")["memories"].as_array().unwrap().len(), 1);
    let laps = get(&d, "/api/memories?kind=lap&tags=loop:convergence-demo");
    assert_eq!(laps["memories"].as_array().unwrap().len(), 3);

    let loops = get(&d, "/api/loops");
    assert_eq!(loops["loops"][0]["name"], "convergence-demo");
    assert_eq!(loops["loops"][0]["runs"], 1);
    assert_eq!(loops["loops"][0]["last_status"], "converged");
    let runs = get(&d, "/api/runs?name=convergence-demo");
    let run_id = runs["runs"][0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(runs["runs"][0]["laps"], 3);
    assert!(runs["runs"][0]["duration_s"].as_f64().unwrap() > 0.0);
    let run = get(&d, &format!("/api/runs/{run_id}"));
    assert_eq!(run["laps"].as_array().unwrap().len(), 3);
    assert_eq!(run["params"]["limits"]["gate_min_score"], 1.0);
    let after = get(&d, &format!("/api/runs/{run_id}?after_lap=2"));
    assert_eq!(after["laps"].as_array().unwrap().len(), 1);
    assert_eq!(after["laps"][0]["decision"], "converged");

    // Errors: unknown run 404, bad parameters 400 naming the field.
    let (status, body) = http(&d.addr, "GET", "/api/runs/nope", &d.addr);
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(&d.addr, "GET", "/api/memories?kind=everything", &d.addr);
    assert_eq!(status, 400);
    assert!(body.contains("\"field\":\"kind\""), "{body}");
    let (status, _) = http(&d.addr, "GET", "/api/runs?limit=100000", &d.addr);
    assert_eq!(status, 400);
}

#[test]
fn runs_are_paginated() {
    let root = Root::new();
    root.json(&["status"]);
    {
        let mut store = slm::storage::Store::open(&root.db_path()).unwrap();
        for i in 0..120 {
            let row = slm::storage::RunRow {
                run_id: format!("bulk-{i:04}"),
                name: "bulk".into(),
                params: synthetic_params(),
                status: slm::record::RunStatus::Running,
                reason: None,
                laps: 0,
                started_at: slm::memory::now_rfc3339(),
                ended_at: None,
                pid: 0,
                proc_start: 0,
                result: None,
                state: None,
                host: None,
            };
            store.run_start(&row).unwrap();
            store.run_finish(&row.run_id, slm::record::RunStatus::MaxIterations, "synthetic", 1, "{}").unwrap();
        }
    }
    let d = start(&root);
    let mut seen = Vec::new();
    let mut path = "/api/runs?name=bulk&limit=50".to_string();
    loop {
        let page = get(&d, &path);
        seen.extend(page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()));
        match page["next_before"].as_i64() {
            Some(c) => path = format!("/api/runs?name=bulk&limit=50&before={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 120);
    assert_eq!(seen.first().unwrap(), "bulk-0119", "newest first");
    assert_eq!(seen.last().unwrap(), "bulk-0000");
}

#[test]
fn host_check_and_read_only() {
    let root = Root::new();
    let d = start(&root);
    let port = d.addr.rsplit(':').next().unwrap();
    for host in ["evil.example", "evil.example:80", "127.0.0.1:1", ""] {
        let (status, body) = http(&d.addr, "GET", "/api/status", host);
        assert_eq!(status, 403, "Host {host:?}: {body}");
    }
    let (status, _) = http(&d.addr, "GET", "/api/status", &format!("localhost:{port}"));
    assert_eq!(status, 200);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let (status, _) = http(&d.addr, method, "/api/memories", &d.addr);
        assert_eq!(status, 405, "{method} must not be allowed");
    }
    let (status, _) = http(&d.addr, "POST", "/api/loops/anything", &d.addr);
    assert_eq!(status, 404);
    // A non-loopback bind needs the explicit flag.
    let err = expect_exit(&root.run(&["dashboard", "--bind", "0.0.0.0", "--port", "0"]), 2, "non-loopback");
    assert!(err.contains("bind") && err.contains("--allow-remote"), "{err}");
}

#[test]
fn the_page_works_in_a_real_browser() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("tests/browser/dashboard.mjs");
    assert!(
        repo.join("tests/browser/node_modules/playwright-core").is_dir() && std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Debian's chromium and playwright-core: run scripts/test.sh"
    );
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &["pr-42"]);
    root.remember("the weather is nice", &[]);
    assert!(root.run(&["loop", "demo"]).status.success());
    // A run of two gates: one tag-only, one with a query, both passed.
    let signal = root.remember("all tests green on main", &["ci"]);
    let pair = root.run(&["loop", "run", "--name", "pair", "--gates", r#"[{"query": "tests green on main"}, {"tags": ["pr-42"]}]"#]);
    assert!(pair.status.success(), "{}", String::from_utf8_lossy(&pair.stderr));
    // A run that stays live while the browser watches (1 lap a second for up to 60 s).
    let mut live = root
        .cmd(&[
            "loop",
            "run",
            "--name",
            "live",
            "--gate-query",
            "never happens",
            "--gate-min-score",
            "0.99",
            "--max-wallclock-s",
            "60",
            "--poll-interval-s",
            "1",
            "--max-iterations",
            "200",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let d = start(&root);
    let shot = repo.join("target/dashboard.png");
    let out = Command::new("node").arg(&script).arg(format!("http://{}/", d.addr)).arg(&shot).arg("live").output().unwrap();
    let history = root.json(&["loop", "history", "--name", "live"]);
    let _ = root.run(&["loop", "cancel", history["runs"][0]["run_id"].as_str().unwrap()]);
    let _ = live.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser test failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let f: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert!(f["top_hit"].as_str().unwrap().contains("PR #42"));
    assert!((f["top_score"].as_f64().unwrap() - 0.834).abs() < 0.01);
    assert_eq!(f["demo_laps"], 3);
    assert_eq!(f["demo_points"], 3);
    assert_eq!(f["threshold_line"], 1);
    assert_eq!(f["demo_status"], "converged");
    let gates = f["gate_rows"].as_array().unwrap();
    assert_eq!(gates.len(), 2, "{f}");
    assert_eq!(gates[0][1], "tests green on main");
    assert_eq!(gates[0][3], "1 of 1");
    assert_eq!(gates[0][4], format!("#{signal}"));
    assert_eq!(gates[1][1], "(tags only)");
    assert_eq!(gates[1][2], "pr-42");
    assert!(f["loop_cell_lines"].as_array().unwrap().len() >= 6, "{f}");
    assert!(f["live_after"].as_i64() > f["live_before"].as_i64());
    assert!(f["csp"].as_str().unwrap().contains("script-src 'sha256-"), "the page is served with its CSP: {f}");
    assert_eq!(f["csp_violations"], serde_json::json!([]), "the CSP blocks nothing the page needs");
    assert!(shot.is_file());
    eprintln!("browser facts: {f}");
}

/// The params of a synthetic run row: a memory gate at 0.8 with the default bounds.
fn synthetic_params() -> slm::record::RunParams {
    let limits = slm::record::Limits {
        max_iterations: 20,
        max_wallclock_s: 15.0,
        poll_interval_s: 1.0,
        max_tokens: 0,
        no_progress_window: 0,
        gate_min_score: 0.8,
    };
    let gate = slm::record::GateSpec::Memory {
        gate_query: "synthetic".into(),
        gate_tags: Vec::new(),
        gate_verify: vec![slm::record::VerifySpec::Guard],
        gate_nli_min: 0.5,
    };
    slm::record::RunParams { limits, gate }
}

/// `slm dashboard --bind 0.0.0.0 --allow-remote` (issue #16): nothing without the secret, the
/// bearer header and the `?token=` → cookie exchange work, a wrong secret of the same length
/// does not, and the secret is printed once.
#[test]
fn a_remote_bind_requires_the_secret() {
    let root = Root::new();
    root.remember("a private memory", &["secret-stuff"]);
    let d = start_with(&root, &["dashboard", "--bind", "0.0.0.0", "--allow-remote", "--port", "0"]);
    let token = d.token().to_string();
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()), "256 bits as hex: {token}");
    let data_dir = root.dir().display().to_string();

    // Without the secret: 401 with the JSON error shape on every path and method, no data.
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/api/status"),
        ("GET", "/api/memories"),
        ("GET", "/api/runs/x"),
        ("GET", "/nope"),
        ("POST", "/api/memories"),
        ("GET", "/?token="),
    ] {
        let (status, head, body) = http_full(&d.addr, method, path, &d.host, &[]);
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert!(header(&head, "content-type").unwrap().starts_with("application/json"), "{head}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["kind"], "unauthorized");
        assert!(!body.contains("memories\":") && !body.contains(&data_dir) && !body.contains("private"), "{body}");
    }
    // A wrong secret of the same length, as bearer, cookie or exchange: 401.
    let mut wrong = token.clone().into_bytes();
    wrong[10] = if wrong[10] == b'a' { b'b' } else { b'a' };
    let wrong = String::from_utf8(wrong).unwrap();
    assert_eq!(wrong.len(), token.len());
    let bearer_wrong = format!("Bearer {wrong}");
    assert_eq!(http_full(&d.addr, "GET", "/api/status", &d.host, &[("Authorization", &bearer_wrong)]).0, 401);
    assert_eq!(http_full(&d.addr, "GET", &format!("/?token={wrong}"), &d.host, &[]).0, 401);
    let port = d.addr.rsplit(':').next().unwrap();
    let cookie_wrong = format!("slm_session_{port}={wrong}");
    assert_eq!(http_full(&d.addr, "GET", "/api/status", &d.host, &[("Cookie", &cookie_wrong)]).0, 401);
    // The secret itself is not the session cookie.
    let cookie_token = format!("slm_session_{port}={token}");
    assert_eq!(http_full(&d.addr, "GET", "/api/status", &d.host, &[("Cookie", &cookie_token)]).0, 401);

    // Bearer: 200.
    let bearer = format!("Bearer {token}");
    let (status, _, body) = http_full(&d.addr, "GET", "/api/status", &d.host, &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["memories"], 1);

    // The exchange: 303 to / with an HttpOnly, SameSite=Strict cookie that then opens everything.
    let (status, head, _) = http_full(&d.addr, "GET", &format!("/?token={token}"), &d.host, &[]);
    assert_eq!(status, 303, "{head}");
    assert_eq!(header(&head, "location"), Some("/"));
    let set = header(&head, "set-cookie").expect("a session cookie");
    for attr in ["httponly", "samesite=strict", "path=/"] {
        assert!(set.split(';').any(|a| a.trim() == attr), "{attr} missing: {set}");
    }
    assert!(!set.contains(&token), "the cookie is a session, not the secret");
    let cookie = set.split(';').next().unwrap().to_string();
    let (status, _, body) = http_full(&d.addr, "GET", "/api/memories", &d.host, &[("Cookie", &cookie)]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("a private memory"));
    let (status, _, html) = http_full(&d.addr, "GET", "/", &d.host, &[("Cookie", &format!("other=1; {cookie}"))]);
    assert!(status == 200 && html.contains("<title>slm dashboard</title>"));

    // Printed once: not in any later stdout line nor in the (trace-level) logs.
    let rest = d.stop();
    assert!(rest.contains("warning: the dashboard is reachable"), "stderr was captured: {rest}");
    assert!(!rest.contains(&token), "the secret was printed again:\n{rest}");
}

/// `--token-file` (also on loopback), `--json` announcement, the token file rules, and loopback
/// without a token file staying open.
#[test]
fn token_file_json_url_and_open_loopback() {
    let root = Root::new();
    let open = start(&root);
    assert!(!open.url.contains("token"), "{}", open.url);
    assert_eq!(http(&open.addr, "GET", "/api/status", &open.host).0, 200, "loopback needs no secret");
    drop(open);

    let file = root.tmp.path().join("token");
    let secret = "correct-horse-battery-staple-0123456789+/=";
    std::fs::write(&file, format!("  {secret}\n")).unwrap();
    let d = start_with(&root, &["--json", "dashboard", "--port", "0", "--token-file", file.to_str().unwrap()]);
    assert!(d.url.starts_with("http://127.0.0.1:"), "{}", d.url);
    assert_eq!(d.token(), "correct-horse-battery-staple-0123456789%2B%2F%3D", "percent-encoded in the URL");
    assert_eq!(http(&d.addr, "GET", "/api/status", &d.host).0, 401);
    let bearer = format!("Bearer {secret}");
    assert_eq!(http_full(&d.addr, "GET", "/api/status", &d.host, &[("Authorization", &bearer)]).0, 200);
    assert_eq!(http_full(&d.addr, "GET", &format!("/?token={}", d.token()), &d.host, &[]).0, 303);
    let rest = d.stop();
    assert!(!rest.contains(secret) && !rest.contains("correct-horse"), "{rest}");

    for (text, what) in [
        ("", "empty"),
        ("   \n", "blank"),
        ("only-31-characters-long-0123456", "short"),
        ("has spaces inside it but is long enough", "spaces"),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = expect_exit(&root.run(&["dashboard", "--port", "0", "--token-file", file.to_str().unwrap()]), 2, what);
        assert!(err.contains("token_file"), "{what}: {err}");
    }
    let err = expect_exit(&root.run(&["dashboard", "--port", "0", "--token-file", "/nonexistent/token"]), 2, "missing");
    assert!(err.contains("token_file"), "{err}");
    std::fs::write(&file, "short").unwrap();
    let err = expect_exit(&root.run(&["dashboard", "--port", "0", "--token-file", file.to_str().unwrap()]), 2, "short");
    assert!(err.contains("32"), "names the rule: {err}");
    let help = root.run(&["dashboard", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for words in ["--token-file", "Bearer", "reverse proxy", "TLS", "--allow-host"] {
        assert!(help.contains(words), "help lacks {words}: {help}");
    }
}

/// Issue #15 item 6: a 0.0.0.0 bind accepts the loopback names, the hostname and
/// `--allow-host` names (it used to accept only the literal `0.0.0.0:PORT`).
#[test]
fn an_any_address_bind_accepts_real_host_names() {
    let root = Root::new();
    let d = start_with(
        &root,
        &["dashboard", "--bind", "0.0.0.0", "--allow-remote", "--port", "0", "--allow-host", "dash.example", "--allow-host", "10.9.8.7"],
    );
    let port = d.addr.rsplit(':').next().unwrap().to_string();
    let bearer = format!("Bearer {}", d.token());
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_ascii_lowercase();
    assert!(d.url.starts_with(&format!("http://{hostname}:{port}/")), "announces the hostname: {}", d.url);
    let mut ok = vec!["localhost", "127.0.0.1", "[::1]", "dash.example", "DASH.example", "10.9.8.7", "0.0.0.0"];
    if hostname != "localhost" {
        ok.push(&hostname);
    }
    for name in ok {
        let host = format!("{name}:{port}");
        let (status, _, body) = http_full(&d.addr, "GET", "/api/status", &host, &[("Authorization", &bearer)]);
        assert_eq!(status, 200, "Host {host}: {body}");
    }
    for host in [
        "evil.example".to_string(),
        format!("evil.example:{port}"),
        format!("localhost:{}", port.parse::<u16>().unwrap() ^ 1),
        String::new(),
    ] {
        let (status, _, body) = http_full(&d.addr, "GET", "/api/status", &host, &[("Authorization", &bearer)]);
        assert_eq!(status, 403, "Host {host:?}: {body}");
    }
    drop(d);
    for bad in ["dash.example:80", "a/b", "", "-x"] {
        let err = expect_exit(&root.run(&["dashboard", "--port", "0", &format!("--allow-host={bad}")]), 2, bad);
        assert!(err.contains("allow_host"), "{bad}: {err}");
    }
}

/// Issue #15 item 6: nosniff, no framing and a CSP without remote sources on every response.
#[test]
fn security_headers_on_every_response() {
    let root = Root::new();
    let d = start(&root);
    for (path, host) in [("/", d.host.as_str()), ("/api/status", d.host.as_str()), ("/nope", d.host.as_str()), ("/", "evil.example")] {
        let (status, head, _) = http_full(&d.addr, "GET", path, host, &[]);
        assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"), "{status} {path}: {head}");
        assert_eq!(header(&head, "x-frame-options"), Some("deny"), "{path}: {head}");
        let csp = header(&head, "content-security-policy").unwrap_or_else(|| panic!("{path}: no CSP: {head}"));
        for d in ["default-src 'none'", "frame-ancestors 'none'", "connect-src 'self'", "script-src 'sha256-", "style-src 'sha256-"] {
            assert!(csp.contains(d), "{path}: CSP lacks {d}: {csp}");
        }
        assert!(!csp.contains("http") && !csp.contains("unsafe") && !csp.contains('*'), "{csp}");
    }
}

/// Issue #15 item 6: bad query parameters answer 400 with the JSON error shape naming the field
/// (they used to be axum's text/plain rejections, and `after_lap=-1` was accepted).
#[test]
fn query_errors_answer_json() {
    let root = Root::new();
    assert!(root.run(&["loop", "demo"]).status.success());
    let d = start(&root);
    let run_id = get(&d, "/api/runs?name=convergence-demo")["runs"][0]["run_id"].as_str().unwrap().to_string();
    for (path, field) in [
        ("/api/memories?limit=-1".to_string(), "limit"),
        ("/api/memories?limit=NaN".to_string(), "limit"),
        ("/api/memories?limit=0".to_string(), "limit"),
        ("/api/memories?before=x".to_string(), "before"),
        ("/api/runs?limit=-1".to_string(), "limit"),
        ("/api/runs?limit=NaN".to_string(), "limit"),
        ("/api/runs?before=-5".to_string(), "before"),
        (format!("/api/runs/{run_id}?after_lap=-1"), "after_lap"),
        (format!("/api/runs/{run_id}?after_lap=NaN"), "after_lap"),
        (format!("/api/runs/{run_id}?limit=1.5"), "limit"),
    ] {
        let (status, head, body) = http_full(&d.addr, "GET", &path, &d.host, &[]);
        assert_eq!(status, 400, "{path}: {body}");
        assert!(header(&head, "content-type").unwrap().starts_with("application/json"), "{path}: {head}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["kind"], "invalid_input");
        assert_eq!(v["error"]["field"], field, "{path}: {body}");
    }
    assert_eq!(get(&d, &format!("/api/runs/{run_id}?after_lap=0"))["laps"].as_array().unwrap().len(), 3);
    let (status, head, _) = http_full(&d.addr, "GET", "/nope", &d.host, &[]);
    assert!(status == 404 && header(&head, "content-type").unwrap().starts_with("application/json"), "{head}");
}

/// The `?token=` exchange in Chromium: the page renders, the secret leaves the address bar,
/// the cookie is HttpOnly and SameSite=Strict, and a browser without it gets 401.
#[test]
fn the_browser_trades_the_secret_for_a_cookie() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    assert!(
        repo.join("tests/browser/node_modules/playwright-core").is_dir() && std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Debian's chromium and playwright-core: run scripts/test.sh"
    );
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &["pr-42"]);
    let d = start_with(&root, &["dashboard", "--bind", "0.0.0.0", "--allow-remote", "--port", "0"]);
    let url = format!("http://{}/?token={}", d.addr, d.token());
    let shot = repo.join("target/dashboard-auth.png");
    let out = Command::new("node").arg(repo.join("tests/browser/auth.mjs")).arg(&url).arg(&shot).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser test failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let f: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(f["final_url"], format!("http://{}/", d.addr), "the secret left the address bar");
    assert!(f["first_row"].as_str().unwrap().contains("PR #42"), "{f}");
    assert_eq!(f["document_cookie"], "", "HttpOnly: scripts cannot read it");
    assert_eq!(f["cookie_http_only"], true);
    assert_eq!(f["cookie_same_site"], "Strict");
    assert_eq!(f["api_status"], 200);
    assert_eq!(f["without_cookie_status"], 401);
    assert_eq!(f["csp_violations"], 0);
    assert!(!d.stop().contains(url.split("?token=").nth(1).unwrap()));
}
