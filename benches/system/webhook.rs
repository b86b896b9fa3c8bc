//! Part 1: the webhook under load over TLS. `evictord serve` (offline mode) and the limit server
//! (and, with `EVICTORD_BENCH_BASELINE`, another evictord binary started the same way) run side
//! by side, all pinned to the same CPU when `taskset` exists (the load generator gets the other
//! one), with the same certificate. For each body, each run and each protocol (HTTP/1.1 and
//! HTTP/2, see [`crate::loadgen`]), every server gets the same sequence (saturation, then the
//! fixed rates), the order rotated per run, so every ratio compares measurements taken minutes
//! apart at most, over the same protocol. EvictionRequest creates go to evictords connected to
//! the control plane with [`CREATE_TARGETS`] pods cached.
//!
//! After the runs of a body, when `perf` works, one more HTTP/1.1 saturation run of evictord
//! (the protocol kube-apiserver calls admission webhooks with) is profiled
//! (`perf record -F 999 -g -p PID`); the self-time summary goes to `profile-<body>.txt` next to
//! `REPORT.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use jiff::{Timestamp, ToSpan};
use serde::Serialize;
use serde_json::Value;

use crate::evictord_process::{Binary, Server, free_addr, pinned, start_evictord, wait_listening};
use crate::fixture::{ANNOTATION, EVICTION_REQUEST, HEARTBEAT, POD, Review, review};
use crate::loadgen::{self, Answer, Bodies, FixedRate, Protocol, ReviewBody, Saturation, Target};
use crate::settings::Settings;

/// EvictionRequest creates need a cluster: an evictord connected to kube-apiserver with
/// [`CREATE_TARGETS`] pods in its cache, and one create review per pod.
struct Online {
    server: Server,
    /// The baseline binary, connected the same way (when set and it started).
    baseline: Option<Server>,
    bodies: Vec<ReviewBody>,
    client: kube::Client,
    namespace: String,
}

impl Online {
    /// Stops the servers and deletes the pods, so that later parts start from an empty cluster.
    async fn clean_up(self) -> anyhow::Result<()> {
        drop(self.server);
        drop(self.baseline);
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client, &self.namespace);
        crate::cluster::delete_all(
            &api,
            &format!("the pods of {}", self.namespace),
            Duration::from_secs(60),
        )
        .await
    }
}

/// Pods the EvictionRequest create reviews target, one review each, sent in turn.
const CREATE_TARGETS: usize = 2000;

async fn start_online(
    cert_dir: &Path,
    scratch: &Path,
    baseline: Option<Binary<'_>>,
    baseline_errors: &mut Vec<String>,
) -> anyhow::Result<Online> {
    let c = crate::support::cluster().await;
    crate::support::evictord::install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("bench-webhook").await;
    let far = std::time::Instant::now() + Duration::from_secs(600);
    let pods = crate::cluster::create_pods(
        &client,
        &ns,
        "web-7d9c6b5f4",
        0..CREATE_TARGETS,
        far,
        crate::cluster::bench_pod,
    )
    .await?;
    let server = start_evictord(
        Binary::this_build(),
        cert_dir,
        scratch,
        Some(&c.kubeconfig),
        false,
    )
    .await?;
    let baseline = match baseline {
        None => None,
        Some(b) => match start_evictord(b, cert_dir, scratch, Some(&c.kubeconfig), false).await {
            Ok(s) => Some(s),
            Err(e) => {
                baseline_errors.push(format!("online (EvictionRequest creates): {e:#}"));
                None
            }
        },
    };
    let bodies = pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let uid = p.metadata.uid.clone().unwrap_or_default();
            ReviewBody::new(create_body(&ns, &name, &uid, &request_uid(3, i)))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Online {
        server,
        baseline,
        bodies,
        client,
        namespace: ns,
    })
}

