//! A small node pool on a real kube-apiserver with kube-controller-manager, drained both ways
//! evictord offers — one NodeMaintenance, and the real `kubectl drain` through the Eviction API
//! bridge — and rolled one node at a time by `kubectl evictord rollout` (through the real
//! kubectl), with the availability of every workload sampled every 100 ms: no Deployment under
//! the goal (its declared interceptors all served) loses a replica for any time, no
//! PodDisruptionBudget floor is broken, no pod but the DaemonSet's is left on the drained
//! nodes, the rollout never has more nodes cordoned or held than its budget, and where only
//! evictord evicts, its bridge hands none of its own Eviction API calls back. The garbage
//! collector runs, as on every cluster: the requests of the pods evictord evicted are left to it
//! (not marked `Evicted` just before their deletion), and `kubectl drain`'s last retry for a pod
//! evictord evicted costs the webhook no read. kube-apiserver
//! writes every request to its audit log, and each drain's requests are split by client as the
//! pool benchmark splits them: every request's client named (none unattributed), evictord's
//! present, with the components that drain uses. The pool benchmark (`make bench`, part `pool`)
//! runs the same at scale, beside `kubectl drain` alone and the script users write today. The
//! table tests of the played scheduler's and kubelet's rules, of the sampler's arithmetic and of
//! the split by user agent are `tests/pool_model.rs` and `tests/pool_measure.rs`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use evictord::api::{CONDITION_DRAINED, NodeMaintenance, ROLLOUT_LABEL};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use support::audit::{self, ClientCounts, count_by_client};
use support::pool::measure::Samples;
use support::pool::schedule::Timing;
use support::pool::workloads::{self, Variant};
use support::pool::{DRAIN_LABEL, Pool, Spec};
use support::wait::until;

// ---- the pool on the real control plane ----

/// 4 nodes, 2 drained, about 30 pods: every row of the mix.
fn small_pool(variant: Variant) -> Spec {
    Spec {
        nodes: 4,
        drained: 2,
        pods: 30,
        variant,
        timing: Timing::default(),
        served: workloads::SERVED.iter().map(|s| s.to_string()).collect(),
        at_least_one: true,
    }
}

async fn settled_pool(client: &Client, ns: &str, variant: Variant) -> Pool {
    let pool = Pool::create(control_plane().await, client, ns, ns, &small_pool(variant))
        .await
        .expect("creating the pool");
    pool.wait_settled(Duration::from_secs(150))
        .await
        .expect("the pool settled");
    pool
}

