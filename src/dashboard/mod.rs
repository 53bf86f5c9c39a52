//! The dashboard surface: `slm dashboard`, a read-only web page over one data root.
//!
//! [`api`] serves a small paginated JSON API (memories, loops, runs, laps) by calling the
//! engine and the loop ledger; `page.html` (compiled into the binary: no CDN, works offline)
//! renders it, polling a running run's new laps every second. Only GET is routed. Every
//! request's `Host` header must name this dashboard ([`HostCheck`], DNS-rebinding
//! protection); a non-loopback bind needs `--allow-remote`, prints a warning and requires the
//! secret of [`auth`].

pub mod api;
pub mod auth;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::DataRoot;
use crate::{Error, Result};

/// Default port.
pub const DEFAULT_PORT: u16 = 8765;

/// How to serve.
#[derive(Debug, Clone)]
pub struct Options {
    pub bind: IpAddr,
    pub port: u16,
    /// Needed for a non-loopback `bind`.
    pub allow_remote: bool,
    /// Open the page in the default browser (xdg-open).
    pub open: bool,
    /// A file holding the secret (else one is generated for a non-loopback bind).
    pub token_file: Option<PathBuf>,
    /// More `Host` names to accept (`--allow-host`).
    pub allow_hosts: Vec<String>,
    /// Announce the URL as one JSON line `{"url": …}`.
    pub json: bool,
}

/// Checks the bind address rule (loopback, or an explicit `--allow-remote`) and the
/// `--allow-host` names.
pub fn check_bind(o: &Options) -> Result<()> {
    if !o.bind.is_loopback() && !o.allow_remote {
        return Err(Error::invalid(
            "bind",
            o.bind,
            "is not a loopback address; the dashboard shows every memory, so pass --allow-remote to expose it",
        ));
    }
    for h in &o.allow_hosts {
        normalize_host(h)?;
    }
    Ok(())
}

/// Serves until Ctrl-C. Prints the URL once listening, on stdout: `dashboard: URL`, or with
/// `json` one line `{"url": URL}`. With a secret the URL carries it (`?token=`); nothing
/// prints it again.
pub fn serve(root: &DataRoot, o: &Options, embedder: Arc<dyn crate::embed::Embedder>) -> Result<()> {
    check_bind(o)?;
    let token = match &o.token_file {
        Some(p) => Some(auth::read_token_file(p)?),
        None if !o.bind.is_loopback() => Some(auth::generate_token()?),
        None => None,
    };
    let (engine, runtime) = crate::serve::long_lived(root, embedder)?;
    runtime.block_on(async move {
        let addr = SocketAddr::new(o.bind, o.port);
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::io(format!("cannot listen on {addr}"), e))?;
        let local = listener.local_addr().map_err(|e| Error::io("cannot read the bound address", e))?;
        let hosts = HostCheck::new(local, &o.allow_hosts)?;
        if !o.bind.is_loopback() {
            eprintln!(
                "slm: warning: the dashboard is reachable from other machines at {}; it is read-only but shows every memory \
                 (secret required; Host names accepted: {}; add others with --allow-host)",
                display_addr(local),
                hosts.names().join(", ")
            );
        }
        let mut url = format!("http://{}:{}/", hosts.announce(), local.port());
        let auth = match token {
            Some(t) => {
                url.push_str("?token=");
                url.push_str(&auth::url_encode(&t));
                Some(auth::Auth::new(&t, local.port())?)
            }
            None => None,
        };
        if o.json {
            println!("{}", serde_json::json!({ "url": url }));
        } else {
            println!("dashboard: {url}");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if o.open {
            let _ = std::process::Command::new("xdg-open").arg(&url).spawn();
        }
        drop(url);
        let app = api::router(engine, hosts, auth);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| Error::io("the dashboard server failed", e))
    })
}

fn display_addr(a: SocketAddr) -> String {
    format!("{}:{}", host_of(a.ip()), a.port())
}

/// An address as it appears in a `Host` header (IPv6 in brackets).
fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(ip) => format!("[{ip}]"),
        IpAddr::V4(ip) => ip.to_string(),
    }
}

/// Which `Host` headers a request may carry: one of `names` with this dashboard's port (or no
/// port when that port is 80).
///
/// - always the bound address and every `--allow-host`;
/// - a loopback bind: also `localhost`, `127.0.0.1` and `[::1]`;
/// - an unspecified bind (`0.0.0.0`, `::`): also the loopback names, the machine's hostname
///   and every address of its network interfaces at start.
#[derive(Debug, Clone)]
pub struct HostCheck {
    names: Vec<String>,
    port: u16,
}

