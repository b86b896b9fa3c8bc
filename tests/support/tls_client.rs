//! A minimal HTTPS client for the webhook tests: rustls (ring) trusting a given CA, HTTP/1.1
//! written by hand so that tests control every byte (sizes, pacing, headers) and see exactly
//! what the server answers, resets included.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A connector trusting `ca_pem`, with rustls' safe default protocol versions (TLS 1.2, 1.3).
pub fn client(ca_pem: &str) -> TlsConnector {
    client_with_versions(ca_pem, rustls::DEFAULT_VERSIONS)
}

/// A connector trusting `ca_pem` that speaks only `versions` (e.g. `&[&rustls::version::TLS12]`).
pub fn client_with_versions(
    ca_pem: &str,
    versions: &[&'static SupportedProtocolVersion],
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `addr`, verifying the certificate for `server_name`.
pub async fn connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    server_name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    // As Go's net/http (kube-apiserver) does: no Nagle delay between a head and its body.
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    connector.connect(name, tcp).await
}

/// The head of a POST of `len` body bytes with this content type (none when `None`).
pub fn post_head(path: &str, content_type: Option<&str>, len: usize, close: bool) -> String {
    let content_type = content_type
        .map(|ct| format!("Content-Type: {ct}\r\n"))
        .unwrap_or_default();
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\n{content_type}Content-Length: {len}\r\n{connection}\r\n"
    )
}

/// Status code and body of a raw HTTP/1.1 response (0 when there is no status line).
pub fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// One HTTP/1.1 POST over TLS with `Connection: close`; returns the status code and the body.
pub async fn post_tls(
    connector: &TlsConnector,
    addr: SocketAddr,
    server_name: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut tls = connect(connector, addr, server_name).await?;
    let head = post_head(path, Some("application/json"), body.len(), true)
        .replace("Host: localhost", &format!("Host: {server_name}"));
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(body).await?;
    tls.flush().await?;
    let mut raw = Vec::new();
    // A server may close without close_notify after `Connection: close`; what was read counts.
    let _ = tls.read_to_end(&mut raw).await;
    Ok(parse_response(&raw))
}

/// Reads one HTTP/1.1 response with a Content-Length body from a kept-alive connection.
pub async fn read_response(tls: &mut TlsStream<TcpStream>) -> std::io::Result<(u16, String)> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                return Ok(parse_response(&raw[..end + 4 + len]));
            }
        }
        let n = tls.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("connection closed after {} bytes", raw.len()),
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    }
}