fn report(s: &Samples) -> String {
    s.workloads
        .iter()
        .filter(|w| {
            w.availability.unavailable_replica_seconds > 0.0
                || w.availability.floor_broken_samples > 0
        })
        .map(|w| {
            format!(
                "{} ({}): min {}/{}, {:.1} replica-s, floor broken {} samples",
                w.tracked.name,
                w.tracked.row,
                w.availability.min_available,
                w.tracked.desired,
                w.availability.unavailable_replica_seconds,
                w.availability.floor_broken_samples
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The goal: no Deployment under it lost a replica, no floor broken, the nodes empty.
fn assert_no_downtime(s: &Samples, how: &str) {
    assert!(s.samples > 50, "{how}: only {} samples", s.samples);
    assert!(
        s.workloads.iter().any(|w| w.tracked.goal),
        "{how}: no Deployment under the goal"
    );
    assert!(
        !s.departures.is_empty(),
        "{how}: no pod left the drained nodes"
    );
    let misses = s.goal_misses();
    assert!(
        misses.is_empty(),
        "{how}: {} Deployments lost availability:\n{}",
        misses.len(),
        report(s)
    );
    assert!(
        s.floors_broken().is_empty(),
        "{how}: PodDisruptionBudget floors broken:\n{}",
        report(s)
    );
    assert!(
        s.left_on_drained.is_empty(),
        "{how}: pods left on the drained nodes: {:?}",
        s.left_on_drained
    );
}

/// This binary's control plane: kube-apiserver writing every request to its audit log (from
/// its start: every test must come through here), kube-controller-manager running.
async fn control_plane() -> &'static support::TestCluster {
    support::control_plane::cluster_with_request_audit().await;
    support::control_plane::cluster_with_controller_manager().await
}

/// kube-apiserver's requests received since `from`, by client (as the pool benchmark splits
/// them), printed; the split must be whole and must see evictord: every request is named by
/// its client (none `other`: a client without a user agent would hide its requests), and
/// evictord sent some, from each of `components`. (The tests of this binary run side by side:
/// the window holds the others' requests too.)
fn requests_by_client(
    how: &str,
    requests: &[audit::AuditedRequest],
    from: SystemTime,
    components: &[&str],
) -> ClientCounts {
    let counts = count_by_client(requests, from, SystemTime::now());
    eprintln!(
        "{how}: {} kube-apiserver requests by client {:?}, evictord's by component {:?}",
        counts.total, counts.by_client, counts.evictord_by_component
    );
    assert!(
        counts.other_user_agents.is_empty(),
        "{how}: requests of unnamed clients, by user agent: {:?}",
        counts.other_user_agents
    );
    assert!(
        counts.of("evictord") > 0,
        "{how}: no request of evictord's: {counts:?}"
    );
    for component in components {
        assert!(
            counts.evictord_by_component.contains_key(*component),
            "{how}: no request of evictord's {component}: {counts:?}"
        );
    }
    counts
}

/// Every request in this binary's kube-apiserver audit log so far.
async fn audited() -> Vec<audit::AuditedRequest> {
    let c = control_plane().await;
    audit::requests(c.request_audit.as_ref().expect("the request audit log"))
}

/// The UIDs of `ns`'s pods now, by name, and the names generated from a `generateName`.
async fn pod_names(client: &Client, ns: &str) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("the pool's pods");
    let mut uids = BTreeMap::new();
    let mut generated = BTreeSet::new();
    for p in pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        if p.metadata.generate_name.is_some() {
            generated.insert(name.clone());
        }
        uids.insert(name, p.metadata.uid.unwrap_or_default());
    }
    (uids, generated)
}

async fn setup(prefix: &str) -> (Client, String) {
    let c = control_plane().await;
    support::evictord::shared(support::surge::FLAGS).await;
    // As on every real cluster (and in the pool benchmark): the requests evictord creates are
    // deleted with their pods.
    support::control_plane::start_garbage_collector(c).await;
    (c.client().await, c.namespace(prefix).await)
}

#[tokio::test]
async fn a_node_maintenance_drains_a_pool_without_downtime() {
    let (client, ns) = setup("pool-nm").await;
    let pool = settled_pool(&client, &ns, Variant::Full).await;
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let (uids, _) = pod_names(&client, &ns).await;
    let from = SystemTime::now();
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let nm = support::fixtures::draining_maintenance(&ns, DRAIN_LABEL, &ns, "pool test");
    nms.create(&PostParams::default(), &nm).await.unwrap();
    until(
        Duration::from_secs(180),
        "the NodeMaintenance Drained",
        || async {
            let nm = nms.get(&ns).await.ok()?;
            nm.status?.is_true(CONDITION_DRAINED).then_some(())
        },
    )
    .await;
    pool.wait_restored(Duration::from_secs(90))
        .await
        .expect("the Deployments back at their replicas");
    let samples = sampler.stop().await;
    let requests = audited().await;
    let counts = requests_by_client(
        "NodeMaintenance",
        &requests,
        from,
        &["controller", "interceptor"],
    );
    for client in [
        "pool-kubelet",
        "pool-scheduler",
        "kube-controller-manager",
        "test-harness",
    ] {
        assert!(
            counts.of(client) > 0,
            "no request of {client}'s: {counts:?}"
        );
    }
    audit::assert_own_evictions_not_bridged(&requests, &ns, from, "NodeMaintenance");
    // The requests of the pods the controller evicted are left to the garbage collector; one in
    // ten may be written if the collector is far behind on a loaded machine.
    let (late, evicted) = audit::status_writes_after_pod_gone(&requests, &ns, from, &uids);
    assert!(
        evicted > 0 && late.len() * 10 <= evicted,
        "NodeMaintenance: {} status writes of requests after their pod was gone, for {evicted} \
         pods the controller evicted: {late:#?}",
        late.len()
    );
    assert_no_downtime(&samples, "NodeMaintenance");
    let _ = nms.delete(&ns, &DeleteParams::default()).await;
    pool.remove().await.unwrap();
}

#[tokio::test]
async fn kubectl_drain_through_the_bridge_drains_a_pool_without_downtime() {
    let (client, ns) = setup("pool-kubectl").await;
    let pool = settled_pool(&client, &ns, Variant::Full).await;
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let (_, generated) = pod_names(&client, &ns).await;
    let from = SystemTime::now();
    let (code, output) = kubectl_drain(&pool, Duration::from_secs(200)).await;
    assert_eq!(code, Some(0), "kubectl drain failed:\n{output}");
    assert!(
        output.contains("Eviction triggered"),
        "the bridge never answered:\n{output}"
    );
    pool.wait_restored(Duration::from_secs(90))
        .await
        .expect("the Deployments back at their replicas");
    let samples = sampler.stop().await;
    let requests = audited().await;
    let counts = requests_by_client(
        "kubectl drain through the bridge",
        &requests,
        from,
        &["webhook", "controller"],
    );
    // kubectl's last retry comes after evictord evicted the pod: a generated name the webhook's
    // cache saw deleted is not read again.
    let reads = audit::webhook_reads_of_gone_pods(&requests, &ns, from, &generated);
    assert!(
        reads.is_empty(),
        "kubectl drain through the bridge: the webhook read pods it had seen deleted: {reads:#?}"
    );
    assert!(
        counts.of("kubectl") > 0,
        "no request of kubectl's: {counts:?}"
    );
    assert_no_downtime(&samples, "kubectl drain through the bridge");
    pool.remove().await.unwrap();
}

/// `kubectl evictord rollout` of the drained nodes one at a time, through the real kubectl, with
/// a step that records each node: the step runs once per node, never more than one node is
/// cordoned (or held by a maintenance) at once, every node is given back, the rollout's objects
/// are gone, and no Deployment under the goal loses a replica.
#[tokio::test]
async fn a_rollout_rolls_a_pool_one_node_at_a_time_without_downtime() {
    let (client, ns) = setup("pool-roll").await;
    let c = control_plane().await;
    let pool = settled_pool(&client, &ns, Variant::Full).await;
    let ran = c.dir.join(format!("rollout-steps-{ns}"));
    let log = c.dir.join(format!("rollout-{ns}.log"));
    let step = format!("echo \"$EVICTORD_NODE\" >> {}", ran.display());
    let selector = format!("{DRAIN_LABEL}={ns}");
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let from = SystemTime::now();
    let args = [
        "rollout",
        &ns,
        "-l",
        &selector,
        "--max-unavailable",
        "1",
        "--exec",
        &step,
        "--timeout",
        "200s",
        // The pool's bare pods and emptyDir volumes, as kubectl drain's flags say.
        "--force",
        "--delete-emptydir-data",
    ];
    let file = std::fs::File::create(&log).unwrap();
    let mut child = support::plugin::plugin_command(&args)
        .await
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("kubectl evictord rollout");
    let deadline = Instant::now() + Duration::from_secs(230);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(0), "kubectl evictord rollout:\n{output}");
    pool.wait_restored(Duration::from_secs(90))
        .await
        .expect("the Deployments back at their replicas");
    let samples = sampler.stop().await;
    let mut stepped: Vec<String> = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    stepped.sort();
    assert_eq!(stepped, pool.drained, "the step once per node:\n{output}");
    let nodes = &samples.nodes;
    assert!(
        nodes.most_unavailable.count <= 1,
        "more than one node cordoned or NotReady at once: {:?}\n{output}",
        nodes.most_unavailable
    );
    let held = nodes.most_held.as_ref().expect("the maintenances watched");
    assert!(held.count <= 1, "more than one node held at once: {held:?}");
    let mut back = nodes.given_back.clone();
    back.sort();
    assert_eq!(back, pool.drained, "every node given back");
    // The rollout deletes its maintenances at the end; evictord removes their finalizers.
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let mine = ListParams::default().labels(&format!("{ROLLOUT_LABEL}={ns}"));
    until(
        Duration::from_secs(60),
        "the rollout's maintenances gone",
        || async { nms.list(&mine).await.ok()?.items.is_empty().then_some(()) },
    )
    .await;
    let requests = audited().await;
    requests_by_client(
        "kubectl evictord rollout",
        &requests,
        from,
        &["plugin", "controller"],
    );
    audit::assert_own_evictions_not_bridged(&requests, &ns, from, "kubectl evictord rollout");
    assert_no_downtime(&samples, "kubectl evictord rollout");
    eprintln!(
        "rollout: {} pods moved of {} on the rolled nodes at the start",
        samples.departures.len(),
        samples.pods_on_drained_at_start
    );
    pool.remove().await.unwrap();
}

