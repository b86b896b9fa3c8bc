//! A small load generator on hyper + tokio-rustls (the stacks already in the tree), speaking
//! HTTP/1.1 or HTTP/2 ([`Protocol`]).
//!
//! - HTTP/1.1: one request at a time per keep-alive connection, no ALPN (the server falls back
//!   to HTTP/1.1). This is how kube-apiserver calls admission webhooks: its webhook client
//!   offers only `http/1.1` (`NextProtos` in k8s.io/apiserver's `util/webhook/client.go`, so
//!   that concurrent calls spread over a Service's endpoints, kubernetes issue 75791), and
//!   keeps at most 25 idle connections a host, opening more under more concurrency.
//! - HTTP/1.1 with a new connection per request ([`Protocol::Http1NewConnection`], saturation
//!   only): each worker closes its connection after one answer and opens the next one, a full
//!   TCP and TLS 1.3 handshake per request. This is what kube-apiserver does for every call
//!   beyond the 25 idle connections it keeps (its webhook client keeps no TLS session cache, so
//!   nothing is resumed either).
//! - HTTP/2: ALPN `h2`, checked after every handshake (a server that does not select `h2` fails
//!   the run); several concurrent streams per connection, each stream a worker of its own. What
//!   other HTTP/2 clients of a webhook do (kube-apiserver's other webhook clients, proxies).
//!
//! Both modes:
//!
//! - [`saturate`]: a fixed number of workers (HTTP/1.1 connections, or HTTP/2 streams on a few
//!   connections), each sending the next request as soon as the previous answer arrived
//!   (closed loop), for a fixed time after a warm-up; requests/s counts the answers that
//!   completed inside the measured window.
//! - [`fixed_rate`]: an open-loop schedule of `rate × duration` requests. A dedicated OS thread
//!   releases request *i* at `t0 + i/rate` (thread sleeps are precise to ~0.1 ms, tokio's timer
//!   only to 1 ms); a pool of workers sends them. Latency runs from the scheduled time to the end
//!   of the response body, so a server that falls behind is charged for the queueing it causes
//!   (no coordinated omission). Bounded: requests not sent by `t0 + duration + GRACE` are
//!   counted as `not_sent`.
//!
//! Every answer must be HTTP 200, an AdmissionReview whose `response.uid` is the request's
//! `request.uid` and `response.allowed` true; anything else is counted in `errors` (a wrong or
//! missing uid also in `uid_mismatches`).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long a fixed-rate run may overrun its schedule before the rest is abandoned.
const GRACE: Duration = Duration::from_secs(5);

/// The HTTP version the load generator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP/1.1 keep-alive, one request in flight per connection.
    Http1,
    /// HTTP/2 (ALPN `h2`), several streams in flight per connection.
    H2,
    /// HTTP/1.1, one request per connection: a new TCP connection and TLS handshake each.
    #[serde(rename = "http1-new")]
    Http1NewConnection,
}

impl Protocol {
    /// The name for people.
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::H2 => "HTTP/2",
            Protocol::Http1NewConnection => "HTTP/1.1, a new connection per request",
        }
    }

    /// Whether a connection carries more than one request (and fixed-rate runs make sense).
    pub fn keeps_connections(self) -> bool {
        self != Protocol::Http1NewConnection
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "http1" | "h1" | "http/1.1" => Ok(Protocol::Http1),
            "h2" | "http2" => Ok(Protocol::H2),
            "http1-new" | "h1-new" => Ok(Protocol::Http1NewConnection),
            _ => Err(format!("unknown protocol {s:?} (http1, h2 or http1-new)")),
        }
    }
}

/// Where and what to send.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: String,
    /// From [`client_config`] for the same protocol.
    pub tls: Arc<ClientConfig>,
    pub protocol: Protocol,
}

/// A client configuration trusting only `ca_pem`. HTTP/1.1: no ALPN (the server falls back to
/// HTTP/1.1). HTTP/2: ALPN `h2` only. No session resumption in any mode (rustls' client would
/// resume; kube-apiserver's does not): every connection is a full handshake.
pub fn client_config(ca_pem: &str, protocol: Protocol) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    if protocol == Protocol::H2 {
        config.alpn_protocols = vec![b"h2".to_vec()];
    }
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// One request body and the uid the answer must echo.
#[derive(Clone, Debug)]
pub struct ReviewBody {
    pub bytes: Bytes,
    /// `request.uid` of the body.
    pub uid: String,
}

impl ReviewBody {
    /// Reads `request.uid` from the body (once, when the bodies are prepared).
    pub fn new(bytes: impl Into<Bytes>) -> anyhow::Result<Self> {
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
        let bytes = bytes.into();
        let uid = serde_json::from_slice::<Review<'_>>(&bytes)
            .map_err(|e| anyhow::anyhow!("request body without request.uid: {e}"))?
            .request
            .uid
            .into_owned();
        Ok(Self { bytes, uid })
    }
}