/// The EvictionRequest create fixture for pod `ns/name` (uid `uid`), by a user that may delete
/// it (`system:masters`, so E8's SubjectAccessReview allows); the review's own uid is
/// `request_uid`.
fn create_body(ns: &str, name: &str, uid: &str, request_uid: &str) -> Vec<u8> {
    review(EVICTION_REQUEST)
        .set("/request/uid", request_uid)
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
        .env(crate::limit_server::ROLE_ENV, "limit-server")
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

/// The pod bodies (built once: padding is slow).
static POD_BODIES: std::sync::OnceLock<Vec<ReviewBody>> = std::sync::OnceLock::new();

/// Request bodies of each kind differ only in their `request.uid` (a server must echo it; the
/// load generator checks it): this many variants, sent in turn.
pub const UID_VARIANTS: usize = 64;

/// The `i`-th review uid of body kind `kind` (UUID-shaped, distinct across kinds).
fn request_uid(kind: u32, i: usize) -> String {
    format!("{kind:08x}-be4c-4000-8000-{i:012x}")
}

/// [`UID_VARIANTS`] copies of `fixture` with distinct `request.uid`s.
fn uid_variants(fixture: Review, kind: u32) -> Vec<ReviewBody> {
    (0..UID_VARIANTS)
        .map(|i| {
            let body = fixture
                .clone()
                .set("/request/uid", request_uid(kind, i))
                .json();
            ReviewBody::new(body).expect("a fixture with request.uid")
        })
        .collect()
}

/// A realistic body: the pod fixture with a valid four-interceptor annotation, padded to about
/// 10 KiB with environment variables (as `benches/review.rs` does).
fn pod_bodies() -> Vec<ReviewBody> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        ANNOTATION.into(),
        "checkout.shop.example.com, pdb.example.com, statefulset.apps.k8s.io, drain-guard.example.org"
            .into(),
    );
    let fixture = review(POD).set("/request/object/metadata/annotations", annotations);
    let padded: Value =
        serde_json::from_slice(&fixture.padded_json(10 * 1024)).expect("padded pod review");
    uid_variants(Review(padded), 1)
}

/// What kube-apiserver sends in the metadata of an EvictionRequest the controller and an
/// interceptor have written to, besides name, namespace, uid and times: the labels the controller
/// copied from the pod (SPEC 2.3 step 4) and the managed fields of its three writers (the
/// requester, evictord's status, the interceptor's heartbeat). Webhooks get `managedFields`
/// (kubernetes/kubernetes#96688); the test fixture leaves them out for readability.
fn written_metadata() -> Value {
    serde_json::json!({
        "labels": {"app": "checkout", "pod-template-hash": "7d9c6b5f4", "tier": "web", "team": "payments"},
        "managedFields": [
            {"manager": "evictord", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2025-12-31T23:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:team": {}, "f:tier": {}}},
                          "f:spec": {".": {}, "f:requesters": {}, "f:target": {".": {}, "f:pod": {".": {}, "f:name": {}, "f:uid": {}}}}}},
            {"manager": "evictord", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2025-12-31T23:50:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:activeInterceptors": {}, "f:interceptors": {}, "f:observedGeneration": {}, "f:targetInterceptors": {}}}},
            {"manager": "checkout-interceptor", "operation": "Update", "apiVersion": "evictord.dev/v1alpha1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:interceptors": {}}}}
        ]
    })
}

