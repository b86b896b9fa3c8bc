//! The limit server: the least an admission webhook can do on the same stack as evictord (axum on
//! axum-server + rustls, the same `tls::server_config`, a default multi-thread tokio runtime).
//! It reads the whole request body and answers every POST with one constant, valid
//! AdmissionReview response. Its throughput is the ceiling evictord is measured against.
//!
//! It runs as a separate process: the bench binary re-executes itself with
//! `EVICTORD_BENCH_ROLE=limit-server` (see `main.rs`), so that it can be pinned to the same CPU
//! as evictord and measured the same way.

use std::net::SocketAddr;
use std::path::Path;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum_server::tls_rustls::RustlsConfig;

/// The response: allowed, no warnings, no patch.
const RESPONSE: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-4000-8000-000000000000","allowed":true,"status":{"metadata":{},"code":200}}}"#;

async fn answer(body: Bytes) -> impl axum::response::IntoResponse {
    // The body is read in full (as evictord must) and then ignored.
    std::hint::black_box(body.len());
    ([(header::CONTENT_TYPE, "application/json")], RESPONSE)
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
        axum_server::bind_rustls(addr, config)
            .serve(app.into_make_service())
            .await
    })?;
    Ok(())
}