/// What an answer was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200, `allowed: true`, the request's uid.
    Allowed,
    /// Another status, not an AdmissionReview, or not allowed.
    Refused,
    /// An allowed-or-not AdmissionReview answering another uid (or none).
    UidMismatch,
}

/// Checks a response body: an AdmissionReview with `response.uid == uid` and `allowed: true`.
pub fn check(status: http::StatusCode, body: &[u8], uid: &str) -> Answer {
    #[derive(Deserialize)]
    struct Review<'a> {
        #[serde(borrow)]
        response: Option<Response<'a>>,
    }
    #[derive(Deserialize)]
    struct Response<'a> {
        #[serde(borrow, default)]
        uid: Option<Cow<'a, str>>,
        #[serde(default)]
        allowed: bool,
    }
    if status != http::StatusCode::OK {
        return Answer::Refused;
    }
    let Ok(Review {
        response: Some(response),
    }) = serde_json::from_slice::<Review<'_>>(body)
    else {
        return Answer::Refused;
    };
    if response.uid.as_deref() != Some(uid) {
        Answer::UidMismatch
    } else if response.allowed {
        Answer::Allowed
    } else {
        Answer::Refused
    }
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One worker's handle: an HTTP/1.1 connection, or one stream slot of an HTTP/2 connection.
pub struct Connection {
    sender: Sender,
    /// `/path` for HTTP/1.1, `https://localhost/path` for HTTP/2 (its `:authority`).
    uri: String,
}