/// The interceptor heartbeat fixture with the metadata of [`written_metadata`] (5 KiB), re-timed
/// to `now` (the rules check heartbeats against the clock: the new heartbeat is now, the
/// previous one two minutes ago).
fn heartbeat_bodies(now: Timestamp) -> Vec<ReviewBody> {
    let t = |offset: jiff::Span| -> Value {
        let ts = now.checked_add(offset).expect("timestamp");
        Value::String(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    };
    let mut r = review(HEARTBEAT);
    for side in ["object", "oldObject"] {
        for (key, value) in written_metadata().as_object().expect("an object") {
            r = r.set(&format!("/request/{side}/metadata/{key}"), value.clone());
        }
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
    uid_variants(r, 2)
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
    fn bodies(self, creates: &[ReviewBody]) -> Bodies {
        Bodies::new(match self {
            Body::Pod => POD_BODIES.get_or_init(pod_bodies).clone(),
            Body::Heartbeat => heartbeat_bodies(Timestamp::now()),
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

/// All runs for one body over one protocol: per run, the limit, evictord and (when set) the
/// baseline.
#[derive(Clone, Debug, Serialize)]
pub struct BodyResult {
    pub body: &'static str,
    pub protocol: Protocol,
    pub bytes: usize,
    pub path: &'static str,
    pub limit: Vec<ServerRun>,
    pub evictord: Vec<ServerRun>,
    /// `EVICTORD_BENCH_BASELINE` measured the same way (empty when not set).
    pub baseline: Vec<ServerRun>,
    /// evictord's saturation throughput / the limit's, per run.
    pub throughput_ratio: Vec<f64>,
    /// The limit's server CPU per request / evictord's, per run (the throughput fraction each
    /// would reach if the server's CPU, not the load generator, were the bottleneck).
    pub cpu_efficiency_ratio: Vec<f64>,
    /// The baseline's saturation throughput / the limit's, per run.
    pub baseline_throughput_ratio: Vec<f64>,
    /// The limit's server CPU per request / the baseline's, per run.
    pub baseline_cpu_efficiency_ratio: Vec<f64>,
}

/// A `perf` profile of evictord saturated with one body.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub body: &'static str,
    pub protocol: Protocol,
    /// The summary's file name, next to `REPORT.md`.
    pub file: Option<String>,
    /// Why there is no profile.
    pub error: Option<String>,
    /// evictord's throughput during the profiled run (perf costs a little).
    pub requests_per_second: Option<f64>,
    pub seconds: f64,
}

/// Part 1 results.
#[derive(Clone, Debug, Serialize)]
pub struct WebhookResults {
    pub pinning: String,
    pub runs: usize,
    pub protocols: Vec<Protocol>,
    pub connections_saturation: usize,
    pub connections_fixed_rate: usize,
    pub h2_connections: usize,
    pub h2_streams: usize,
    pub warmup_s: f64,
    pub saturation_s: f64,
    pub fixed_rate_s: f64,
    pub rates: Vec<u64>,
    /// Distinct `request.uid`s per body kind (every answer must echo its request's).
    pub uid_variants: usize,
    /// One entry per body and protocol.
    pub bodies: Vec<BodyResult>,
    /// Pods targeted by the EvictionRequest creates (one review each, in turn).
    pub create_targets: Option<usize>,
    /// Why the EvictionRequest creates did not run.
    pub create_skipped: Option<String>,
    /// `EVICTORD_BENCH_BASELINE`, when set.
    pub baseline: Option<String>,
    /// Why the baseline was not measured (or not for every body).
    pub baseline_errors: Vec<String>,
    pub profiles: Vec<Profile>,
}

/// The connections (and HTTP/2 streams per connection) of a saturation run.
fn saturation_workers(s: &Settings, protocol: Protocol) -> (usize, usize) {
    match protocol {
        Protocol::Http1 | Protocol::Http1NewConnection => (s.connections, 1),
        Protocol::H2 => (s.h2_connections, s.h2_streams),
    }
}

/// The connection pool (and HTTP/2 streams per connection) of the fixed-rate runs.
fn rate_workers(s: &Settings, protocol: Protocol) -> (usize, usize) {
    match protocol {
        Protocol::Http1 | Protocol::Http1NewConnection => (s.rate_connections, 1),
        Protocol::H2 => (s.h2_connections, s.h2_streams),
    }
}

/// Checks once that the body is allowed and its uid echoed (a denial would measure another
/// code path).
async fn probe(target: &Target, body: Body, creates: &[ReviewBody]) -> anyhow::Result<()> {
    let mut probe = loadgen::Connection::open(target).await?;
    let answer = probe.review(body.bodies(creates).next()).await?;
    anyhow::ensure!(
        answer == Answer::Allowed,
        "{} at {}{} over {} was not answered 200 allowed with its uid: {answer:?}",
        body.name(),
        target.addr,
        target.path,
        target.protocol.label()
    );
    Ok(())
}

async fn measure(
    target: &Target,
    pid: u32,
    body: Body,
    creates: &[ReviewBody],
    s: &Settings,
) -> anyhow::Result<ServerRun> {
    probe(target, body, creates).await?;
    let saturation = loadgen::saturate(
        target,
        body.bodies(creates),
        saturation_workers(s, target.protocol),
        s.warmup,
        s.saturation_time,
        Some(pid),
    )
    .await?;
    let mut fixed = Vec::new();
    // Fixed rates only on kept connections: with a handshake per request they would measure the
    // load generator's handshakes as much as the server.
    let rates = if target.protocol.keeps_connections() {
        s.rates.as_slice()
    } else {
        &[]
    };
    for &rate in rates {
        fixed.push(
            loadgen::fixed_rate(
                target,
                body.bodies(creates),
                rate,
                s.fixed_rate_time,
                rate_workers(s, target.protocol),
            )
            .await?,
        );
    }
    Ok(ServerRun { saturation, fixed })
}

/// Lines of a profile summary section at most (the hottest symbols first).
const PROFILE_LINES: usize = 40;
/// Characters of a profile line at most (Rust symbols are long).
const PROFILE_WIDTH: usize = 180;

fn perf_available() -> Result<(), String> {
    match Command::new("perf").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`perf --version` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!(
            "no `perf` on PATH ({e}; Debian: apt-get install linux-perf)"
        )),
    }
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `perf report` of `data` with the columns `fields`, rows over `limit` percent, comment and
/// blank lines dropped, at most `lines`.
fn perf_report(data: &Path, fields: &str, limit: &str, lines: usize) -> Result<String, String> {
    perf_report_with(data, &["--no-children", "-F", fields], limit, lines)
}

/// `perf report` of `data` with `view` (e.g. `--children` and columns), as [`perf_report`].
fn perf_report_with(
    data: &Path,
    view: &[&str],
    limit: &str,
    lines: usize,
) -> Result<String, String> {
    // `-F` alone (no `--sort`) keeps the rows ordered by overhead.
    let out = Command::new("perf")
        .arg("report")
        .arg("-i")
        .arg(data)
        .args(["--stdio", "-g", "none", "--percent-limit", limit])
        .args(view)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("perf report: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "perf report failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(lines)
        .map(|l| {
            l.chars()
                .take(PROFILE_WIDTH)
                .collect::<String>()
                .trim_end()
                .to_string()
                + "\n"
        })
        .collect())
}

/// One more saturation run of evictord (pid `pid`) with `body`, under
/// `perf record -F 999 -g -p PID` for the measured window; writes `profile-<body>.txt` into
/// `report_dir` (the shared objects, then the hottest symbols, self time). Never fails the
/// benchmark: what went wrong is recorded instead.
async fn profile(
    target: &Target,
    pid: u32,
    body: Body,
    creates: &[ReviewBody],
    s: &Settings,
    scratch: &Path,
    report_dir: &Path,
) -> Profile {
    let mut p = Profile {
        body: body.name(),
        protocol: target.protocol,
        file: None,
        error: None,
        requests_per_second: None,
        seconds: s.saturation_time.as_secs_f64(),
    };
    if let Err(e) = perf_available() {
        p.error = Some(e);
        return p;
    }
    let data = if s.profile_keep {
        report_dir.join(format!("perf-{}.data", body.name()))
    } else {
        scratch.join(format!("perf-{}.data", body.name()))
    };
    let call_graph = if s.profile_keep {
        ["--call-graph", "dwarf,16384"]
    } else {
        ["--call-graph", "fp"]
    };
    let run = {
        let (target, bodies) = (target.clone(), body.bodies(creates));
        let (workers, warmup, time) = (
            saturation_workers(s, target.protocol),
            s.warmup,
            s.saturation_time,
        );
        tokio::spawn(async move {
            loadgen::saturate(&target, bodies, workers, warmup, time, Some(pid)).await
        })
    };
    // The load generator opens its connections, then warms up; perf covers the measured window.
    tokio::time::sleep(s.warmup).await;
    let record = tokio::process::Command::new("perf")
        .args(["record", "-F", "999"])
        .args(call_graph)
        .args(["-p", &pid.to_string(), "-o"])
        .arg(&data)
        .args([
            "--",
            "sleep",
            &format!("{:.1}", s.saturation_time.as_secs_f64()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await;
    match run.await {
        Ok(Ok(sat)) => p.requests_per_second = Some(sat.requests_per_second),
        Ok(Err(e)) => p.error = Some(format!("the profiled saturation run failed: {e:#}")),
        Err(e) => p.error = Some(format!("the profiled saturation run panicked: {e}")),
    }
    let why = |stderr: &[u8]| {
        let text = String::from_utf8_lossy(stderr);
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        format!(
            "{} (kernel.perf_event_paranoid = {}, running as uid {})",
            tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
            paranoid(),
            uid()
        )
    };
    match record {
        Err(e) => {
            p.error = Some(format!("perf record: {e}"));
            return p;
        }
        Ok(o) if !o.status.success() || !data.exists() => {
            p.error = Some(format!("perf record failed: {}", why(&o.stderr)));
            return p;
        }
        Ok(_) => {}
    }
    let by_dso = perf_report(&data, "overhead,dso", "1.5", 15);
    let by_symbol = perf_report(&data, "overhead,dso,sym", "0.5", PROFILE_LINES);
    let inclusive = if s.profile_keep {
        let view = ["--children", "--dsos", "evictord", "--sort", "sym"];
        match perf_report_with(&data, &view, "1", 80) {
            Ok(t) => format!(
                "\n== evictord's functions with their callees (children), kept data: {} ==\n{t}",
                data.display()
            ),
            Err(e) => format!("\n== inclusive view failed: {e} ==\n"),
        }
    } else {
        let _ = std::fs::remove_file(&data);
        String::new()
    };
    let (by_dso, by_symbol) = match (by_dso, by_symbol) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            p.error = Some(e);
            return p;
        }
    };
    let file = format!("profile-{}.txt", body.name());
    let text = format!(
        "perf profile of evictord (pid {pid}) saturated with {} over {}: {} connections x {} streams, closed loop, {:.0} req/s during the profile\n\
         perf record -F 999 --call-graph {} -p {pid} -- sleep {:.1}   (after {:.0} s of warm-up; self time, samples of every thread)\n\
         perf report --stdio --no-children -g none -F overhead,dso[,sym] --percent-limit 1.5 (objects) / 0.5 (symbols)   (lines over {PROFILE_WIDTH} characters cut)\n\n\
         == by shared object ==\n{by_dso}\n== hottest symbols (at most {PROFILE_LINES}) ==\n{by_symbol}{inclusive}",
        body.name(),
        target.protocol.label(),
        saturation_workers(s, target.protocol).0,
        saturation_workers(s, target.protocol).1,
        p.requests_per_second.unwrap_or(f64::NAN),
        call_graph[1],
        s.saturation_time.as_secs_f64(),
        s.warmup.as_secs_f64(),
    );
    match std::fs::write(report_dir.join(&file), text) {
        Ok(()) => p.file = Some(file),
        Err(e) => p.error = Some(format!("writing {file}: {e}")),
    }
    p
}

fn uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Runs part 1; profiles go to `report_dir`.
pub async fn run(
    s: &Settings,
    scratch: &Path,
    report_dir: &Path,
) -> anyhow::Result<WebhookResults> {
    let cert_dir: PathBuf = scratch.join("certs");
    std::fs::create_dir_all(&cert_dir)?;
    let bundle = evictord::tls::generate(
        &evictord::tls::serving_names(None, None),
        Duration::from_secs(7 * 86400),
        Timestamp::now(),
    )?;
    evictord::tls::write_dir(&cert_dir, &bundle)?;
    let mut tls = std::collections::HashMap::new();
    for &p in &s.protocols {
        tls.insert(p, loadgen::client_config(&bundle.ca_pem, p)?);
    }

    let limit = start_limit(&cert_dir, scratch)?;
    let evictord = start_evictord(Binary::this_build(), &cert_dir, scratch, None, false).await?;
    let baseline_binary = s.baseline.as_deref().map(|path| Binary {
        name: "baseline",
        path,
    });
    let mut baseline_errors = Vec::new();
    let baseline = match baseline_binary {
        None => None,
        Some(b) => match start_evictord(b, &cert_dir, scratch, None, false).await {
            Ok(server) => Some(server),
            Err(e) => {
                baseline_errors.push(format!("offline (pods, heartbeats): {e:#}"));
                None
            }
        },
    };
    // EvictionRequest creates: only with a control plane.
    let (online, create_skipped) = if std::env::var_os("KUBEBUILDER_ASSETS").is_some() {
        eprintln!("[webhook] {CREATE_TARGETS} pods for the EvictionRequest creates");
        (
            Some(start_online(&cert_dir, scratch, baseline_binary, &mut baseline_errors).await?),
            None,
        )
    } else {
        (
            None,
            Some("evictionrequest_create_cached_pod: KUBEBUILDER_ASSETS is not set (run `make bench`)".to_string()),
        )
    };
    let creates: Vec<ReviewBody> = online.as_ref().map_or_else(Vec::new, |o| o.bodies.clone());
    let target = |server: &Server, body: Body, protocol: Protocol| Target {
        addr: server.addr,
        path: body.path().to_string(),
        tls: tls[&protocol].clone(),
        protocol,
    };

    let mut bodies = Vec::new();
    let mut profiles = Vec::new();
    let mut kinds = vec![Body::Pod, Body::Heartbeat];
    if online.is_some() {
        kinds.push(Body::Create);
    }
    for body in kinds {
        // The create reviews go to the evictords connected to the cluster.
        let (evictord, baseline) = match (&online, body) {
            (Some(o), Body::Create) => (&o.server, o.baseline.as_ref()),
            _ => (&evictord, baseline.as_ref()),
        };
        let bytes = body.bodies(&creates).next().bytes.len();
        let mut results: Vec<BodyResult> = s
            .protocols
            .iter()
            .map(|&protocol| BodyResult {
                body: body.name(),
                protocol,
                bytes,
                path: body.path(),
                limit: Vec::new(),
                evictord: Vec::new(),
                baseline: Vec::new(),
                throughput_ratio: Vec::new(),
                cpu_efficiency_ratio: Vec::new(),
                baseline_throughput_ratio: Vec::new(),
                baseline_cpu_efficiency_ratio: Vec::new(),
            })
            .collect();
        let mut servers: Vec<&Server> = vec![&limit, evictord];
        servers.extend(baseline);
        for run in 0..s.runs {
            for result in &mut results {
                let protocol = result.protocol;
                eprintln!(
                    "[webhook] {} over {} run {}/{}: {}",
                    body.name(),
                    protocol.label(),
                    run + 1,
                    s.runs,
                    servers
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                // Rotate the order so that a drifting machine does not favour one server.
                let mut measured: Vec<Option<ServerRun>> = vec![None; servers.len()];
                for k in 0..servers.len() {
                    let i = (k + run) % servers.len();
                    let server = servers[i];
                    measured[i] = Some(
                        measure(
                            &target(server, body, protocol),
                            server.child.id(),
                            body,
                            &creates,
                            s,
                        )
                        .await?,
                    );
                }
                let mut measured = measured.into_iter().map(|m| m.expect("measured"));
                let l = measured.next().expect("limit");
                let e = measured.next().expect("evictord");
                let b = measured.next();
                eprintln!(
                    "[webhook]   saturation: limit {:.0} req/s ({:.2} cores), evictord {:.0} req/s ({:.2} cores){}",
                    l.saturation.requests_per_second,
                    l.saturation.server_cpu_cores.unwrap_or(f64::NAN),
                    e.saturation.requests_per_second,
                    e.saturation.server_cpu_cores.unwrap_or(f64::NAN),
                    b.as_ref().map_or(String::new(), |b| format!(
                        ", baseline {:.0} req/s ({:.2} cores)",
                        b.saturation.requests_per_second,
                        b.saturation.server_cpu_cores.unwrap_or(f64::NAN)
                    ))
                );
                let cpu_ratio = |x: &ServerRun| {
                    Some(
                        l.saturation.server_cpu_us_per_request?
                            / x.saturation.server_cpu_us_per_request?,
                    )
                };
                result.cpu_efficiency_ratio.extend(cpu_ratio(&e));
                result
                    .throughput_ratio
                    .push(e.saturation.requests_per_second / l.saturation.requests_per_second);
                if let Some(b) = b {
                    result.baseline_cpu_efficiency_ratio.extend(cpu_ratio(&b));
                    result
                        .baseline_throughput_ratio
                        .push(b.saturation.requests_per_second / l.saturation.requests_per_second);
                    result.baseline.push(b);
                }
                result.limit.push(l);
                result.evictord.push(e);
            }
        }
        if s.profile {
            // HTTP/1.1 is how kube-apiserver calls admission webhooks (its webhook client offers
            // only `http/1.1`): profile that when it is measured.
            let protocol = if s.protocols.contains(&Protocol::Http1) {
                Protocol::Http1
            } else {
                s.protocols[0]
            };
            eprintln!(
                "[webhook] {} over {}: perf profile of evictord",
                body.name(),
                protocol.label()
            );
            let p = profile(
                &target(evictord, body, protocol),
                evictord.child.id(),
                body,
                &creates,
                s,
                scratch,
                report_dir,
            )
            .await;
            if let Some(e) = &p.error {
                eprintln!("[webhook]   no profile: {e}");
            }
            profiles.push(p);
        }
        bodies.extend(results);
    }
    if let Some(o) = online {
        o.clean_up().await?;
    }
    drop(baseline);
    drop(evictord);
    drop(limit);
    Ok(WebhookResults {
        create_targets: (!creates.is_empty()).then_some(creates.len()),
        create_skipped,
        pinning: if crate::machine::cpus() >= 2 && Path::new("/usr/bin/taskset").exists() {
            "servers on CPU 1, load generator on CPU 0 (taskset)".into()
        } else {
            "none".into()
        },
        runs: s.runs,
        protocols: s.protocols.clone(),
        connections_saturation: s.connections,
        connections_fixed_rate: s.rate_connections,
        h2_connections: s.h2_connections,
        h2_streams: s.h2_streams,
        warmup_s: s.warmup.as_secs_f64(),
        saturation_s: s.saturation_time.as_secs_f64(),
        fixed_rate_s: s.fixed_rate_time.as_secs_f64(),
        rates: s.rates.clone(),
        uid_variants: UID_VARIANTS,
        bodies,
        baseline: s.baseline.as_ref().map(|p| p.display().to_string()),
        baseline_errors,
        profiles,
    })
}
