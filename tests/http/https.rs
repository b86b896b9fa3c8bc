//! The webhook over real HTTPS, with the server `evictord serve` runs and certificates generated
//! by `evictord::tls`.

use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use tokio::io::AsyncWriteExt;

use super::tls_client::{client, connect, post_head, post_tls, read_response};
use super::*;

/// Serves the offline router over HTTPS on an ephemeral port with the server `evictord
/// serve` runs.
async fn serve(
    bundle: &evictord::tls::CertBundle,
) -> (
    std::net::SocketAddr,
    axum_server::Handle<std::net::SocketAddr>,
) {
    let config = RustlsConfig::from_config(evictord::tls::server_config(bundle).unwrap());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let server = evictord::webhook_server::webhook_server(listener, config)
        .unwrap()
        .handle(handle.clone())
        .serve(offline_router().into_make_service());
    tokio::spawn(server);
    (addr, handle)
}

fn bundle() -> evictord::tls::CertBundle {
    let names = evictord::tls::serving_names(Some("evictord"), Some("evictord-system"));
    evictord::tls::generate(&names, Duration::from_secs(3600), jiff::Timestamp::now()).unwrap()
}

/// An 8 MiB body over TLS is answered with 413 (the client reads the answer, no reset), and
/// the connection stays usable: the next review on it is answered.
#[tokio::test]
async fn an_8_mib_body_over_tls_is_answered_413_not_reset() {
    let bundle = bundle();
    let (addr, handle) = serve(&bundle).await;
    let connector = client(&bundle.ca_pem);
    let big = vec![b'x'; 8 * 1024 * 1024];
    for _ in 0..3 {
        let (status, body) = post_tls(&connector, addr, "localhost", PODS, &big)
            .await
            .expect("connected");
        assert_eq!(
            status, 413,
            "the client must read the 413, got {status}: {body:?}"
        );
        assert!(body.contains("larger than"), "{body}");
    }

    // Kept alive: 413 for the big body, then an ordinary review on the same connection.
    let mut tls = connect(&connector, addr, "localhost").await.unwrap();
    tls.write_all(post_head(PODS, Some(JSON), big.len(), false).as_bytes())
        .await
        .unwrap();
    tls.write_all(&big).await.unwrap();
    let (status, _) = read_response(&mut tls).await.unwrap();
    assert_eq!(status, 413);
    let fixture = review(POD).json();
    tls.write_all(post_head(PODS, Some(JSON), fixture.len(), false).as_bytes())
        .await
        .unwrap();
    tls.write_all(&fixture).await.unwrap();
    let (status, body) = read_response(&mut tls).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("rule P2"), "{body}");
    handle.shutdown();
}

#[tokio::test]
async fn reviews_are_answered_over_tls_with_the_generated_ca() {
    let names = evictord::tls::serving_names(Some("evictord"), Some("evictord-system"));
    let bundle = bundle();
    let (addr, handle) = serve(&bundle).await;
    let connector = client(&bundle.ca_pem);

    let fixture = review(POD);
    for server_name in ["localhost", "127.0.0.1"] {
        let (status, body) = post_tls(&connector, addr, server_name, PODS, &fixture.json())
            .await
            .unwrap_or_else(|e| panic!("TLS with the generated CA as {server_name}: {e}"));
        assert_eq!(status, 200, "{body}");
        // Chunked or not, the JSON object is the body's first `{` to its last `}`.
        let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
        let review: Value = serde_json::from_str(json).unwrap();
        let response = response(&review);
        assert_eq!(response["uid"], fixture.uid());
        assert_eq!(response["allowed"], false);
        assert!(message(response).contains("rule P2"));
    }

    // The Service DNS name is in the certificate too (the address is ours, the name is
    // only what the handshake checks).
    let (status, _) = post_tls(
        &connector,
        addr,
        "evictord.evictord-system.svc",
        PODS,
        &review(POD)
            .remove("/request/object/metadata/annotations")
            .json(),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);

    // Another CA is refused, and so is a name the certificate does not carry.
    let other =
        evictord::tls::generate(&names, Duration::from_secs(3600), jiff::Timestamp::now()).unwrap();
    let err = post_tls(&client(&other.ca_pem), addr, "localhost", PODS, b"{}")
        .await
        .expect_err("a certificate from another CA must not verify");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    let err = post_tls(&connector, addr, "evictord.example.com", PODS, b"{}")
        .await
        .expect_err("a name outside the certificate must not verify");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    handle.shutdown();
}
