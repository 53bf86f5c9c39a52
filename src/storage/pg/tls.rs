//! TLS to the PostgreSQL server, chosen by the URL's `sslmode` (and `sslrootcert`) with libpq's
//! meanings, on a pure-Rust stack (rustls with the ring provider; no system OpenSSL).
//!
//! - `disable` (and `allow`, which slm does not retry with TLS): plain text.
//! - `prefer` (the default): TLS when the server offers it, else plain; not verified.
//! - `require`: encrypted or nothing; the certificate is not verified, unless `sslrootcert`
//!   is given (then it is verified like `verify-ca`, as libpq does).
//! - `verify-ca`: the chain must lead to `sslrootcert` (a PEM file; `system` or unset: the
//!   system's roots); `verify-full`: that, and the certificate must name the host.
//!
//! Like libpq, `sslmode` does not apply to Unix sockets: a URL whose hosts are all socket
//! directories connects in plain text whatever the mode. The two parameters are taken out of
//! the URL before the client parses the rest (the client knows neither `verify-*` nor
//! `sslrootcert`).

use std::path::Path;
use std::sync::Arc;

use ::postgres::config::{Host, SslMode as ClientMode};
use ::postgres::Config;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{Error, Result};

/// libpq's `sslmode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The URL with `sslmode` and `sslrootcert` taken out, and their values (percent-decoded).
pub(super) struct SslParams {
    pub url: String,
    pub mode: Option<String>,
    pub root_cert: Option<String>,
}

/// Splits the TLS parameters off a `postgres://` URL's query.
pub(super) fn split_params(raw: &str) -> SslParams {
    let Some((base, query)) = raw.split_once('?') else {
        return SslParams { url: raw.to_string(), mode: None, root_cert: None };
    };
    let (mut mode, mut root_cert, mut kept) = (None, None, Vec::new());
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = Some(percent_decode(v)),
            Some(("sslrootcert", v)) => root_cert = Some(percent_decode(v)),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    SslParams { url, mode, root_cert }
}

/// `%XX` escapes decoded (an invalid escape is kept as written).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// How connections of one URL are made: plain, or through a rustls connector built once.
#[derive(Clone)]
pub(crate) enum Connector {
    Plain,
    Tls(MakeRustlsConnect),
}

/// Reads the mode, sets the client's own mode on `config`, and builds the connector.
/// `redacted` names the store in errors: an unknown mode or an unreadable `sslrootcert` is
/// invalid input.
pub(super) fn connector(params: &SslParams, config: &mut Config, redacted: &str) -> Result<Connector> {
    let mode = match params.mode.as_deref() {
        None | Some("prefer") => SslMode::Prefer,
        Some("disable" | "allow") => SslMode::Disable,
        Some("require") => SslMode::Require,
        Some("verify-ca") => SslMode::VerifyCa,
        Some("verify-full") => SslMode::VerifyFull,
        Some(other) => {
            return Err(Error::invalid(
                "store",
                redacted,
                format!("sslmode must be disable, allow, prefer, require, verify-ca or verify-full, not {other:?}"),
            ))
        }
    };
    let all_sockets = config.get_hosts().iter().all(|h| matches!(h, Host::Unix(_)));
    if mode == SslMode::Disable || all_sockets {
        config.ssl_mode(ClientMode::Disable);
        return Ok(Connector::Plain);
    }
    config.ssl_mode(if mode == SslMode::Prefer { ClientMode::Prefer } else { ClientMode::Require });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // libpq: a root file given with `require` makes it verify the chain (`verify-ca`).
    let verify = match (mode, params.root_cert.as_deref()) {
        (SslMode::VerifyFull, _) => Some(true),
        (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Some(false),
        _ => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        None => Arc::new(Unverified(provider.clone())),
        Some(check_name) => {
            let roots = Arc::new(roots(params.root_cert.as_deref(), redacted)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| Error::invalid("store", redacted, format!("sslrootcert must hold a usable CA certificate: {e}")))?;
            if check_name {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        }
    };
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("store", redacted, format!("TLS set-up failed: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Connector::Tls(MakeRustlsConnect::new(tls)))
}

/// The trusted roots: the PEM file `sslrootcert` names, or the system's (`system` or unset).
fn roots(root_cert: Option<&str>, redacted: &str) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match root_cert {
        Some(file) if file != "system" => {
            let bad = |why: String| Error::invalid("store", redacted, format!("sslrootcert {file:?} {why}"));
            let certs = CertificateDer::pem_file_iter(Path::new(file))
                .map_err(|e| bad(format!("must be a readable PEM file: {e}")))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("must be a PEM file of certificates: {e}")))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(bad("must hold at least one CA certificate (PEM)".into()));
            }
        }
        _ => {
            // Unreadable entries are skipped, as libpq skips them; none at all is an error.
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(Error::invalid(
                    "store",
                    redacted,
                    "found no system CA certificates to verify the server; give sslrootcert=FILE",
                ));
            }
        }
    }
    Ok(store)
}

/// `prefer` and `require` without a root file: any certificate is accepted (libpq's meaning:
/// encrypted, not authenticated), but the handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is verified, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let p = split_params("postgres://u@h/d?sslmode=verify-full&port=5433&sslrootcert=%2Ftmp%2Fca.pem");
        assert_eq!(p.url, "postgres://u@h/d?port=5433");
        assert_eq!(p.mode.as_deref(), Some("verify-full"));
        assert_eq!(p.root_cert.as_deref(), Some("/tmp/ca.pem"));
        let p = split_params("postgres://u@h/d?sslmode=require");
        assert_eq!(p.url, "postgres://u@h/d");
        assert_eq!(percent_decode("a%2"), "a%2");
    }
}
