//! The soak (`make soak`; ignored by `make test`): a pool of every workload kind
//! (`tests/support/pool/`) drained round after round — four nodes by NodeMaintenances under a
//! MaintenanceBudget of two (a rolling maintenance, each set to Complete once Drained), two
//! others by the real `kubectl drain` through the Eviction API bridge at the same time — while a
//! seeded schedule of faults hits evictord's two replicas and the control plane: the leader
//! SIGKILLed, the standby SIGKILLed, kube-apiserver restarted (which cuts every watch), etcd
//! paused, and evictord rolled to the build of an earlier commit and back (`SOAK_OLD_BUILD`, from
//! `tests/tools/soak-old-build.sh`), the CRDs of each build applied first as the book's upgrade
//! section says. A checker samples the invariants every 200 ms the whole time
//! (`tests/support/soak/checker.rs`); at the end every maintenance gave its nodes back and
//! nothing evictord writes is left behind. The seed (`SOAK_SEED`, else the clock) is printed at
//! the start and in every failure, with the fault timeline; `SOAK_FAULTS` sets the number of
//! faults (default 32). Also the table tests of the schedule and of the checker's readings (its
//! reports on made-up inputs: `tests/soak_checker.rs`).

mod support;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use support::pool::schedule::Timing;
use support::pool::workloads::{self, Variant};
use support::pool::{Pool, Spec};
use support::soak::agents::{NodeAgents, STATIC_POD};
use support::soak::checker::{self, Checker, Inputs, evictord_identity};
use support::soak::faults::{informers_watching, inject};
use support::soak::leftovers::leftovers;
use support::soak::replicas::{Replicas, Started};
use support::soak::rounds::round;
use support::soak::schedule::{Fault, plan};
use support::soak::{OldBuild, Timeline, apply_crds, current_crds};

// ---- the schedule and the checker's readings (pure) ----

#[test]
fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
    let a = plan(42, 32, (6, 12), 1);
    assert_eq!(a, plan(42, 32, (6, 12), 1));
    assert_ne!(a, plan(43, 32, (6, 12), 1));
    assert_eq!(a.len(), 32);
    for p in &a {
        assert!((6..=12).contains(&p.after.as_secs()), "{p:?}");
    }
}

#[test]
fn every_schedule_downgrades_then_upgrades_back_and_holds_every_process_fault() {
    for seed in 0..200 {
        for swaps in [1, 2] {
            let s = plan(seed, 32, (6, 12), swaps);
            let swaps_seen: Vec<Fault> = s
                .iter()
                .map(|p| p.fault)
                .filter(|f| matches!(f, Fault::Downgrade | Fault::Upgrade))
                .collect();
            let want: Vec<Fault> = (0..swaps)
                .flat_map(|_| [Fault::Downgrade, Fault::Upgrade])
                .collect();
            assert_eq!(swaps_seen, want, "seed {seed}");
        }
        let none = plan(seed, 32, (6, 12), 0);
        assert!(
            none.iter()
                .all(|p| !matches!(p.fault, Fault::Downgrade | Fault::Upgrade)),
            "seed {seed}"
        );
    }
    let kinds = |f: &Fault| match f {
        Fault::KillLeader { .. } => 0,
        Fault::KillStandby { .. } => 1,
        Fault::RestartApiserver { .. } => 2,
        Fault::PauseEtcd { .. } => 3,
        Fault::Downgrade | Fault::Upgrade => 4,
        Fault::KillNodeAgent { .. } => 5,
    };
    let mut seen = [0usize; 6];
    for p in plan(7, 32, (6, 12), 1) {
        seen[kinds(&p.fault)] += 1;
    }
    assert!(seen.iter().all(|n| *n > 0), "every kind of fault: {seen:?}");
}

#[test]
fn the_identity_is_read_from_evictords_user_agent() {
    let cases = [
        (
            "evictord/0.1.0 (controller; soak-replica-3)",
            Some("soak-replica-3"),
        ),
        ("evictord/0.1.0 (webhook; pod-a)", Some("pod-a")),
        ("evictord/0.1.0 (controller)", None),
        ("kubectl/v1.35.2 (linux/amd64)", None),
        ("", None),
    ];
    for (ua, want) in cases {
        assert_eq!(evictord_identity(ua), want, "{ua:?}");
    }
}

