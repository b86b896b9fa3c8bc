//! Hostile clients on the webhook port of a real `evictord serve` process (offline mode: the
//! webhook server is the same with or without a cluster): 2000 idle TLS connections, slow-loris
//! heads and bodies, 8 MiB bodies, JSON nested 10 000 deep, invalid UTF-8, wrong content types,
//! a TLS 1.2-only client and plain-HTTP clients, all at once, while a well-behaved client keeps
//! sending reviews on one kept-alive connection as kube-apiserver does.
//!
//! Checked: every hostile request gets its proper answer (413 read by the client, not a reset;
//! 408 for a body that never completes; 400 for the unreadable ones), the idle and slow-loris
//! connections are closed by the server's timeouts, the well-behaved client never fails, and
//! evictord's resident memory stays bounded. Measured and printed (docs/src/reliability.md): the
//! well-behaved client's latency percentiles before and under attack, and evictord's RSS.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::control_plane::free_port;
use support::evictord::{BIN, readyz_within};
use support::tls_client::{
    client, client_with_versions, connect, post_head, post_tls, read_response,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

#[path = "data/fixture.rs"]
mod fixture;

const PODS: &str = "/validate/pods";
const JSON: &str = "application/json";
const IDLE_CONNECTIONS: usize = 2000;
/// `evictord::webhook_server::HEADER_READ_TIMEOUT` (and `FIRST_BYTES_TIMEOUT`) plus a margin for a
/// loaded machine.
const HEAD_TIMEOUT_BOUND: Duration = Duration::from_secs(45);
/// Peak RSS that would mean memory grows with the attack rather than staying bounded.
const RSS_BOUND_KIB: u64 = 512 * 1024;

/// `evictord serve` in offline mode, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let (webhook, probe) = (free_port(), free_port());
        let child = Command::new(BIN)
            .args(["serve", "--webhook-addr"])
            .arg(format!("127.0.0.1:{webhook}"))
            .arg("--probe-addr")
            .arg(format!("127.0.0.1:{probe}"))
            .arg("--cert-dir")
            .arg(dir.path())
            // No cluster: offline mode.
            .env_remove("EVICTORD_KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .env("HOME", dir.path())
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting evictord");
        assert!(
            readyz_within(probe, Duration::from_secs(60)).await,
            "evictord did not become ready"
        );
        let ca_pem = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
        Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], webhook)),
            ca_pem,
            _dir: dir,
        }
    }

    /// (VmRSS, VmHWM) in KiB.
    fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// The well-behaved client: `count` reviews on one kept-alive connection; the latency of each.
async fn well_behaved(connector: TlsConnector, addr: SocketAddr, count: usize) -> Vec<Duration> {
    let body = fixture::review(fixture::POD).json();
    // Head and body in one write, as a buffered HTTP client sends them.
    let request = [
        post_head(PODS, Some(JSON), body.len(), false).as_bytes(),
        &body,
    ]
    .concat();
    let mut tls = connect(&connector, addr, "localhost").await.unwrap();
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        tls.write_all(&request).await.unwrap();
        let (status, answer) = read_response(&mut tls)
            .await
            .unwrap_or_else(|e| panic!("well-behaved request {i} failed: {e}"));
        latencies.push(started.elapsed());
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("rule P2"), "{answer}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut latencies: Vec<Duration>) -> (Duration, Duration, Duration) {
    latencies.sort();
    (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        *latencies.last().unwrap(),
    )
}

/// Opens `n` TLS connections and leaves them idle; returns them.
async fn idle_connections(
    connector: &TlsConnector,
    addr: SocketAddr,
    n: usize,
) -> Vec<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n / 100 {
        let batch = (0..100).map(|_| connect(connector, addr, "localhost"));
        for c in futures::future::join_all(batch).await {
            all.push(c.expect("idle TLS connection"));
        }
    }
    all
}

