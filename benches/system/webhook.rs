//! Part 1: the webhook under load over TLS. `evictord serve` (offline mode) and the limit server
//! run side by side, both pinned to the same CPU when `taskset` exists (the load generator gets
//! the other one), with the same certificate. For each body and each run, both servers get the
//! same sequence (saturation, then the fixed rates), alternating which goes first, so every
//! ratio compares measurements taken minutes apart at most.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use jiff::{Timestamp, ToSpan};
use serde::Serialize;
use serde_json::Value;

use crate::fixture::{ANNOTATION, EVICTION_REQUEST, HEARTBEAT, POD, review};
use crate::loadgen::{self, Bodies, FixedRate, Saturation, Target};
use crate::settings::Settings;

/// A server process started by the benchmark.
pub struct Server {
    pub name: &'static str,
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `taskset -c CPU` when there are at least two CPUs and taskset exists.
pub fn pinned(cpu: usize, program: &Path) -> Command {
    if crate::cpus() >= 2 && Path::new("/usr/bin/taskset").exists() {
        let mut c = Command::new("/usr/bin/taskset");
        c.arg("-c").arg(cpu.to_string()).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

fn wait_listening(server: &mut Server, log: &Path) -> anyhow::Result<()> {
    for _ in 0..200 {
        if std::net::TcpStream::connect(server.addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = server.child.try_wait()? {
            anyhow::bail!(
                "{} exited with {status}: {}",
                server.name,
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!(
        "{} did not listen on {} within 20s",
        server.name,
        server.addr
    )
}

/// Starts `evictord serve` on a free port: in offline mode (no kubeconfig anywhere), or with
/// `kubeconfig` and its controllers off (only the webhook and the caches it reads), then waits
/// until it is ready (every cache listed).
pub async fn start_evictord(
    cert_dir: &Path,
    scratch: &Path,
    kubeconfig: Option<&Path>,
) -> anyhow::Result<Server> {
    let addr = free_addr();
    let probe = free_addr();
    let mode = if kubeconfig.is_some() {
        "online"
    } else {
        "offline"
    };
    let log = scratch.join(format!("evictord-{mode}.log"));
    let err = scratch.join(format!("evictord-{mode}.err"));
    let home = scratch.join("home");
    std::fs::create_dir_all(&home)?;
    let mut cmd = pinned(1, Path::new(crate::EVICTORD));
    cmd.arg("serve")
        .arg(format!("--webhook-addr={addr}"))
        .arg(format!("--probe-addr={probe}"))
        .arg(format!("--cert-dir={}", cert_dir.display()))
        .env("HOME", &home)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(&err)?);
    match kubeconfig {
        Some(k) => cmd
            .arg(format!("--kubeconfig={}", k.display()))
            .arg("--controllers=none"),
        None => cmd.env("KUBECONFIG", "/nonexistent/kubeconfig"),
    };
    let mut server = Server {
        name: "evictord",
        child: cmd.spawn()?,
        addr,
    };
    wait_listening(&mut server, &log)?;
    let output = || {
        std::fs::read_to_string(&log).unwrap_or_default()
            + &std::fs::read_to_string(&err).unwrap_or_default()
    };
    if kubeconfig.is_none() {
        let out = output();
        anyhow::ensure!(
            out.contains("OFFLINE MODE"),
            "evictord did not start in offline mode:\n{out}"
        );
    }
    anyhow::ensure!(
        crate::support::evictord::readyz_within(probe.port(), Duration::from_secs(60)).await,
        "evictord ({mode}) was not ready within 60s:\n{}",
        output()
    );
    Ok(server)
}

/// EvictionRequest creates need a cluster: an evictord connected to kube-apiserver with
/// [`CREATE_TARGETS`] pods in its cache, and one create review per pod.
struct Online {
    server: Server,
    bodies: Vec<Bytes>,
    client: kube::Client,
    namespace: String,
}

impl Online {
    /// Stops the server and deletes the pods, so that later parts start from an empty cluster.
    async fn clean_up(self) -> anyhow::Result<()> {
        drop(self.server);
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client, &self.namespace);
        crate::controllers::delete_all(
            &api,
            &format!("the pods of {}", self.namespace),
            Duration::from_secs(60),
        )
        .await
    }
}

/// Pods the EvictionRequest create reviews target, one review each, sent in turn.
const CREATE_TARGETS: usize = 2000;

async fn start_online(cert_dir: &Path, scratch: &Path) -> anyhow::Result<Online> {
    let c = crate::support::cluster().await;
    crate::support::evictord::install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("bench-webhook").await;
    let far = std::time::Instant::now() + Duration::from_secs(600);
    let pods = crate::memory::create_pods(
        &client,
        &ns,
        "web-7d9c6b5f4",
        0..CREATE_TARGETS,
        far,
        crate::memory::bench_pod,
    )
    .await?;
    let server = start_evictord(cert_dir, scratch, Some(&c.kubeconfig)).await?;
    let bodies = pods
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let uid = p.metadata.uid.clone().unwrap_or_default();
            Bytes::from(create_body(&ns, &name, &uid))
        })
        .collect();
    Ok(Online {
        server,
        bodies,
        client,
        namespace: ns,
    })
}

/// The EvictionRequest create fixture for pod `ns/name` (uid `uid`), by a user that may delete
/// it (`system:masters`, so E8's SubjectAccessReview allows).
fn create_body(ns: &str, name: &str, uid: &str) -> Vec<u8> {
    review(EVICTION_REQUEST)
        .set("/request/name", uid)
        .set("/request/namespace", ns)
        .set("/request/object/metadata/name", uid)
        .set("/request/object/metadata/namespace", ns)
        .set("/request/object/spec/target/pod/name", name)
        .set("/request/object/spec/target/pod/uid", uid)
        .set(
            "/request/userInfo",
            serde_json::json!({"username": "bench-requester", "groups": ["system:masters", "system:authenticated"]}),
        )
        .json()
}

/// Starts the limit server (this binary, re-executed) on a free port.
pub fn start_limit(cert_dir: &Path, scratch: &Path) -> anyhow::Result<Server> {
    let addr = free_addr();
    let log = scratch.join("limit-server.log");
    let child = pinned(1, &std::env::current_exe()?)
        .env(crate::ROLE_ENV, "limit-server")
        .env("LIMIT_ADDR", addr.to_string())
        .env("LIMIT_CERT_DIR", cert_dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut server = Server {
        name: "limit",
        child,
        addr,
    };
    wait_listening(&mut server, &log)?;
    Ok(server)
}

/// A realistic body: the pod fixture with a valid four-interceptor annotation, padded to about
/// 10 KiB with environment variables (as `benches/review.rs` does).
fn pod_body() -> Bytes {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        ANNOTATION.into(),
        "checkout.shop.example.com, pdb.example.com, statefulset.apps.k8s.io, drain-guard.example.org"
            .into(),
    );
    let fixture = review(POD).set("/request/object/metadata/annotations", annotations);
    Bytes::from(fixture.padded_json(10 * 1024))
}

/// The interceptor heartbeat fixture, re-timed to `now` (the rules check heartbeats against the
/// clock: the new heartbeat is now, the previous one two minutes ago).
fn heartbeat_body(now: Timestamp) -> Bytes {
    let t = |offset: jiff::Span| -> Value {
        let ts = now.checked_add(offset).expect("timestamp");
        Value::String(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    };
    let mut r = review(HEARTBEAT);
    for side in ["object", "oldObject"] {
        r = r
            .set(
                &format!("/request/{side}/metadata/creationTimestamp"),
                t((-60).minutes()),
            )
            .set(
                &format!("/request/{side}/status/interceptors/0/activationTime"),
                t((-10).minutes()),
            )
            .set(
                &format!("/request/{side}/status/interceptors/0/startTime"),
                t((-10).minutes()),
            )
            .set(
                &format!("/request/{side}/status/interceptors/0/expectedFinishTime"),
                t(10.minutes()),
            );
    }
    r = r
        .set(
            "/request/oldObject/status/interceptors/0/heartbeatTime",
            t((-2).minutes()),
        )
        .set(
            "/request/object/status/interceptors/0/heartbeatTime",
            t(0.seconds()),
        );
    Bytes::from(r.json())
}

/// One request body kind.
#[derive(Clone, Copy, Debug)]
enum Body {
    Pod,
    Heartbeat,
    Create,
}

impl Body {
    fn name(self) -> &'static str {
        match self {
            Body::Pod => "pod_create_annotated_10KiB",
            Body::Heartbeat => "evictionrequest_status_heartbeat",
            Body::Create => "evictionrequest_create_cached_pod",
        }
    }
    fn path(self) -> &'static str {
        match self {
            Body::Pod => "/validate/pods",
            Body::Heartbeat | Body::Create => "/validate/evictionrequests",
        }
    }
    /// Fresh bodies (the heartbeat is re-timed for every phase; each phase lasts seconds);
    /// `creates` are the EvictionRequest create reviews.
    fn bodies(self, creates: &[Bytes]) -> Bodies {
        Bodies::new(match self {
            Body::Pod => vec![pod_body()],
            Body::Heartbeat => vec![heartbeat_body(Timestamp::now())],
            Body::Create => creates.to_vec(),
        })
    }
}

/// One server's measurements for one body in one run.
#[derive(Clone, Debug, Serialize)]
pub struct ServerRun {
    pub saturation: Saturation,
    pub fixed: Vec<FixedRate>,
}

/// All runs for one body: per run, the limit and evictord.
#[derive(Clone, Debug, Serialize)]
pub struct BodyResult {
    pub body: &'static str,
    pub bytes: usize,
    pub path: &'static str,
    pub limit: Vec<ServerRun>,
    pub evictord: Vec<ServerRun>,
    /// evictord's saturation throughput / the limit's, per run.
    pub throughput_ratio: Vec<f64>,
    /// The limit's server CPU per request / evictord's, per run (the throughput fraction each
    /// would reach if the server's CPU, not the load generator, were the bottleneck).
    pub cpu_efficiency_ratio: Vec<f64>,
}

/// Part 1 results.
#[derive(Clone, Debug, Serialize)]
pub struct WebhookResults {
    pub pinning: String,
    pub runs: usize,
    pub connections_saturation: usize,
    pub connections_fixed_rate: usize,
    pub warmup_s: f64,
    pub saturation_s: f64,
    pub fixed_rate_s: f64,
    pub rates: Vec<u64>,
    pub bodies: Vec<BodyResult>,
    /// Pods targeted by the EvictionRequest creates (one review each, in turn).
    pub create_targets: Option<usize>,
    /// Why the EvictionRequest creates did not run.
    pub create_skipped: Option<String>,
}

async fn measure(
    target: &Target,
    pid: u32,
    body: Body,
    creates: &[Bytes],
    s: &Settings,
) -> anyhow::Result<ServerRun> {
    // Check once that the body is allowed (a denial would measure another code path).
    let mut probe = loadgen::Connection::open(target).await?;
    anyhow::ensure!(
        probe.review(body.bodies(creates).next()).await?,
        "{} at {}{} was not answered 200 allowed",
        body.name(),
        target.addr,
        target.path
    );
    drop(probe);
    let saturation = loadgen::saturate(
        target,
        body.bodies(creates),
        s.connections,
        s.warmup,
        s.saturation_time,
        Some(pid),
    )
    .await?;
    let mut fixed = Vec::new();
    for &rate in &s.rates {
        fixed.push(
            loadgen::fixed_rate(
                target,
                body.bodies(creates),
                rate,
                s.fixed_rate_time,
                s.rate_connections,
            )
            .await?,
        );
    }
    Ok(ServerRun { saturation, fixed })
}

/// Runs part 1.
pub async fn run(s: &Settings, scratch: &Path) -> anyhow::Result<WebhookResults> {
    let cert_dir: PathBuf = scratch.join("certs");
    std::fs::create_dir_all(&cert_dir)?;
    let bundle = evictord::tls::generate(
        &evictord::tls::serving_names(None, None),
        Duration::from_secs(7 * 86400),
        Timestamp::now(),
    )?;
    evictord::tls::write_dir(&cert_dir, &bundle)?;
    let tls = loadgen::client_config(&bundle.ca_pem)?;

    let limit = start_limit(&cert_dir, scratch)?;
    let evictord = start_evictord(&cert_dir, scratch, None).await?;
    let limit_pid = limit.child.id();
    // EvictionRequest creates: only with a control plane.
    let (online, create_skipped) = if std::env::var_os("KUBEBUILDER_ASSETS").is_some() {
        eprintln!("[webhook] {CREATE_TARGETS} pods for the EvictionRequest creates");
        (Some(start_online(&cert_dir, scratch).await?), None)
    } else {
        (
            None,
            Some("evictionrequest_create_cached_pod: KUBEBUILDER_ASSETS is not set (run `make bench`)".to_string()),
        )
    };
    let creates: Vec<Bytes> = online.as_ref().map_or_else(Vec::new, |o| o.bodies.clone());
    let target = |server: &Server, body: Body| Target {
        addr: server.addr,
        path: body.path().to_string(),
        tls: tls.clone(),
    };

    let mut bodies = Vec::new();
    let mut kinds = vec![Body::Pod, Body::Heartbeat];
    if online.is_some() {
        kinds.push(Body::Create);
    }
    for body in kinds {
        // The create reviews go to the evictord connected to the cluster.
        let evictord = match (&online, body) {
            (Some(o), Body::Create) => &o.server,
            _ => &evictord,
        };
        let evictord_pid = evictord.child.id();
        let mut result = BodyResult {
            body: body.name(),
            bytes: body.bodies(&creates).next().len(),
            path: body.path(),
            limit: Vec::new(),
            evictord: Vec::new(),
            throughput_ratio: Vec::new(),
            cpu_efficiency_ratio: Vec::new(),
        };
        for run in 0..s.runs {
            eprintln!(
                "[webhook] {} run {}/{}: limit and evictord",
                body.name(),
                run + 1,
                s.runs
            );
            // Alternate the order so that a drifting machine does not favour one server.
            let (l, e) = if run % 2 == 0 {
                let l = measure(&target(&limit, body), limit_pid, body, &creates, s).await?;
                let e = measure(&target(evictord, body), evictord_pid, body, &creates, s).await?;
                (l, e)
            } else {
                let e = measure(&target(evictord, body), evictord_pid, body, &creates, s).await?;
                let l = measure(&target(&limit, body), limit_pid, body, &creates, s).await?;
                (l, e)
            };
            eprintln!(
                "[webhook]   saturation: limit {:.0} req/s ({:.2} cores), evictord {:.0} req/s ({:.2} cores)",
                l.saturation.requests_per_second,
                l.saturation.server_cpu_cores.unwrap_or(f64::NAN),
                e.saturation.requests_per_second,
                e.saturation.server_cpu_cores.unwrap_or(f64::NAN)
            );
            if let (Some(lc), Some(ec)) = (
                l.saturation.server_cpu_us_per_request,
                e.saturation.server_cpu_us_per_request,
            ) {
                result.cpu_efficiency_ratio.push(lc / ec);
            }
            result
                .throughput_ratio
                .push(e.saturation.requests_per_second / l.saturation.requests_per_second);
            result.limit.push(l);
            result.evictord.push(e);
        }
        bodies.push(result);
    }
    if let Some(o) = online {
        o.clean_up().await?;
    }
    drop(evictord);
    drop(limit);
    Ok(WebhookResults {
        create_targets: (!creates.is_empty()).then_some(creates.len()),
        create_skipped,
        pinning: if crate::cpus() >= 2 && Path::new("/usr/bin/taskset").exists() {
            "servers on CPU 1, load generator on CPU 0 (taskset)".into()
        } else {
            "none".into()
        },
        runs: s.runs,
        connections_saturation: s.connections,
        connections_fixed_rate: s.rate_connections,
        warmup_s: s.warmup.as_secs_f64(),
        saturation_s: s.saturation_time.as_secs_f64(),
        fixed_rate_s: s.fixed_rate_time.as_secs_f64(),
        rates: s.rates.clone(),
        bodies,
    })
}
