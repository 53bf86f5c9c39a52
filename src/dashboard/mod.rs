//! The dashboard surface: `slm dashboard`, a local, read-only web page over one data root.
//!
//! [`api`] serves a small paginated JSON API (memories, loops, runs, laps) by calling the
//! engine and the loop ledger; `page.html` (compiled into the binary: no CDN, works offline)
//! renders it, polling a running run's new laps every second. Only GET is routed. Every
//! request's `Host` header must name the bound address (DNS-rebinding protection); a
//! non-loopback bind needs `--allow-remote` and prints a warning.

pub mod api;

use std::net::{IpAddr, SocketAddr};
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
}

/// Checks the bind address rule: loopback, or an explicit `--allow-remote`.
pub fn check_bind(o: &Options) -> Result<()> {
    if !o.bind.is_loopback() && !o.allow_remote {
        return Err(Error::invalid(
            "bind",
            o.bind,
            "is not a loopback address; the dashboard shows every memory, so pass --allow-remote to expose it",
        ));
    }
    Ok(())
}

/// Serves until Ctrl-C. Prints `dashboard: http://ADDR:PORT/` on stdout once listening.
pub fn serve(root: &DataRoot, o: &Options, embedder: Arc<dyn crate::embed::Embedder>) -> Result<()> {
    check_bind(o)?;
    let (engine, runtime) = crate::serve::long_lived(root, embedder)?;
    runtime.block_on(async move {
        let addr = SocketAddr::new(o.bind, o.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io(format!("cannot listen on {addr}"), e))?;
        let local = listener.local_addr().map_err(|e| Error::io("cannot read the bound address", e))?;
        if !o.bind.is_loopback() {
            eprintln!("slm: warning: the dashboard is reachable from other machines at {local}; it is read-only but shows every memory");
        }
        let url = format!("http://{}/", display_addr(local));
        println!("dashboard: {url}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if o.open {
            let _ = std::process::Command::new("xdg-open").arg(&url).spawn();
        }
        let app = api::router(engine, allowed_hosts(local));
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| Error::io("the dashboard server failed", e))
    })
}

fn display_addr(a: SocketAddr) -> String {
    match a.ip() {
        IpAddr::V6(ip) => format!("[{ip}]:{}", a.port()),
        IpAddr::V4(ip) => format!("{ip}:{}", a.port()),
    }
}

/// The Host header values a request may carry: the bound address, and `localhost` when the
/// bound address is loopback.
pub fn allowed_hosts(local: SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut hosts = vec![display_addr(local)];
    if local.ip().is_loopback() {
        hosts.extend([format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")]);
    }
    hosts
}
