//! evictord's replicas replaced one at a time — SIGTERM, a new one ready before the next goes, as
//! `helm upgrade` rolls the chart's Deployment — while a drainer calls the Eviction API for a
//! pod with interceptors: every call is answered by the bridge ("Eviction triggered"), none
//! fails open to the Eviction API. The webhook is registered with `failurePolicy: Ignore`
//! (SPEC 5.1), so a call that a stopping replica drops would let the drainer's eviction reach
//! the PodDisruptionBudget alone and the pod's interceptors would be skipped. Here the budget
//! allows nothing (no disruption controller runs), so such a call shows as its refusal.
//! (Its own test binary: it registers the webhooks of replicas it stops.)

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use support::fixtures::{blocking_pdb, pod};
use support::soak::replicas::Replicas;
use support::tools::kubectl;

/// How many times both replicas are replaced.
const ROLLS: usize = 4;

/// Drainers calling at once, one call after the other each, so that calls are in flight
/// whenever a replica stops.
const DRAINERS: usize = 6;

/// One drainer call, by `kubectl create --raw` (a client that does not retry a 429 on its own):
/// its answer ("" when the eviction was allowed).
fn call(c: &'static support::TestCluster, ns: &str) -> String {
    let body = format!(
        r#"{{"apiVersion":"policy/v1beta1","kind":"Eviction","metadata":{{"name":"db","namespace":"{ns}"}}}}"#
    );
    let path = format!("/api/v1/namespaces/{ns}/pods/db/eviction");
    let out = kubectl(c, &["create", "--raw", &path, "-f", "-"], Some(&body));
    if out.status.success() {
        String::new()
    } else {
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_evictord_never_lets_an_eviction_call_fail_open() {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("roll").await;
    let mut replicas = Replicas::start(c, &ns, &[], None)
        .await
        .expect("two replicas");
    support::Evictord::register_webhooks_at(
        c,
        "evictord-roll",
        replicas.proxy_port,
        &replicas.cert_dir.join("ca.crt"),
    )
    .await;
    pod("db")
        .label("app", "db")
        .interceptors(&["db.example.com"])
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "db", "app", "db", 1).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let first = call(c, &ns);
    assert!(first.contains("Eviction triggered"), "{first}");
    let stop = Arc::new(AtomicBool::new(false));
    let drainers: Vec<_> = (0..DRAINERS)
        .map(|_| {
            let (ns, stop) = (ns.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                // Bounded: at most 10 minutes of calls.
                for _ in 0..6000 {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let ns = ns.clone();
                    answers.push(
                        tokio::task::spawn_blocking(move || call(c, &ns))
                            .await
                            .unwrap(),
                    );
                }
                answers
            })
        })
        .collect();
    for n in 1..=ROLLS {
        let rolling = std::time::Instant::now();
        replicas.roll(false).await.expect("a rolling restart");
        println!("roll {n} done in {:.1} s", rolling.elapsed().as_secs_f64());
        // The calls go on a moment on the new replicas before the next roll.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Release);
    let mut answers = Vec::new();
    for d in drainers {
        answers.extend(d.await.unwrap());
    }
    let bridged = answers
        .iter()
        .filter(|a| a.contains("Eviction triggered"))
        .count();
    let other: Vec<&String> = answers
        .iter()
        .filter(|a| !a.contains("Eviction triggered"))
        .collect();
    println!(
        "{} calls during {ROLLS} rolls of both replicas: {bridged} answered by the bridge, other: {other:?}",
        answers.len()
    );
    let failed_open: Vec<String> = std::fs::read_to_string(c.dir.join("apiserver.err"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("failing open pods-eviction"))
        .map(str::to_string)
        .collect();
    assert!(
        other.is_empty() && failed_open.is_empty(),
        "calls not answered by the bridge: {other:#?}\nkube-apiserver: {failed_open:#?}"
    );
    assert!(answers.len() >= 20, "too few calls: {}", answers.len());
    assert!(
        pods.get_opt("db").await.unwrap().is_some(),
        "the pod is still there"
    );
}

/// SIGTERM: `/readyz` answers 503 at once while the webhook still accepts connections, for the
/// whole `--shutdown-delay`; a second SIGTERM ends the wait and the process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_the_webhook_serves_on_not_ready_until_the_delay_or_a_second_signal() {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let mut e = support::Evictord::spawn(
        c,
        &["--controllers=none"],
        support::evictord::SpawnOptions {
            env: vec![("EVICTORD_SHUTDOWN_DELAY".into(), "10m".into())],
            as_deployed: true,
            ..Default::default()
        },
    );
    e.ready().await;
    let term = |pid: u32| {
        let status = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    };
    let pid = e.pid().expect("running");
    term(pid);
    support::wait::until(Duration::from_secs(30), "/readyz 503 shutting down", || {
        let probe = e.probe("/readyz");
        async move {
            probe
                .await
                .filter(|(code, body)| *code == 503 && body.contains("shutting down"))
        }
    })
    .await;
    // Well after the signal, still serving: a TLS handshake and a request are answered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(e.running(), "exited before the delay");
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", e.webhook_port)).await;
    assert!(
        connect.is_ok(),
        "the webhook refused a connection: {connect:?}"
    );
    assert!(
        e.logs().contains("the webhook serves on for the delay"),
        "{}",
        e.logs()
    );
    term(pid);
    support::wait::until(
        Duration::from_secs(30),
        "exit after a second SIGTERM",
        || {
            let running = e.running();
            async move { (!running).then_some(()) }
        },
    )
    .await;
    assert!(e.logs().contains("second signal"), "{}", e.logs());
}