/// The measurement can fail: `kubectl drain` alone (no evictord on the control plane; run this
/// test on its own, `cargo test --test pool -- --ignored`) of the pool without the 1-replica
/// budgets finishes, and the sampler sees the Deployments lose replicas.
#[tokio::test]
#[ignore = "needs a control plane without evictord: run alone with --ignored"]
async fn kubectl_drain_alone_loses_availability() {
    let c = control_plane().await;
    let client = c.client().await;
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        webhooks.items.is_empty(),
        "evictord's webhooks are registered: run this test alone"
    );
    let ns = c.namespace("pool-alone").await;
    let pool = settled_pool(&client, &ns, Variant::Finishable).await;
    let sampler = pool.sample(Duration::from_secs(300)).await.unwrap();
    let (code, output) = kubectl_drain(&pool, Duration::from_secs(200)).await;
    assert_eq!(code, Some(0), "kubectl drain failed:\n{output}");
    pool.wait_restored(Duration::from_secs(90)).await.unwrap();
    let samples = sampler.stop().await;
    let misses = samples.goal_misses();
    assert!(
        !misses.is_empty(),
        "kubectl drain alone cost no Deployment a replica:\n{}",
        report(&samples)
    );
    eprintln!("kubectl drain alone:\n{}", report(&samples));
    pool.remove().await.unwrap();
}

/// `kubectl drain` of the pool's drained nodes in one call, with the flags of `make bench`;
/// returns its exit code (`None`: killed after `within`) and its output.
async fn kubectl_drain(pool: &Pool, within: Duration) -> (Option<i32>, String) {
    let c = control_plane().await;
    let mut args = vec!["drain".to_string()];
    args.extend(pool.drained.iter().cloned());
    args.extend(
        support::pool::KUBECTL_DRAIN_FLAGS
            .iter()
            .map(|s| s.to_string()),
    );
    args.push(format!("--timeout={}s", within.as_secs()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = c.dir.join(format!("kubectl-drain-{}.log", pool.id));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = support::tools::kubectl_command(c, &args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("kubectl drain");
    let deadline = Instant::now() + within + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    (code, std::fs::read_to_string(&log).unwrap_or_default())
}