impl HostCheck {
    pub fn new(local: SocketAddr, allow_hosts: &[String]) -> Result<HostCheck> {
        let ip = local.ip();
        let mut names = vec![host_of(ip)];
        if ip.is_loopback() || ip.is_unspecified() {
            names.extend(["localhost".to_string(), "127.0.0.1".to_string(), "[::1]".to_string()]);
        }
        if ip.is_unspecified() {
            names.extend(hostname());
            names.extend(machine_addresses().into_iter().map(host_of));
        }
        for h in allow_hosts {
            names.push(normalize_host(h)?);
        }
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        Ok(HostCheck { names, port: local.port() })
    }

    /// The accepted names (without the port).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The name to put in the announced URL: the bound address, or for an unspecified bind
    /// the hostname (a browser cannot open `0.0.0.0`), else `localhost`.
    fn announce(&self) -> String {
        match self.names[0].as_str() {
            "0.0.0.0" | "[::]" => hostname().unwrap_or_else(|| "localhost".into()),
            n => n.to_string(),
        }
    }

    /// True when `host` (a `Host` header value) names this dashboard.
    pub fn allows(&self, host: &str) -> bool {
        let (name, port) = match host.strip_prefix('[') {
            Some(rest) => match rest.split_once(']') {
                Some((ip6, "")) => (format!("[{}]", ip6.to_ascii_lowercase()), None),
                Some((ip6, tail)) => match tail.strip_prefix(':') {
                    Some(p) => (format!("[{}]", ip6.to_ascii_lowercase()), Some(p)),
                    None => return false,
                },
                None => return false,
            },
            None => match host.rsplit_once(':') {
                Some((n, p)) => (n.to_ascii_lowercase(), Some(p)),
                None => (host.to_ascii_lowercase(), None),
            },
        };
        let port_ok = match port {
            Some(p) => p.parse::<u16>().ok() == Some(self.port),
            None => self.port == 80,
        };
        let name = name.strip_suffix('.').unwrap_or(&name);
        port_ok && !name.is_empty() && self.names.iter().any(|n| n == name)
    }
}

/// An `--allow-host` value as compared: a DNS name (letters, digits, `-`, `.`, `_`) or an IP
/// address, lowercase, IPv6 in brackets, without a port.
pub fn normalize_host(h: &str) -> Result<String> {
    let t = h.trim().to_ascii_lowercase();
    let t = t.strip_suffix('.').unwrap_or(&t);
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(host_of(ip));
    }
    if let Some(ip6) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')).and_then(|r| r.parse::<Ipv6Addr>().ok()) {
        return Ok(host_of(IpAddr::V6(ip6)));
    }
    let ok = !t.is_empty()
        && t.len() <= 253
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && !t.starts_with(['-', '.'])
        && !t.contains("..");
    if !ok {
        return Err(Error::invalid("allow_host", h, "must be a host name or IP address without a port (letters, digits, '-', '.', '_')"));
    }
    Ok(t.to_string())
}

/// The machine's hostname, lowercase (`gethostname`).
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end]).ok()?;
    normalize_host(name).ok().filter(|n| n != "localhost")
}

/// Every address of the machine's network interfaces (`getifaddrs`).
fn machine_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a linked list we only read, then free once.
    unsafe {
        if libc::getifaddrs(&mut ifap) != 0 {
            return out;
        }
        let mut p = ifap;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() {
                match i32::from((*a).sa_family) {
                    libc::AF_INET => {
                        let s = &*(a as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let s = &*(a as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifap);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_check() {
        let lo = HostCheck::new("127.0.0.1:8765".parse().unwrap(), &[]).unwrap();
        for ok in ["127.0.0.1:8765", "localhost:8765", "LOCALHOST:8765", "[::1]:8765", "localhost.:8765"] {
            assert!(lo.allows(ok), "{ok}");
        }
        for bad in ["", "evil.example", "evil.example:8765", "localhost:1", "localhost", "[::1]", "[::1", "0.0.0.0:8765"] {
            assert!(!lo.allows(bad), "{bad}");
        }
        let any = HostCheck::new("0.0.0.0:80".parse().unwrap(), &["Box.LAN".into(), "::2".into()]).unwrap();
        for ok in ["localhost", "localhost:80", "box.lan", "[::2]:80", "127.0.0.1"] {
            assert!(any.allows(ok), "{ok}");
        }
        assert!(!any.allows("evil.example"));
        if let Some(h) = hostname() {
            assert!(any.allows(&h));
        }
        assert!(normalize_host("a:80").is_err() && normalize_host("").is_err() && normalize_host("a/b").is_err());
    }
}