#[test]
fn leadership_changes_are_read_from_every_replicas_log_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        Started {
            identity: name.to_string(),
            log: p,
            old: false,
            started: SystemTime::now(),
        }
    };
    let a = write(
        "a",
        "2026-11-26T10:00:01Z INFO evictord: acquired leadership\n\
         2026-11-26T10:00:09Z INFO evictord: something else\n",
    );
    let b = write(
        "b",
        "2026-11-26T10:00:20.5Z INFO evictord: acquired leadership\n",
    );
    let changes = checker::leadership_changes(&[b, a]);
    let who: Vec<&str> = changes.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(who, ["a", "b"]);
}

/// The checker can fail, and does so while the run goes on: a Deployment under the goal below
/// its replicas and its PodDisruptionBudget's floor broken (from a pod cache), a pod evicted
/// twice by evictord and an eviction by a replica that never led (from an audit log).
/// kube-controller-manager's informers are back once its shared informers watch every resource
/// a drain waits on; a refused watch, another client's watch or a list does not count.
#[test]
fn the_controller_manager_is_watching_again_by_the_audit_log() {
    let line = |ua: &str, verb: &str, resource: &str, code: u16| {
        serde_json::json!({"verb": verb, "userAgent": ua, "objectRef": {"resource": resource},
                           "responseStatus": {"code": code}})
        .to_string()
    };
    let kcm = "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19/shared-informers";
    let mut lines = vec![
        line(kcm, "watch", "pods", 200),
        line(kcm, "watch", "replicasets", 403),
        line(kcm, "list", "deployments", 200),
        line(
            "evictord/0.1.0 (controller; r)",
            "watch",
            "statefulsets",
            200,
        ),
        "not json".to_string(),
    ];
    let text = lines.join("\n");
    assert_eq!(
        informers_watching(&text).into_iter().collect::<Vec<_>>(),
        ["pods"]
    );
    for r in [
        "replicasets",
        "deployments",
        "statefulsets",
        "poddisruptionbudgets",
        "horizontalpodautoscalers",
    ] {
        lines.push(line(kcm, "watch", r, 200));
    }
    assert_eq!(informers_watching(&lines.join("\n")).len(), 6);
}

// ---- the soak on the real control plane ----

/// The seed: `SOAK_SEED`, else the clock.
fn seed() -> u64 {
    match std::env::var("SOAK_SEED") {
        Ok(s) => s.trim().parse().expect("SOAK_SEED: an unsigned integer"),
        Err(_) => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: a number"))
        })
        .unwrap_or(default)
}