/// Waits until the server closes `conn` (EOF or error); how long that took.
async fn closed_by_server<S: AsyncReadExt + Unpin>(mut conn: S, bound: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(bound, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {bound:?}"
    );
    started.elapsed()
}

/// A request head sent one byte per 500 ms: closed by the header read timeout.
async fn slow_loris_head(connector: TlsConnector, addr: SocketAddr) -> Duration {
    let mut tls = connect(&connector, addr, "localhost").await.unwrap();
    let head = post_head(PODS, Some(JSON), 10, false).repeat(100);
    let started = Instant::now();
    for b in head.bytes() {
        if tls.write_all(&[b]).await.is_err() || started.elapsed() > HEAD_TIMEOUT_BOUND {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < HEAD_TIMEOUT_BOUND,
        "slow head not cut off: {elapsed:?}"
    );
    elapsed
}

/// A complete head and a body that never completes: answered 408.
async fn slow_loris_body(connector: TlsConnector, addr: SocketAddr) -> u16 {
    let mut tls = connect(&connector, addr, "localhost").await.unwrap();
    tls.write_all(post_head(PODS, Some(JSON), 1000, false).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut raw = Vec::new();
    let mut buf = [0u8; 1024];
    // One body byte per second until the server answers.
    while started.elapsed() < Duration::from_secs(30) {
        let _ = tls.write_all(b" ").await;
        match tokio::time::timeout(Duration::from_secs(1), tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if raw.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    support::tls_client::parse_response(&raw).0
}

/// A plain-HTTP client on the HTTPS port: the server closes the connection at once.
async fn plain_http(addr: SocketAddr) -> Duration {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let body = fixture::review(fixture::POD).json();
    let _ = tcp
        .write_all(post_head(PODS, Some(JSON), body.len(), true).as_bytes())
        .await;
    let _ = tcp.write_all(&body).await;
    closed_by_server(tcp, Duration::from_secs(15)).await
}

/// One hostile POST with `Connection: close`: the status the client reads.
async fn hostile_post(
    connector: TlsConnector,
    addr: SocketAddr,
    content_type: Option<&'static str>,
    body: Vec<u8>,
) -> u16 {
    let mut tls = connect(&connector, addr, "localhost").await.unwrap();
    let head = post_head(PODS, content_type, body.len(), true);
    tls.write_all(head.as_bytes()).await.unwrap();
    if let Err(e) = tls.write_all(&body).await {
        panic!("the server reset the connection while the body was sent: {e}");
    }
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    support::tls_client::parse_response(&raw).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_clients_get_bounded_answers_and_a_well_behaved_client_keeps_its_latency() {
    let server = Server::start().await;
    let connector = client(&server.ca_pem);
    let addr = server.addr;

    let (rss_start, _) = server.rss_kib();
    let baseline = well_behaved(connector.clone(), addr, 400).await;

    // All the attacks at once.
    let idle = idle_connections(&connector, addr, IDLE_CONNECTIONS).await;
    let (rss_idle, _) = server.rss_kib();
    let opened = Instant::now();
    let idle_closed = tokio::spawn(async move {
        let waits = idle
            .into_iter()
            .map(|c| closed_by_server(c, HEAD_TIMEOUT_BOUND));
        futures::future::join_all(waits).await;
        opened.elapsed()
    });
    let heads: Vec<_> = (0..20)
        .map(|_| tokio::spawn(slow_loris_head(connector.clone(), addr)))
        .collect();
    let bodies: Vec<_> = (0..20)
        .map(|_| tokio::spawn(slow_loris_body(connector.clone(), addr)))
        .collect();
    let mut answers = Vec::new();
    let big = vec![b'x'; 8 * 1024 * 1024];
    let invalid_utf8 =
        [b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"\xff\xfe\"}".as_slice()].concat();
    let cases: Vec<(&str, Option<&'static str>, Vec<u8>, u16)> = vec![
        ("8 MiB body", Some(JSON), big, 413),
        // Refused by serde_json's recursion limit where the review builds the value; skipped
        // without recursion, and the review answered, where nothing reads it.
        (
            "JSON nested 10 000 deep in an annotation",
            Some(JSON),
            fixture::review(fixture::POD)
                .nested_json("/request/object/metadata/annotations/deep", 10_000),
            400,
        ),
        (
            "JSON nested 10 000 deep in a field nobody reads",
            Some(JSON),
            fixture::review(fixture::POD).nested_json("/deep", 10_000),
            200,
        ),
        ("invalid UTF-8", Some(JSON), invalid_utf8, 400),
        (
            "text/plain",
            Some("text/plain"),
            fixture::review(fixture::POD).json(),
            400,
        ),
        (
            "no content type",
            None,
            fixture::review(fixture::POD).json(),
            400,
        ),
        (
            "form",
            Some("application/x-www-form-urlencoded"),
            b"a=b".to_vec(),
            400,
        ),
    ];
    for round in 0..10 {
        for (what, ct, body, expected) in &cases {
            let c = connector.clone();
            let (ct, body, what, expected) = (*ct, body.clone(), *what, *expected);
            answers.push(tokio::spawn(async move {
                (what, round, expected, hostile_post(c, addr, ct, body).await)
            }));
        }
    }
    let plain: Vec<_> = (0..50).map(|_| tokio::spawn(plain_http(addr))).collect();
    let tls12 = client_with_versions(&server.ca_pem, &[&rustls::version::TLS12]);
    let tls12_answer = post_tls(
        &tls12,
        addr,
        "localhost",
        PODS,
        &fixture::review(fixture::POD).json(),
    )
    .await
    .expect("a TLS 1.2 client is served");

    let under_attack = well_behaved(connector.clone(), addr, 1500).await;
    let (_, peak_during) = server.rss_kib();

    for a in answers {
        let (what, round, expected, got) = a.await.unwrap();
        assert_eq!(got, expected, "{what} (round {round})");
    }
    assert_eq!(tls12_answer.0, 200, "{}", tls12_answer.1);
    for b in bodies {
        assert_eq!(b.await.unwrap(), 408, "a body that never completes");
    }
    let mut plain_closed = Duration::ZERO;
    for p in plain {
        plain_closed = plain_closed.max(p.await.unwrap());
    }
    let mut head_cut = Duration::ZERO;
    for h in heads {
        head_cut = head_cut.max(h.await.unwrap());
    }
    let idle_closed_after = idle_closed.await.unwrap();
    let after = well_behaved(connector.clone(), addr, 200).await;
    let (rss_end, rss_peak) = server.rss_kib();

    let (b50, b99, bmax) = summary(baseline);
    let (a50, a99, amax) = summary(under_attack);
    let (e50, e99, _) = summary(after);
    println!(
        "RELIABILITY hostile-clients: well-behaved client p50/p99/max before {b50:?}/{b99:?}/{bmax:?}, \
         under attack {a50:?}/{a99:?}/{amax:?}, after {e50:?}/{e99:?}; evictord RSS start {} MiB, \
         with {IDLE_CONNECTIONS} idle TLS connections {} MiB, peak during attack {} MiB, peak overall {} MiB, \
         end {} MiB; idle connections closed after {idle_closed_after:?}, slow heads cut after at most \
         {head_cut:?}, plain-HTTP clients closed within {plain_closed:?}",
        rss_start / 1024,
        rss_idle / 1024,
        peak_during / 1024,
        rss_peak / 1024,
        rss_end / 1024,
    );
    assert!(
        rss_peak < RSS_BOUND_KIB,
        "evictord's peak RSS {rss_peak} KiB is not bounded"
    );
    // Starvation, not the 5 ms figure (reported above; a shared 2-core machine cannot promise
    // it): the well-behaved client is never held up for long.
    assert!(a99 < Duration::from_millis(500), "p99 under attack {a99:?}");
}
