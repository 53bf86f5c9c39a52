//! Who may read the dashboard: a secret for anything reachable from the network.
//!
//! A non-loopback bind (or any bind given `--token-file`) serves nothing without the secret:
//! 256 bits from the OS RNG generated at start, or the contents of the token file. The URL the
//! server announces once carries it as `?token=`; `GET /?token=…` trades it for an `HttpOnly;
//! SameSite=Strict` session cookie (a separate random value, valid until the server stops) and
//! redirects to `/`, so the secret leaves the address bar. API clients send
//! `Authorization: Bearer …`. Secrets are compared as SHA-256 digests in constant time; the
//! server keeps only the digests. Everything else answers 401 with the JSON error shape.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// Shortest secret a token file may hold.
pub const MIN_TOKEN_CHARS: usize = 32;

/// The secret's digest and this server's session cookie.
pub struct Auth {
    token: [u8; 32],
    session: String,
    session_digest: [u8; 32],
    cookie_name: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth { .. }")
    }
}

impl Auth {
    /// Checks for `token`; the session cookie is named after `port` so that dashboards on
    /// other ports of the same host (cookies ignore ports) do not overwrite it.
    pub fn new(token: &str, port: u16) -> Result<Auth> {
        let session = random_hex()?;
        Ok(Auth { token: digest(token), session_digest: digest(&session), session, cookie_name: format!("slm_session_{port}") })
    }

    fn token_ok(&self, candidate: &str) -> bool {
        ct_eq(&self.token, &digest(candidate))
    }

    fn session_ok(&self, candidate: &str) -> bool {
        ct_eq(&self.session_digest, &digest(candidate))
    }

    fn cookie(&self) -> String {
        format!("{}={}; HttpOnly; SameSite=Strict; Path=/", self.cookie_name, self.session)
    }
}

/// A fresh secret: 32 bytes from the OS RNG, as 64 hex digits.
pub fn generate_token() -> Result<String> {
    random_hex()
}

fn random_hex() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| Error::io("cannot read the OS random number generator", std::io::Error::other(e)))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads a secret from `path`: trimmed, at least [`MIN_TOKEN_CHARS`] printable ASCII
/// characters without spaces (it travels in a URL and an `Authorization` header).
pub fn read_token_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid("token_file", path.display(), format!("must be a readable UTF-8 file ({e})")))?;
    let t = text.trim();
    if t.is_empty() {
        return Err(Error::invalid("token_file", path.display(), "must not be empty (it holds the dashboard's secret)"));
    }
    if t.chars().count() < MIN_TOKEN_CHARS {
        return Err(Error::invalid(
            "token_file",
            path.display(),
            format!("must hold a secret of at least {MIN_TOKEN_CHARS} characters (after trimming), e.g. `openssl rand -hex 32`"),
        ));
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::invalid("token_file", path.display(), "must hold one secret of printable ASCII characters without spaces"));
    }
    Ok(t.to_string())
}

/// `token` percent-encoded for a URL query (everything but unreserved characters).
pub fn url_encode(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Constant-time equality of two digests: every byte is compared whatever the earlier ones
/// were (no early exit), and `black_box` keeps the optimiser from adding one. Comparing
/// digests rather than the secrets also hides the secret's length.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

fn unauthorized() -> Response {
    let body = json!({"ok": false, "error": {"kind": "unauthorized", "field": null,
        "message": "this dashboard needs its secret: open the URL it printed at start, or send Authorization: Bearer <secret>"}});
    let mut r = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The middleware: the `?token=` exchange on `/`, then a valid bearer header or session
/// cookie, else 401.
pub async fn require(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/" && req.uri().query().is_some() {
        let params = Query::<HashMap<String, String>>::try_from_uri(req.uri()).map(|q| q.0).unwrap_or_default();
        if let Some(t) = params.get("token") {
            if !auth.token_ok(t) {
                return unauthorized();
            }
            let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/"), (header::CACHE_CONTROL, "no-store")]).into_response();
            if let Ok(v) = HeaderValue::from_str(&auth.cookie()) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            return r;
        }
    }
    let h = req.headers();
    let bearer = h
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split_once(' ').filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")).map(|(_, t)| t.trim()))
        .any(|t| auth.token_ok(t));
    let cookie = || {
        h.get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .any(|(k, v)| k == auth.cookie_name && auth.session_ok(v))
    };
    if bearer || cookie() {
        next.run(req).await
    } else {
        unauthorized()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_digests() {
        let t = generate_token().unwrap();
        assert_eq!(t.len(), 64);
        assert_ne!(t, generate_token().unwrap());
        let a = Auth::new(&t, 1).unwrap();
        assert!(a.token_ok(&t));
        let mut wrong = t.clone().into_bytes();
        wrong[63] = if wrong[63] == b'0' { b'1' } else { b'0' };
        assert!(!a.token_ok(std::str::from_utf8(&wrong).unwrap()));
        assert!(!a.token_ok(""));
        assert!(a.session_ok(&a.session) && !a.session_ok(&t));
        assert!(!format!("{a:?}").contains(&t));
        assert_eq!(url_encode("a+b/c~d%"), "a%2Bb%2Fc~d%25");
    }

    #[test]
    fn token_file_rules() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        for text in ["", "  \n", "short", "a b c d e f g h i j k l m n o p q r"] {
            std::fs::write(&p, text).unwrap();
            let e = read_token_file(&p).unwrap_err();
            assert_eq!(e.field(), Some("token_file"), "{text:?}: {e}");
        }
        std::fs::write(&p, format!("  {}\n", "x".repeat(32))).unwrap();
        assert_eq!(read_token_file(&p).unwrap(), "x".repeat(32));
        assert_eq!(read_token_file(&dir.path().join("missing")).unwrap_err().field(), Some("token_file"));
    }
}