impl Connection {
    /// Connects (TCP, TLS handshake, then HTTP/1.1 or HTTP/2 as the target says).
    pub async fn open(target: &Target) -> anyhow::Result<Self> {
        let tcp = TcpStream::connect(target.addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost")?;
        let tls = TlsConnector::from(target.tls.clone())
            .connect(name, tcp)
            .await?;
        match target.protocol {
            Protocol::Http1 | Protocol::Http1NewConnection => {
                let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                Ok(Self {
                    sender: Sender::H1(sender),
                    uri: target.path.clone(),
                })
            }
            Protocol::H2 => {
                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                anyhow::ensure!(
                    alpn.as_deref() == Some(b"h2".as_slice()),
                    "the server at {} did not negotiate HTTP/2: ALPN selected {:?} (offered h2)",
                    target.addr,
                    alpn.map(|a| String::from_utf8_lossy(&a).into_owned())
                );
                let (sender, conn) =
                    http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                Ok(Self {
                    sender: Sender::H2(sender),
                    uri: format!("https://localhost{}", target.path),
                })
            }
        }
    }

    /// Another worker on the same HTTP/2 connection (another concurrent stream); `None` for
    /// HTTP/1.1.
    pub fn stream(&self) -> Option<Self> {
        match &self.sender {
            Sender::H1(_) => None,
            Sender::H2(s) => Some(Self {
                sender: Sender::H2(s.clone()),
                uri: self.uri.clone(),
            }),
        }
    }

    /// Sends one AdmissionReview and checks the answer.
    pub async fn review(&mut self, body: &ReviewBody) -> anyhow::Result<Answer> {
        let mut req = http::Request::post(self.uri.as_str())
            .header(http::header::CONTENT_TYPE, "application/json");
        let resp = match &mut self.sender {
            Sender::H1(sender) => {
                req = req.header(http::header::HOST, "localhost");
                let req = req.body(Full::new(body.bytes.clone()))?;
                sender.ready().await?;
                sender.send_request(req).await?
            }
            Sender::H2(sender) => {
                let req = req
                    .version(http::Version::HTTP_2)
                    .body(Full::new(body.bytes.clone()))?;
                sender.ready().await?;
                sender.send_request(req).await?
            }
        };
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok(check(status, &bytes, &body.uid))
    }
}

/// Opens the workers: `connections` HTTP/1.1 connections, or `connections` HTTP/2 connections
/// with `streams` workers each.
async fn open_all(
    target: &Target,
    connections: usize,
    streams: usize,
) -> anyhow::Result<Vec<Connection>> {
    let mut workers = Vec::new();
    for _ in 0..connections {
        let conn = Connection::open(target).await?;
        if target.protocol == Protocol::H2 {
            for _ in 1..streams.max(1) {
                workers.push(conn.stream().expect("an HTTP/2 connection"));
            }
        }
        workers.push(conn);
    }
    Ok(workers)
}

/// Counters shared by the workers of a run.
#[derive(Default)]
struct Tally {
    done: AtomicU64,
    errors: AtomicU64,
    uid_mismatches: AtomicU64,
}

impl Tally {
    fn count(&self, answer: &anyhow::Result<Answer>) {
        match answer {
            Ok(Answer::Allowed) => {
                self.done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Answer::UidMismatch) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.uid_mismatches.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Answer::Refused) | Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Result of a saturation run.
#[derive(Clone, Debug, Serialize)]
pub struct Saturation {
    pub protocol: Protocol,
    /// Connections; with HTTP/2 each carries `streams` workers.
    pub connections: usize,
    /// Concurrent requests per connection (1 for HTTP/1.1).
    pub streams: usize,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    /// Answers whose `response.uid` was not the request's (counted in `errors` too).
    pub uid_mismatches: u64,
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

/// The request bodies of a run, sent in turn (all workers share the turn).
#[derive(Clone)]
pub struct Bodies {
    bodies: Arc<[ReviewBody]>,
    next: Arc<std::sync::atomic::AtomicUsize>,
}

impl Bodies {
    /// At least one body.
    pub fn new(bodies: Vec<ReviewBody>) -> Self {
        assert!(!bodies.is_empty(), "no request body");
        Self {
            bodies: bodies.into(),
            next: Default::default(),
        }
    }

    /// The next body in turn.
    pub fn next(&self) -> &ReviewBody {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.bodies[i % self.bodies.len()]
    }
}

/// Closed loop on `connections` connections (× `streams` with HTTP/2): `warmup`, then
/// `duration` measured. With `server_pid`, the server's CPU time over the measured window is
/// recorded too.
pub async fn saturate(
    target: &Target,
    bodies: Bodies,
    (connections, streams): (usize, usize),
    warmup: Duration,
    duration: Duration,
    server_pid: Option<u32>,
) -> anyhow::Result<Saturation> {
    let workers = open_all(target, connections, streams).await?;
    let start = Instant::now() + warmup;
    let end = start + duration;
    let cpu = tokio::spawn(async move {
        let pid = server_pid?;
        tokio::time::sleep_until(start.into()).await;
        let c0 = cpu_time(pid)?;
        tokio::time::sleep_until(end.into()).await;
        Some(cpu_time(pid)?.saturating_sub(c0))
    });
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for mut conn in workers {
        let (bodies, tally, target) = (bodies.clone(), tally.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let answer = conn.review(bodies.next()).await;
                let t = Instant::now();
                if t >= start && t < end {
                    tally.count(&answer);
                }
                if answer.is_err() {
                    // A broken connection: reconnecting would measure handshakes; stop this one.
                    break;
                }
                if !target.protocol.keeps_connections() {
                    // The next request on a new connection; the old one is closed as it drops.
                    match Connection::open(&target).await {
                        Ok(next) => conn = next,
                        Err(e) => {
                            tally.count(&Err(e));
                            break;
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let requests = tally.done.load(Ordering::Relaxed);
    let cpu = cpu.await?;
    Ok(Saturation {
        protocol: target.protocol,
        connections,
        streams: if target.protocol == Protocol::H2 {
            streams.max(1)
        } else {
            1
        },
        seconds: duration.as_secs_f64(),
        requests,
        errors: tally.errors.load(Ordering::Relaxed),
        uid_mismatches: tally.uid_mismatches.load(Ordering::Relaxed),
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
    pub protocol: Protocol,
    pub connections: usize,
    /// Concurrent requests per connection (1 for HTTP/1.1).
    pub streams: usize,
    pub scheduled: u64,
    pub completed: u64,
    pub errors: u64,
    /// Answers whose `response.uid` was not the request's (counted in `errors` too).
    pub uid_mismatches: u64,
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

/// Open loop at `rate` requests/s for `duration`, on `connections` connections (× `streams`
/// with HTTP/2).
pub async fn fixed_rate(
    target: &Target,
    bodies: Bodies,
    rate: u64,
    duration: Duration,
    (connections, streams): (usize, usize),
) -> anyhow::Result<FixedRate> {
    let workers = open_all(target, connections, streams).await?;
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
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for mut conn in workers {
        let (bodies, rx, tally) = (bodies.clone(), rx.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let next = {
                    let mut rx = rx.lock().await;
                    tokio::time::timeout_at(deadline.into(), rx.recv()).await
                };
                let Ok(Some(at)) = next else { break };
                let answer = conn.review(bodies.next()).await;
                match answer {
                    Ok(Answer::Allowed) => {
                        samples.push(Instant::now().saturating_duration_since(at))
                    }
                    _ => tally.count(&answer),
                }
                if answer.is_err() || Instant::now() > deadline {
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
    let errors = tally.errors.load(Ordering::Relaxed);
    let elapsed = duration.as_secs_f64();
    Ok(FixedRate {
        rate,
        protocol: target.protocol,
        connections,
        streams: if target.protocol == Protocol::H2 {
            streams.max(1)
        } else {
            1
        },
        scheduled: total,
        completed,
        errors,
        uid_mismatches: tally.uid_mismatches.load(Ordering::Relaxed),
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