/// Pool: 10 nodes, the first 6 drained (4 by the maintenances, 2 by kubectl), about 40 pods.
const NODES: usize = 10;
const MAINTAINED: usize = 4;
const BY_KUBECTL: usize = 2;
const BUDGET: i32 = 2;
/// A round that takes longer has stalled.
const ROUND_BOUND: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "about ten minutes: run by `make soak`"]
async fn a_pool_drains_under_random_faults_and_an_evictord_downgrade_without_loss() {
    let seed = seed();
    let faults = env_usize("SOAK_FAULTS", 32);
    let old = std::env::var("SOAK_OLD_BUILD")
        .ok()
        .map(|dir| Arc::new(OldBuild::at(std::path::Path::new(&dir))));
    let schedule = plan(seed, faults, (6, 12), usize::from(old.is_some()));
    println!(
        "SOAK seed {seed} (reproduce: SOAK_SEED={seed} SOAK_FAULTS={faults} make soak): {} faults",
        schedule.len()
    );
    for (i, p) in schedule.iter().enumerate() {
        println!(
            "SOAK plan {:2}: after {:2} s, {}",
            i + 1,
            p.after.as_secs(),
            p.fault
        );
    }
    match &old {
        Some(o) => println!("SOAK earlier build: {}", o.bin.display()),
        None => println!(
            "SOAK no SOAK_OLD_BUILD: evictord is not rolled to an earlier build in this run"
        ),
    }
    let started = Instant::now();
    let timeline = Timeline::new(started);

    support::control_plane::cluster_with_request_audit().await;
    let c = support::control_plane::cluster_with_controller_manager().await;
    let client = c.client().await;
    let ns = c.namespace("soak").await;
    apply_crds(c, &current_crds()).expect("this build's CRDs");
    let replicas = Replicas::start(
        c,
        &ns,
        support::surge::FLAGS,
        old.as_ref().map(|o| o.bin.clone()),
    )
    .await
    .expect("two replicas");
    support::Evictord::register_webhooks_at(
        c,
        "evictord-soak",
        replicas.proxy_port,
        &replicas.cert_dir.join("ca.crt"),
    )
    .await;
    timeline.note(format!(
        "replicas {:?} ready, leader {:?}",
        replicas
            .live
            .iter()
            .map(|r| r.identity.as_str())
            .collect::<Vec<_>>(),
        replicas.leader().await
    ));
    let spec = Spec {
        nodes: NODES,
        drained: MAINTAINED + BY_KUBECTL,
        pods: 40,
        variant: Variant::Full,
        timing: Timing::default(),
        served: workloads::SERVED.iter().map(|s| s.to_string()).collect(),
        at_least_one: true,
    };
    let pool = Pool::create(c, &client, &ns, &ns, &spec)
        .await
        .expect("the pool");
    pool.wait_settled(Duration::from_secs(240))
        .await
        .expect("the pool settled");
    let maintained: Vec<String> = pool.drained[..MAINTAINED].to_vec();
    let by_kubectl: Vec<String> = pool.drained[MAINTAINED..].to_vec();
    support::soak::rolling_budget(&client, &ns, &ns, &maintained, BUDGET)
        .await
        .expect("the MaintenanceBudget");
    timeline.note(format!(
        "pool settled: {} pods; MaintenanceBudget {ns} (maxUnavailable {BUDGET}) over {maintained:?}",
        pool.pod_count()
    ));
    // A node agent, a static pod and its played kubelet on each maintained node: every round's
    // maintenances hold the manifests, and the schedule kills the agents.
    let static_ns = c.namespace("soak-static").await;
    let agents = NodeAgents::start(c, &client, &maintained, &static_ns)
        .await
        .expect("the node agents");
    let agents = Arc::new(tokio::sync::Mutex::new(agents));
    timeline.note(format!(
        "node agents ready on {maintained:?}, static pod {STATIC_POD} in namespace {static_ns}"
    ));

    let history = replicas.history.clone();
    let checker = Checker::start(Inputs {
        pods: pool.played.pods(),
        nodes: pool.played.nodes(),
        budgeted: maintained.iter().cloned().collect(),
        max_unavailable: BUDGET as usize,
        tracked: pool.tracked().await.expect("the workloads"),
        audit_log: c.request_audit.clone().expect("the request audit log"),
        logs: c.dir.clone(),
        goal_suspended: old.as_ref().and_then(|o| o.goal_suspended.clone()),
        namespace: ns.clone(),
        replicas: history.clone(),
    });
    let replicas = Arc::new(tokio::sync::Mutex::new(replicas));
    let stop = Arc::new(AtomicBool::new(false));
    let injecting = tokio::spawn(inject(
        c,
        replicas.clone(),
        schedule.clone(),
        old.clone(),
        timeline.clone(),
        stop.clone(),
        agents.clone(),
    ));

    let mut rounds = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for number in 1..=1000 {
        match round(
            c,
            &pool,
            number,
            &maintained,
            &by_kubectl,
            &timeline,
            ROUND_BOUND,
        )
        .await
        {
            Ok(r) => rounds.push(r),
            Err(e) => {
                failures.push(e);
                break;
            }
        }
        if checker.violations_so_far() > 0 || injecting.is_finished() {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let injected = match injecting.await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            failures.push(format!("injecting the faults: {e}"));
            0
        }
        Err(e) => {
            failures.push(format!("the fault task: {e}"));
            0
        }
    };
    if failures.is_empty() && injected < schedule.len() {
        failures.push(format!(
            "only {injected} of {} faults injected",
            schedule.len()
        ));
    }
    // Nothing left behind (the last round deleted its maintenances; evictord removes their
    // finalizers and has put everything back).
    let mut left = Vec::new();
    for _ in 0..60 {
        left = leftovers(&client, &pool)
            .await
            .unwrap_or_else(|e| vec![e.to_string()]);
        left.extend(agents.lock().await.leftovers());
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if !left.is_empty() {
        failures.push(format!("left behind: {left:?}"));
    }
    {
        let mut r = replicas.lock().await;
        if !r.all_running() {
            failures.push("a replica exited on its own".into());
        }
        if r.running_old() {
            failures.push("the earlier build still runs at the end".into());
        }
    }
    let (mut violations, counts) = checker.stop().await;
    for v in &mut violations {
        let events = support::soak::evidence::events(&client, &ns, &v.objects).await;
        v.evidence.extend(events);
    }
    let pods_drained: usize = rounds.iter().map(|r| r.targeted).sum();
    let kubectl_runs: usize = rounds.iter().map(|r| r.kubectl_runs).sum();
    let by_kind = |want: fn(&Fault) -> bool| {
        schedule
            .iter()
            .take(injected)
            .filter(|p| want(&p.fault))
            .count()
    };
    let (agents_killed, mirror_pods) = {
        let a = agents.lock().await;
        (a.killed, a.mirror_pods_started())
    };
    let figures = format!(
        "seed {seed}: {injected} faults injected in {:.0} s (leader killed {}, standby killed {}, \
         kube-apiserver restarted {}, etcd paused {}, node agent killed {}, downgrades {}, \
         upgrades {}); {} rounds, {} pods drained, static pod mirrors started {} on {} nodes, kubectl drain run {} times for {} rounds; {} samples, {} Eviction API \
         calls ({} answered 2xx to evictord, {} to others), {} of evictord's checked against \
         the leadership, {:.1} replica-seconds lost under the goal ({} episodes while it was \
         suspended); {} replicas started; violations {}",
        started.elapsed().as_secs_f64(),
        by_kind(|f| matches!(f, Fault::KillLeader { .. })),
        by_kind(|f| matches!(f, Fault::KillStandby { .. })),
        by_kind(|f| matches!(f, Fault::RestartApiserver { .. })),
        by_kind(|f| matches!(f, Fault::PauseEtcd { .. })),
        agents_killed,
        by_kind(|f| matches!(f, Fault::Downgrade)),
        by_kind(|f| matches!(f, Fault::Upgrade)),
        rounds.len(),
        pods_drained,
        mirror_pods,
        maintained.len(),
        kubectl_runs,
        rounds.len(),
        counts.samples,
        counts.eviction_calls,
        counts.evictions_2xx_by_evictord,
        counts.evictions_2xx_by_others,
        counts.evictord_calls_checked_for_leadership,
        counts.goal_replica_seconds,
        counts.goal_episodes_suspended,
        history.lock().unwrap().len(),
        violations.len() + failures.len(),
    );
    println!("SOAK {figures}");
    if counts.evictions_2xx_by_evictord == 0 || counts.evictord_calls_checked_for_leadership == 0 {
        failures.push("the checker saw no eviction by evictord in the audit log".into());
    }
    if rounds.is_empty() {
        failures.push("no round finished".into());
    }
    if mirror_pods <= maintained.len() {
        failures.push("no static pod manifest was held and put back".into());
    }
    let violated = violations
        .iter()
        .map(|v| {
            let evidence: String = v.evidence.iter().map(|r| format!("\n    {r}")).collect();
            format!("  at {:.1} s: {}{evidence}", v.t, v.what)
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        violations.is_empty() && failures.is_empty(),
        "SOAK FAILED, seed {seed} (reproduce: SOAK_SEED={seed} SOAK_FAULTS={faults} make soak)\n\
         violations:\n{violated}\nfailures:\n  {}\nfault timeline:\n{}\n{figures}",
        failures.join("\n  "),
        timeline.render()
    );
    pool.remove().await.unwrap();
}
