//! A small HTTP/1.1 load generator on hyper + tokio-rustls (the stacks already in the tree).
//!
//! - [`saturate`]: a fixed number of keep-alive connections, each sending the next request as
//!   soon as the previous answer arrived (closed loop), for a fixed time after a warm-up;
//!   requests/s counts the answers that completed inside the measured window.
//! - [`fixed_rate`]: an open-loop schedule of `rate × duration` requests. A dedicated OS thread
//!   releases request *i* at `t0 + i/rate` (thread sleeps are precise to ~0.1 ms, tokio's timer
//!   only to 1 ms); a pool of keep-alive connections sends them. Latency runs from the scheduled
//!   time to the end of the response body, so a server that falls behind is charged for the
//!   queueing it causes (no coordinated omission). Bounded: requests not sent by
//!   `t0 + duration + GRACE` are counted as `not_sent`.
//!
//! Every answer must be HTTP 200 with `"allowed":true`; anything else is counted in `errors`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long a fixed-rate run may overrun its schedule before the rest is abandoned.
const GRACE: Duration = Duration::from_secs(5);

/// Where and what to send.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: String,
    pub tls: Arc<ClientConfig>,
}

/// A client configuration trusting only `ca_pem`, HTTP/1.1 (no ALPN: the server falls back to
/// HTTP/1.1, as kube-apiserver's webhook client does without h2).
pub fn client_config(ca_pem: &str) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One keep-alive connection.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    path: String,
}

impl Connection {
    /// Connects (TCP, TLS handshake, HTTP/1.1).
    pub async fn open(target: &Target) -> anyhow::Result<Self> {
        let tcp = TcpStream::connect(target.addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost")?;
        let tls = TlsConnector::from(target.tls.clone())
            .connect(name, tcp)
            .await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self {
            sender,
            path: target.path.clone(),
        })
    }

    /// Sends one AdmissionReview; `Ok(true)` when answered 200 with `"allowed":true`.
    pub async fn review(&mut self, body: &Bytes) -> anyhow::Result<bool> {
        let req = http::Request::post(self.path.as_str())
            .header(http::header::HOST, "localhost")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let ok = resp.status() == http::StatusCode::OK;
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok(ok && contains(&bytes, br#""allowed":true"#))
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn open_all(target: &Target, n: usize) -> anyhow::Result<Vec<Connection>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(Connection::open(target).await?);
    }
    Ok(conns)
}

/// Result of a saturation run.
#[derive(Clone, Debug, Serialize)]
pub struct Saturation {
    pub connections: usize,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    pub requests_per_second: f64,
    /// CPU time the server process used in the measured window / the window (1.0 = one core).
    pub server_cpu_cores: Option<f64>,
    /// Server CPU time per answered request, in microseconds: the cost that stays meaningful
    /// when the load generator, not the server, is the bottleneck.
    pub server_cpu_us_per_request: Option<f64>,
}

/// CPU time (user + system) of a process so far, from `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux configuration we run on.
    Some(Duration::from_millis(ticks * 10))
}

/// The request bodies of a run, sent in turn (all connections share the turn).
#[derive(Clone)]
pub struct Bodies {
    bodies: Arc<[Bytes]>,
    next: Arc<std::sync::atomic::AtomicUsize>,
}

impl Bodies {
    /// At least one body.
    pub fn new(bodies: Vec<Bytes>) -> Self {
        assert!(!bodies.is_empty(), "no request body");
        Self {
            bodies: bodies.into(),
            next: Default::default(),
        }
    }

