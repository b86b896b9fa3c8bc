//! A NodeMaintenance draining many pods while something fails: the pieces the fault tests
//! (`tests/chaos_*.rs`, `make chaos`) share. evictord runs as the chart runs it, a leader and a
//! standby, each as its own user (kubeconfig impersonation, bound to `cluster-admin`) so that
//! kube-apiserver's audit log says which replica made each call; the test plays the kubelet's
//! part for pods left terminating.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use evictord::api::{CONDITION_DRAINED, EvictionRequest, NodeMaintenance};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use super::audit::EvictionCall;
use super::control_plane::{TestCluster, free_port};
use super::evictord::{Evictord, FAST, SpawnOptions};
use super::fixtures::{draining_maintenance, node, pod};
use super::wait::until;

/// The log line of a replica that starts its controllers.
pub const LEADING: &str = "acquired leadership";
/// The log line of a replica that stops them.
pub const LOST: &str = "lost leadership";

/// Each API call of these helpers is bounded by this, so that a hung control plane fails the
/// wait instead of holding it.
const CALL_BOUND: Duration = Duration::from_secs(10);

/// Two `evictord serve` (the [`FAST`] flags) electing a leader on a Lease of `lease` in `ns`;
/// returns (leader, standby) once one leads. The webhooks (named `webhook_name`) point at the
/// standby.
pub async fn leader_and_standby(
    c: &TestCluster,
    ns: &str,
    lease: Duration,
    webhook_name: &str,
) -> (Evictord, Evictord) {
    let lease_ns = format!("--leader-election-namespace={ns}");
    let lease = format!("--lease-duration={}s", lease.as_secs());
    let mut args = FAST.to_vec();
    args.extend([
        "--leader-election",
        lease.as_str(),
        "--leader-election-id=evictord-controllers",
        &lease_ns,
    ]);
    let client = c.client().await;
    let a = spawn_replica(c, &client, &args).await;
    let b = spawn_replica(c, &client, &args).await;
    a.ready().await;
    b.ready().await;
    let a_leads = until(Duration::from_secs(60), "a leader", || async {
        match (a.logs().contains(LEADING), b.logs().contains(LEADING)) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            _ => None,
        }
    })
    .await;
    let (leader, standby) = if a_leads { (a, b) } else { (b, a) };
    standby.register_webhooks(c, webhook_name).await;
    (leader, standby)
}

/// The user a replica's requests run as.
pub fn replica_user(e: &Evictord) -> String {
    format!("evictord-replica-{}", e.webhook_port)
}

