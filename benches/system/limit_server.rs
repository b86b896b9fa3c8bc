//! The limit server: the least a correct admission webhook must do, on the same stack as evictord
//! (axum on axum-server + rustls, the same `tls::server_config` — so the same ALPN, `h2` then
//! `http/1.1`, and HTTP/1.1 and HTTP/2 both served — TCP_NODELAY on every connection as
//! evictord sets it, a default multi-thread tokio runtime). For every POST it reads the whole
//! body, parses it as JSON into a minimal borrowed struct (`request.uid` only: serde skips
//! everything else, which still scans the whole document), and answers an allowed
//! AdmissionReview echoing that uid. Its throughput is the ceiling evictord is measured against.
//!
//! It runs as a separate process: the bench binary re-executes itself with
//! `EVICTORD_BENCH_ROLE=limit-server` ([`ROLE_ENV`], see `main.rs`), so that it can be pinned to
//! the same CPU as evictord and measured the same way.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::Path;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use serde::{Deserialize, Serialize};

/// Selects what this process is: unset for the benchmark, `limit-server` for the limit server.
pub const ROLE_ENV: &str = "EVICTORD_BENCH_ROLE";

/// The only part of the request the limit server reads.
#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Request<'a>,
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
}

/// `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":…,"allowed":true}}`
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Verdict<'a>,
}

#[derive(Serialize)]
struct Verdict<'a> {
    uid: &'a str,
    allowed: bool,
}

async fn answer(body: Bytes) -> Response {
    let review: Review<'_> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let out = Answer {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: Verdict {
            uid: &review.request.uid,
            allowed: true,
        },
    };
    match serde_json::to_vec(&out) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Serves on `addr` with the certificates in `cert_dir` until killed.
pub fn run(addr: SocketAddr, cert_dir: &Path) -> anyhow::Result<()> {
    let bundle = evictord::tls::load_dir(cert_dir)?
        .ok_or_else(|| anyhow::anyhow!("no certificates in {}", cert_dir.display()))?;
    let config = RustlsConfig::from_config(evictord::tls::server_config(&bundle)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let app = Router::new().fallback(axum::routing::post(answer));
        let acceptor = RustlsAcceptor::new(config).acceptor(NoDelayAcceptor::new());
        axum_server::bind(addr)
            .acceptor(acceptor)
            .serve(app.into_make_service())
            .await
    })?;
    Ok(())
}