    /// The next body in turn.
    pub fn next(&self) -> &Bytes {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.bodies[i % self.bodies.len()]
    }
}

/// Closed loop on `connections` keep-alive connections: `warmup`, then `duration` measured.
/// With `server_pid`, the server's CPU time over the measured window is recorded too.
pub async fn saturate(
    target: &Target,
    bodies: Bodies,
    connections: usize,
    warmup: Duration,
    duration: Duration,
    server_pid: Option<u32>,
) -> anyhow::Result<Saturation> {
    let conns = open_all(target, connections).await?;
    let start = Instant::now() + warmup;
    let end = start + duration;
    let cpu = tokio::spawn(async move {
        let pid = server_pid?;
        tokio::time::sleep_until(start.into()).await;
        let c0 = cpu_time(pid)?;
        tokio::time::sleep_until(end.into()).await;
        Some(cpu_time(pid)?.saturating_sub(c0))
    });
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for mut conn in conns {
        let (bodies, done, errors) = (bodies.clone(), done.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let ok = conn.review(bodies.next()).await;
                let t = Instant::now();
                if t >= start && t < end {
                    match ok {
                        Ok(true) => done.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
                if ok.is_err() {
                    // A broken connection: reconnecting would measure handshakes; stop this one.
                    break;
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let requests = done.load(Ordering::Relaxed);
    let cpu = cpu.await?;
    Ok(Saturation {
        connections,
        seconds: duration.as_secs_f64(),
        requests,
        errors: errors.load(Ordering::Relaxed),
        requests_per_second: requests as f64 / duration.as_secs_f64(),
        server_cpu_cores: cpu.map(|c| c.as_secs_f64() / duration.as_secs_f64()),
        server_cpu_us_per_request: cpu
            .filter(|_| requests > 0)
            .map(|c| c.as_secs_f64() * 1e6 / requests as f64),
    })
}

/// Result of a fixed-rate run; latencies in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct FixedRate {
    pub rate: u64,
    pub connections: usize,
    pub scheduled: u64,
    pub completed: u64,
    pub errors: u64,
    pub not_sent: u64,
    pub achieved_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// Median of a sample (the mean of the two middle values for an even count).
pub fn median(v: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Open loop at `rate` requests/s for `duration`, on `connections` keep-alive connections.
pub async fn fixed_rate(
    target: &Target,
    bodies: Bodies,
    rate: u64,
    duration: Duration,
    connections: usize,
) -> anyhow::Result<FixedRate> {
    let conns = open_all(target, connections).await?;
    let total = (rate as f64 * duration.as_secs_f64()).round() as u64;
    let (tx, rx) = async_queue();
    let stop = Arc::new(AtomicBool::new(false));
    // Give the workers a moment to park on the queue before the schedule starts.
    let t0 = Instant::now() + Duration::from_millis(50);
    let deadline = t0 + duration + GRACE;
    let pacer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for i in 0..total {
                let at = t0 + Duration::from_secs_f64(i as f64 / rate as f64);
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if stop.load(Ordering::Relaxed) || tx.send(at).is_err() {
                    break;
                }
            }
        })
    };
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for mut conn in conns {
        let (bodies, rx, errors) = (bodies.clone(), rx.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let next = {
                    let mut rx = rx.lock().await;
                    tokio::time::timeout_at(deadline.into(), rx.recv()).await
                };
                let Ok(Some(at)) = next else { break };
                match conn.review(bodies.next()).await {
                    Ok(true) => samples.push(Instant::now().saturating_duration_since(at)),
                    Ok(false) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
                if Instant::now() > deadline {
                    break;
                }
            }
            samples
        }));
    }
    let mut samples = Vec::with_capacity(total as usize);
    for t in tasks {
        samples.extend(t.await?);
    }
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    let _ = pacer.join();
    samples.sort_unstable();
    let completed = samples.len() as u64;
    let errors = errors.load(Ordering::Relaxed);
    let elapsed = duration.as_secs_f64();
    Ok(FixedRate {
        rate,
        connections,
        scheduled: total,
        completed,
        errors,
        not_sent: total.saturating_sub(completed + errors),
        achieved_per_second: completed as f64 / elapsed,
        p50_ms: ms(percentile(&samples, 50.0)),
        p99_ms: ms(percentile(&samples, 99.0)),
        p999_ms: ms(percentile(&samples, 99.9)),
        max_ms: ms(samples.last().copied().unwrap_or_default()),
    })
}

type Queue = Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Instant>>>;

/// A multi-consumer queue of scheduled send times: the pacer thread sends, idle connections take.
fn async_queue() -> (tokio::sync::mpsc::UnboundedSender<Instant>, Queue) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}
