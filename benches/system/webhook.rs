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
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::evictord_process::{Binary, Server, free_addr, pinned, start_evictord, wait_listening};
use crate::fixture::{EVICTION_REQUEST, review};
use crate::loadgen::{self, Answer, FixedRate, Protocol, ReviewBody, Saturation, Target};
use crate::settings::Settings;
use crate::webhook_bodies::{Body, UID_VARIANTS, request_uid};
use crate::webhook_profile::{Profile, profile};

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
pub(crate) fn saturation_workers(s: &Settings, protocol: Protocol) -> (usize, usize) {
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