/// Starts `evictord serve` with `args` as its own user ([`replica_user`]), allowed everything.
async fn spawn_replica(c: &TestCluster, client: &Client, args: &[&str]) -> Evictord {
    let webhook_port = free_port();
    let user = format!("evictord-replica-{webhook_port}");
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("ClusterRoleBinding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("ClusterRoleBinding for a replica");
    let e = Evictord::spawn(
        c,
        args,
        SpawnOptions {
            webhook_port: Some(webhook_port),
            kubeconfig: Some(c.kubeconfig_as(&user)),
            ..Default::default()
        },
    );
    assert_eq!(replica_user(&e), user);
    e
}

/// A replica's leadership changes by its log: (when, [`replica_user`], acquired or lost), in
/// order.
pub fn leadership_changes(replicas: &[&Evictord]) -> Vec<(SystemTime, String, bool)> {
    let mut changes: Vec<(SystemTime, String, bool)> = replicas
        .iter()
        .flat_map(|e| {
            let user = replica_user(e);
            e.logs()
                .lines()
                .filter_map(|line| {
                    let acquired = if line.contains(LEADING) {
                        true
                    } else if line.contains(LOST) {
                        false
                    } else {
                        return None;
                    };
                    let t: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
                    Some((SystemTime::from(t), user.clone(), acquired))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    changes.sort();
    changes
}

/// Eviction API calls a replica made when, by the replicas' own logs, it was not the leader
/// (`pod: caller`).
#[derive(Debug, Default)]
pub struct CallsOutOfLeadership {
    /// Received after another replica had acquired leadership later than the caller: a deposed
    /// leader still evicting while its successor leads.
    pub while_another_led: Vec<String>,
    /// Received after the caller had logged that it lost leadership (and before it acquired it
    /// again), with no other replica leading yet.
    pub after_own_loss: Vec<String>,
}

impl CallsOutOfLeadership {
    /// Sorts `calls` against the leadership changes in the `replicas`' logs.
    pub fn of(calls: &[EvictionCall], replicas: &[&Evictord]) -> CallsOutOfLeadership {
        let changes = leadership_changes(replicas);
        let mut out = CallsOutOfLeadership::default();
        for call in calls {
            let before: Vec<_> = changes.iter().filter(|c| c.0 <= call.received).collect();
            let own = before.iter().rev().find(|c| c.1 == call.caller);
            let leader = before.iter().rev().find(|c| c.2).map(|c| c.1.as_str());
            let entry = format!("{}: {}", call.pod, call.caller);
            if leader.is_some_and(|leader| leader != call.caller) {
                out.while_another_led.push(entry);
            } else if own.is_some_and(|c| !c.2) {
                out.after_own_loss.push(entry);
            }
        }
        out
    }
}

/// How many lines of a replica's log contain `needle`.
pub fn log_count(e: &Evictord, needle: &str) -> usize {
    e.logs().lines().filter(|l| l.contains(needle)).count()
}

/// Creates node `node_name` labelled `label` and `count` pods on it (`p0000`, `p0001`...), 32 at
/// a time; returns their names.
pub async fn pods_on_node(
    client: &Client,
    ns: &str,
    node_name: &str,
    label: (&str, &str),
    count: usize,
) -> BTreeSet<String> {
    node(node_name).label(label.0, label.1).create(client).await;
    let names: BTreeSet<String> = (0..count).map(|i| format!("p{i:04}")).collect();
    futures::stream::iter(names.iter())
        .for_each_concurrent(32, |name| async move {
            pod(name).on_node(node_name).create(client, ns).await;
        })
        .await;
    names
}

/// Creates a NodeMaintenance in stage Drain for the nodes labelled `label`; returns when.
pub async fn start_drain(
    client: &Client,
    name: &str,
    label: (&str, &str),
    reason: &str,
) -> Instant {
    let maintenances: Api<NodeMaintenance> = Api::all(client.clone());
    maintenances
        .create(
            &PostParams::default(),
            &draining_maintenance(name, label.0, label.1, reason),
        )
        .await
        .expect("NodeMaintenance");
    Instant::now()
}

/// What the kubelet does for an evicted pod once its containers stopped: the final delete
/// (grace period 0). Without it a pod whose eviction was cut short (the evicting client died
/// between kube-apiserver setting the deletion timestamp and removing the object) stays
/// terminating forever on this control plane, which has no kubelet. No Eviction API call.
/// Counts the pods it finished.
pub fn kubelet_finishing_deletions(
    pods: Api<Pod>,
    finished: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let params = ListParams::default();
            let list = tokio::time::timeout(CALL_BOUND, pods.list_metadata(&params)).await;
            if let Ok(Ok(list)) = list {
                for p in list.items {
                    if p.metadata.deletion_timestamp.is_some() {
                        let name = p.metadata.name.unwrap_or_default();
                        let params = DeleteParams::default().grace_period(0);
                        let delete =
                            tokio::time::timeout(CALL_BOUND, pods.delete(&name, &params)).await;
                        if matches!(delete, Ok(Ok(_))) {
                            finished.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Pods left in the namespace of `pods` (`usize::MAX` when the list fails or takes over 10 s).
pub async fn remaining(pods: &Api<Pod>) -> usize {
    match tokio::time::timeout(CALL_BOUND, pods.list_metadata(&ListParams::default())).await {
        Ok(Ok(list)) => list.items.len(),
        _ => usize::MAX,
    }
}

/// Waits until at most `left` pods remain (panics after `within`).
pub async fn until_remaining_at_most(pods: &Api<Pod>, left: usize, within: Duration, what: &str) {
    until(within, what, || async move {
        (remaining(pods).await <= left).then_some(())
    })
    .await;
}

/// Where a drain stands: pods left in `ns`, and its EvictionRequests by state.
#[derive(Debug, Default, PartialEq)]
pub struct DrainProgress {
    pub pods_left: usize,
    pub requests: usize,
    /// Requests the eviction request controller never wrote a status for.
    pub requests_without_status: usize,
    /// Requests with condition Evicted or Canceled.
    pub requests_ended: usize,
}

/// The drain's progress now (`None` when a list fails or takes over 10 s).
pub async fn drain_progress(client: &Client, ns: &str) -> Option<DrainProgress> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default();
    let pods = tokio::time::timeout(CALL_BOUND, pods.list_metadata(&params))
        .await
        .ok()?
        .ok()?;
    let requests = tokio::time::timeout(CALL_BOUND, requests.list(&params))
        .await
        .ok()?
        .ok()?;
    let ended = |r: &EvictionRequest| {
        r.status
            .as_ref()
            .is_some_and(|s| s.is_true("Evicted") || s.is_true("Canceled"))
    };
    Some(DrainProgress {
        pods_left: pods.items.len(),
        requests: requests.items.len(),
        requests_without_status: requests.items.iter().filter(|r| r.status.is_none()).count(),
        requests_ended: requests.items.iter().filter(|r| ended(r)).count(),
    })
}

/// Waits until no pod is left in `ns`; after `within` panics with where the drain stands and
/// since when it has not moved.
pub async fn until_every_pod_evicted(client: &Client, ns: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let mut last: Option<(DrainProgress, Instant)> = None;
    loop {
        if let Some(now) = drain_progress(client, ns).await {
            if now.pods_left == 0 {
                return;
            }
            if last.as_ref().is_none_or(|(p, _)| *p != now) {
                last = Some((now, Instant::now()));
            }
        }
        if Instant::now() >= deadline {
            let (progress, since) = last.expect("the drain's progress was never read");
            panic!(
                "timed out after {within:?} waiting for every pod evicted: {progress:?}, unchanged \
                 for {:.0} s",
                since.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the NodeMaintenance `name` has condition Drained=True (panics after `within`).
pub async fn until_drained(client: &Client, name: &str, within: Duration) {
    let maintenances: Api<NodeMaintenance> = Api::all(client.clone());
    until(within, "the NodeMaintenance Drained", || {
        let maintenances = maintenances.clone();
        async move {
            let m = tokio::time::timeout(CALL_BOUND, maintenances.get(name))
                .await
                .ok()?
                .ok()?;
            m.status?.is_true(CONDITION_DRAINED).then_some(())
        }
    })
    .await;
}

/// Waits until `count` EvictionRequests exist in `ns` and each ended with condition Evicted or
/// Canceled (panics after `within`); returns them.
pub async fn every_request_ended(
    client: &Client,
    ns: &str,
    count: usize,
    within: Duration,
) -> Vec<EvictionRequest> {
    let requests: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    until(within, "every EvictionRequest ended", || {
        let requests = requests.clone();
        async move {
            let list = tokio::time::timeout(CALL_BOUND, requests.list(&ListParams::default()))
                .await
                .ok()?
                .ok()?;
            (list.items.len() == count
                && list.items.iter().all(|r| {
                    r.status
                        .as_ref()
                        .is_some_and(|s| s.is_true("Evicted") || s.is_true("Canceled"))
                }))
            .then_some(list.items)
        }
    })
    .await
}

/// How many of `requests` ended Evicted.
pub fn evicted(requests: &[EvictionRequest]) -> usize {
    requests
        .iter()
        .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
        .count()
}

/// Seconds from `from` to `to`, negative when `to` is earlier.
pub fn seconds(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// What a fault test observed: a drain of [`FAULT_PODS`] pods on one node by a leader and a
/// standby, a fault injected once a third were evicted, the drain left to finish.
pub struct FaultRun {
    pub c: &'static TestCluster,
    pub ns: String,
    pub leader: Evictord,
    pub standby: Evictord,
    /// Pods left when the fault was injected.
    pub left_at_fault: usize,
    /// Drain start → every pod evicted.
    pub drained_after: Duration,
    pub calls: Vec<EvictionCall>,
    pub ledger: super::audit::EvictionLedger,
    pub out_of_leadership: CallsOutOfLeadership,
    pub requests: usize,
    pub requests_evicted: usize,
    pub finished_by_kubelet: usize,
    pub running: (bool, bool),
    pub ready: (bool, bool),
}

/// Pods drained by [`drain_through_fault`].
pub const FAULT_PODS: usize = 500;

/// Runs a drain of [`FAULT_PODS`] pods (lease 15 s) in a namespace `ns_prefix`-…, calls `fault`
/// once a third are evicted, and waits (bounded) until every pod is evicted, the maintenance is
/// Drained and every request ended; returns what was observed and what `fault` returned.
pub async fn drain_through_fault<T, Fut>(
    ns_prefix: &str,
    reason: &str,
    fault: impl FnOnce(&'static TestCluster) -> Fut,
) -> (FaultRun, T)
where
    Fut: std::future::Future<Output = T>,
{
    let c = super::control_plane::cluster_with_eviction_audit().await;
    super::evictord::install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace(ns_prefix).await;
    let (mut leader, mut standby) =
        leader_and_standby(c, &ns, Duration::from_secs(15), "evictord-chaos").await;
    let names = pods_on_node(&client, &ns, "chaos-n1", ("chaos", "drain"), FAULT_PODS).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert_eq!(remaining(&pods).await, FAULT_PODS);
    let finished_by_kubelet = Arc::new(AtomicUsize::new(0));
    let kubelet = kubelet_finishing_deletions(pods.clone(), finished_by_kubelet.clone());

    let drain_started = start_drain(&client, "chaos-drain", ("chaos", "drain"), reason).await;
    until_remaining_at_most(
        &pods,
        FAULT_PODS * 2 / 3,
        Duration::from_secs(600),
        "a third of the pods evicted",
    )
    .await;
    let left_at_fault = remaining(&pods).await;
    let injected = fault(c).await;

    // A drain of this size finishes about 30 s after the fault; four minutes means it stalled.
    until_every_pod_evicted(&client, &ns, Duration::from_secs(240)).await;
    let drained_after = drain_started.elapsed();
    until_drained(&client, "chaos-drain", Duration::from_secs(120)).await;
    let requests = every_request_ended(&client, &ns, FAULT_PODS, Duration::from_secs(120)).await;
    kubelet.abort();
    let running = (leader.running(), standby.running());
    let ready = (
        super::evictord::readyz_within(leader.probe_port, Duration::from_secs(60)).await,
        super::evictord::readyz_within(standby.probe_port, Duration::from_secs(60)).await,
    );
    let audit = c.eviction_audit.as_ref().expect("audit log");
    let calls = super::audit::eviction_calls(audit, &ns);
    let ledger = super::audit::EvictionLedger::of(&calls, &names);
    let out_of_leadership = CallsOutOfLeadership::of(&calls, &[&leader, &standby]);
    let run = FaultRun {
        c,
        ns,
        left_at_fault,
        drained_after,
        ledger,
        out_of_leadership,
        requests: requests.len(),
        requests_evicted: evicted(&requests),
        finished_by_kubelet: finished_by_kubelet.load(Ordering::SeqCst),
        running,
        ready,
        calls,
        leader,
        standby,
    };
    (run, injected)
}

impl FaultRun {
    /// The figures every fault reports, for docs/src/reliability.md.
    pub fn figures(&self) -> String {
        let l = &self.ledger;
        let leadership =
            |needle| log_count(&self.leader, needle) + log_count(&self.standby, needle);
        format!(
            "drain done in {:.1} s; Eviction API calls {} by code {:?}: pods evicted by a 2xx {}, \
             by a cut call only {}, never {}, twice {}; calls after a 2xx for the pod {}, 404/409 \
             after a cut call {}, unexplained {}; pods left terminating (finished by the test's \
             kubelet): {}; requests Evicted {}/{}; leadership acquired {} times, lost {} times; \
             Eviction API calls by a replica while the other led {} {:?}, after it had lost \
             leadership {}; refused 429 {}",
            self.drained_after.as_secs_f64(),
            l.calls,
            l.by_code,
            l.evicted,
            l.evicted_by_cut_call,
            l.never_called.len(),
            l.evicted_twice.len(),
            l.after_evicted.len(),
            l.gone_after_cut,
            l.gone_unexplained.len(),
            self.finished_by_kubelet,
            self.requests_evicted,
            self.requests,
            leadership(LEADING),
            leadership(LOST),
            self.out_of_leadership.while_another_led.len(),
            self.out_of_leadership.while_another_led,
            self.out_of_leadership.after_own_loss.len(),
            l.refused_calls(),
        )
    }

    /// What every fault must leave: the fault came mid-drain, each pod evicted exactly once, no
    /// call by a deposed leader, every request Evicted, both replicas running and ready.
    pub async fn assert_recovered(self, fault: &str) {
        assert!(
            self.left_at_fault < FAULT_PODS && self.left_at_fault > 0,
            "{fault} mid-drain"
        );
        self.ledger.assert_each_pod_evicted_once();
        assert!(
            self.out_of_leadership.while_another_led.is_empty(),
            "Eviction API calls by a deposed leader while its successor led: {:?}",
            self.out_of_leadership.while_another_led
        );
        assert_eq!(self.requests_evicted, FAULT_PODS, "every request Evicted");
        assert_eq!(
            self.running,
            (true, true),
            "both evictord processes still running"
        );
        assert_eq!(
            self.ready,
            (true, true),
            "both evictord processes ready again"
        );
        self.c.delete_namespace(&self.ns).await;
    }
}
