//! The node maintenance controller on a real control plane, with the eviction request
//! controller beside it: fake Node objects, pods bound to them with a grace period of 0 (so an
//! eviction deletes them at once), PriorityClasses for pod priorities, and policy/v1beta1
//! PodDisruptionBudgets (which, with no disruption controller, block every eviction of the
//! Running pods they select). Each test has its own namespace, nodes and maintenances.

#[path = "node_maintenance/pods.rs"]
mod pods;
mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use evictord::api::{
    CONDITION_DRAINED, EvictionRequest, MAINTENANCE_FINALIZER, NODE_MAINTENANCE_REQUESTER,
    NodeMaintenance, NodeMaintenanceNodeStatus, Stage, UNSCHEDULABLE_BEFORE_ANNOTATION,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::fixtures::{blocking_pdb, node, pdb_api, pod, priority_class};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn setup(prefix: &str) -> (Client, String) {
    let c = support::cluster().await;
    let e = support::evictord::shared(support::evictord::FAST).await;
    // The binary lives in a target directory other worktrees may share: make a stale one obvious.
    for _ in 0..50 {
        if e.logs()
            .contains("starting the node maintenance controller")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        e.logs()
            .contains("starting the node maintenance controller"),
        "{} runs no node maintenance controller: a build of another branch?",
        support::evictord::BIN
    );
    (c.client().await, c.namespace(prefix).await)
}

/// Polls `f` until it returns `Some`, or fails the test with evictord's log after [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(TIMEOUT, what, f).await
}

/// [`eventually`] with another timeout.
async fn eventually_within<T, F, Fut>(timeout: Duration, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let evictord = support::evictord::shared(support::evictord::FAST).await;
    support::wait::until_logged(timeout, what, || evictord.logs(), f).await
}

/// `n` interceptors nobody serves: with `--interceptor-deadline=6s` (FAST) a request for such a
/// pod stays open for about 6 s × `n` before the Eviction API removes the pod. Keeps a pod
/// around for a while, then lets it go by itself.
fn silent_interceptors(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("silent-{i}.example.com")).collect()
}

/// Registers `names` (EvictionInterceptor objects, as for interceptors whose runners stopped), so
/// that node messages do not name them as unregistered (SPEC 5.5).
async fn register(client: &Client, names: &[String]) {
    let api: Api<evictord::api::EvictionInterceptor> = Api::all(client.clone());
    for n in names {
        let evi = evictord::api::EvictionInterceptor::new(n, Default::default());
        match api.create(&PostParams::default(), &evi).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("registering {n}: {e}"),
        }
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Creates a maintenance of the named nodes; `plan` adds Default entries to the default plan.
async fn maintenance(
    client: &Client,
    name: &str,
    nodes: &[&str],
    stage: Stage,
    plan: &[i32],
) -> NodeMaintenance {
    let plan: Vec<_> = plan
        .iter()
        .map(|p| json!({"podPriority": p, "podType": "Default"}))
        .collect();
    // matchFields on metadata.name takes one value (N1): one term per node, ORed.
    let terms: Vec<_> = nodes
        .iter()
        .map(
            |n| json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}),
        )
        .collect();
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nodeSelectorTerms": terms},
            "stage": stage,
            "drainPlan": plan,
            "reason": "test",
        }
    }))
    .unwrap();
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap_or_else(|e| panic!("creating maintenance {name}: {e}"))
}

async fn set_stage(client: &Client, name: &str, stage: Stage) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stage": stage}})),
        )
        .await
        .unwrap_or_else(|e| panic!("moving {name} to {stage}: {e}"));
}

async fn get_nm(client: &Client, name: &str) -> Option<NodeMaintenance> {
    Api::<NodeMaintenance>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

fn node_status<'a>(nm: &'a NodeMaintenance, node: &str) -> Option<&'a NodeMaintenanceNodeStatus> {
    nm.status
        .as_ref()?
        .node_statuses
        .iter()
        .find(|s| s.node_ref.name == node)
}

fn drained(nm: &NodeMaintenance) -> Option<bool> {
    let c = nm
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DRAINED)?;
    Some(c.status == "True")
}

async fn get_node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.unwrap()
}

fn unschedulable(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn before_annotation(n: &Node) -> Option<String> {
    n.annotations()
        .get(UNSCHEDULABLE_BEFORE_ANNOTATION)
        .cloned()
}

/// The pods of the namespace, by name → uid.
async fn pods(client: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// The requests of the namespace, by target pod name.
async fn requests(client: &Client, ns: &str) -> BTreeMap<String, EvictionRequest> {
    Api::<EvictionRequest>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| (r.spec.target.pod.name.clone(), r))
        .collect()
}

fn requester_names(r: &EvictionRequest) -> Vec<&str> {
    r.spec.requesters.iter().map(|q| q.name.as_str()).collect()
}

/// Events recorded on a (cluster-scoped) maintenance with that reason (in any namespace: v1.20
/// takes new-style events of cluster-scoped objects only in kube-system).
async fn events(client: &Client, nm: &str, reason: &str) -> usize {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(nm)
                && e.reason.as_deref() == Some(reason)
        })
        .count()
}

/// Deletes the maintenances (waiting until they are gone: the finalizer is removed only after
/// the Complete work), then the nodes and the namespace.
async fn finish(client: &Client, ns: &str, maintenances: &[&str], nodes: &[&str]) {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    for name in maintenances {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    for name in maintenances {
        eventually(&format!("maintenance {name} gone"), || async {
            get_nm(client, name).await.is_none().then_some(())
        })
        .await;
    }
    let node_api: Api<Node> = Api::all(client.clone());
    for n in nodes {
        let _ = node_api.delete(n, &DeleteParams::default()).await;
    }
    support::cluster().await.delete_namespace(ns).await;
}

#[tokio::test]
async fn drain_evicts_in_plan_order_and_reaches_drained() {
    let (client, ns) = setup("nm-order").await;
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    node(&a).create(&client).await;
    node(&b).create(&client).await;
    let (low, mid) = (format!("{ns}-low"), format!("{ns}-mid"));
    priority_class(&client, &low, 100).await;
    priority_class(&client, &mid, 1000).await;
    // The low pods wait for an interceptor that never answers (until its 6 s deadline), so
    // there is a window in which they still exist with a request.
    for (name, n) in [("low-a", &a), ("low-b", &b)] {
        pod(name)
            .on_node(n)
            .priority_class(&low)
            .interceptors(&["slow.example.com"])
            .create(&client, &ns)
            .await;
    }
    for (name, n) in [("mid-a", &a), ("mid-b", &b)] {
        pod(name)
            .on_node(n)
            .priority_class(&mid)
            .create(&client, &ns)
            .await;
    }
    let name = ns.clone();
    maintenance(&client, &name, &[&a, &b], Stage::Drain, &[100, 1000]).await;

    // Requests are read before pods: a low pod still present afterwards was present when the
    // requests were read, so no mid pod may have had a request then.
    let low_pending_seen = std::cell::Cell::new(false);
    let done = eventually("the drain to finish", || async {
        let reqs = requests(&client, &ns).await;
        let present = pods(&client, &ns).await;
        let low_left = present.keys().any(|p| p.starts_with("low-"));
        if low_left {
            let early: Vec<&String> = reqs.keys().filter(|p| p.starts_with("mid-")).collect();
            assert!(
                early.is_empty(),
                "mid pods {early:?} got requests while a low pod remained"
            );
            if reqs.keys().any(|p| p.starts_with("low-")) {
                low_pending_seen.set(true);
            }
        }
        let nm = get_nm(&client, &name).await?;
        (present.is_empty() && drained(&nm) == Some(true)).then_some(nm)
    })
    .await;
    assert!(
        low_pending_seen.get(),
        "never saw a low pod with its request before it left"
    );
    for n in [&a, &b] {
        let s = node_status(&done, n).unwrap();
        assert_eq!(s.drain_message, "Drained", "{n}");
        assert_eq!((s.pods_pending_evacuation, s.pods_evacuating), (0, 0));
    }
    let status = done.status.clone().unwrap();
    assert_eq!(
        status.drain_plan_position,
        Some(done.spec.drain_plan.len() as i32 - 1)
    );
    assert!(status.stage_statuses.iter().any(|s| s.name == Stage::Drain));
    assert!(done.finalizers().iter().any(|f| f == MAINTENANCE_FINALIZER));
    for n in [&a, &b] {
        assert!(unschedulable(&get_node(&client, n).await), "{n} cordoned");
    }
    finish(&client, &ns, &[&name], &[&a, &b]).await;
}

#[tokio::test]
async fn complete_restores_schedulability_and_uncordon_is_undone_meanwhile() {
    let (client, ns) = setup("nm-cordon").await;
    let (free, cordoned) = (format!("{ns}-free"), format!("{ns}-cordoned"));
    node(&free).create(&client).await;
    node(&cordoned).unschedulable().create(&client).await;
    let name = ns.clone();
    maintenance(&client, &name, &[&free, &cordoned], Stage::Cordon, &[]).await;

    eventually(
        "both nodes cordoned, previous values remembered",
        || async {
            let f = get_node(&client, &free).await;
            let c = get_node(&client, &cordoned).await;
            (unschedulable(&f)
                && before_annotation(&f).as_deref() == Some("false")
                && unschedulable(&c)
                && before_annotation(&c).as_deref() == Some("true"))
            .then_some(())
        },
    )
    .await;
    let nm = get_nm(&client, &name).await.unwrap();
    assert!(nm.finalizers().iter().any(|f| f == MAINTENANCE_FINALIZER));

    // Someone uncordons a node during the maintenance: it is cordoned again, with an event.
    Api::<Node>::all(client.clone())
        .patch(
            &free,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
    eventually("the node cordoned again with an event", || async {
        let f = get_node(&client, &free).await;
        (unschedulable(&f) && events(&client, &name, "NodeRecordoned").await > 0).then_some(())
    })
    .await;

    set_stage(&client, &name, Stage::Complete).await;
    eventually("schedulability restored", || async {
        let f = get_node(&client, &free).await;
        let c = get_node(&client, &cordoned).await;
        (!unschedulable(&f)
            && before_annotation(&f).is_none()
            && unschedulable(&c)
            && before_annotation(&c).is_none())
        .then_some(())
    })
    .await;
    let nm = eventually("stage Complete recorded", || async {
        let nm = get_nm(&client, &name).await?;
        let stages: Vec<Stage> = nm
            .status
            .as_ref()?
            .stage_statuses
            .iter()
            .map(|s| s.name)
            .collect();
        (stages == [Stage::Cordon, Stage::Complete]).then_some(nm)
    })
    .await;
    assert!(nm.finalizers().iter().any(|f| f == MAINTENANCE_FINALIZER));
    // Events follow the writes they describe.
    eventually("NodeUncordoned and two StageStarted events", || async {
        (events(&client, &name, "NodeUncordoned").await > 0
            && events(&client, &name, "StageStarted").await >= 2)
            .then_some(())
    })
    .await;
    finish(&client, &ns, &[&name], &[&free, &cordoned]).await;
}

#[tokio::test]
async fn intersecting_maintenances_limit_and_wait_for_each_other() {
    let (client, ns) = setup("nm-intersect").await;
    let (one, two) = (format!("{ns}-one"), format!("{ns}-two"));
    node(&one).create(&client).await;
    node(&two).create(&client).await;
    let (low, mid) = (format!("{ns}-low"), format!("{ns}-mid"));
    priority_class(&client, &low, 100).await;
    priority_class(&client, &mid, 1000).await;
    // A low pod on node two that stays for a while (its interceptors, registered, never answer).
    let silent = silent_interceptors(4);
    register(&client, &silent).await;
    pod("blocked")
        .on_node(&two)
        .priority_class(&low)
        .interceptors(&strs(&silent))
        .create(&client, &ns)
        .await;
    pod("mid-one")
        .on_node(&one)
        .priority_class(&mid)
        .create(&client, &ns)
        .await;
    pod("mid-two")
        .on_node(&two)
        .priority_class(&mid)
        .create(&client, &ns)
        .await;

    // a (older: created first, and first by name) drains ≤100 first; b wants ≤1e9 on node two.
    let (ma, mb) = (format!("{ns}-a"), format!("{ns}-b"));
    maintenance(&client, &ma, &[&one, &two], Stage::Drain, &[100, 1000]).await;
    maintenance(&client, &mb, &[&two], Stage::Drain, &[]).await;

    eventually("the limited and waiting messages", || async {
        let a = get_nm(&client, &ma).await?;
        let b = get_nm(&client, &mb).await?;
        let ok = node_status(&a, &one)?.drain_message == format!("Waiting for node {two}.")
            && node_status(&a, &two)?.drain_message == "Evacuating"
            && node_status(&b, &two)?.drain_message == format!("Evacuating (limited by {ma})")
            && node_status(&b, &two)?.pods_evacuating == 1;
        ok.then_some(())
    })
    .await;
    // Node two is limited to a's targets: the mid pods are not requested yet.
    let reqs = requests(&client, &ns).await;
    assert_eq!(reqs.keys().collect::<Vec<_>>(), vec!["blocked"]);
    assert_eq!(
        requester_names(&reqs["blocked"]),
        vec![NODE_MAINTENANCE_REQUESTER]
    );
    assert_eq!(drained(&get_nm(&client, &mb).await.unwrap()), Some(false));

    // Once the blocking pod goes, both maintenances advance and finish.
    eventually_within(
        Duration::from_secs(120),
        "both maintenances drained",
        || async {
            let a = get_nm(&client, &ma).await?;
            let b = get_nm(&client, &mb).await?;
            let left = pods(&client, &ns).await;
            (drained(&a) == Some(true) && drained(&b) == Some(true) && left.is_empty())
                .then_some(())
        },
    )
    .await;
    finish(&client, &ns, &[&ma, &mb], &[&one, &two]).await;
}

#[tokio::test]
async fn deleting_a_maintenance_mid_drain_withdraws_its_requests() {
    let (client, ns) = setup("nm-delete").await;
    let n = format!("{ns}-n");
    node(&n).create(&client).await;
    // Both pods stay for about a minute: their requests are still open when the maintenance goes.
    let silent = silent_interceptors(10);
    let own = pod("own")
        .on_node(&n)
        .interceptors(&strs(&silent))
        .create(&client, &ns)
        .await;
    let shared = pod("shared")
        .on_node(&n)
        .interceptors(&strs(&silent))
        .create(&client, &ns)
        .await;
    // Someone else already asks for `shared`: the maintenance joins that request.
    let uid = shared.uid().unwrap();
    let other: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "shared", "uid": uid}}, "requesters": [{"name": "other.example.com"}]}
    }))
    .unwrap();
    Api::<EvictionRequest>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();

    let name = ns.clone();
    maintenance(&client, &name, &[&n], Stage::Drain, &[]).await;
    eventually("a request created and one joined", || async {
        let reqs = requests(&client, &ns).await;
        (requester_names(reqs.get("own")?) == [NODE_MAINTENANCE_REQUESTER]
            && requester_names(reqs.get("shared")?)
                == ["other.example.com", NODE_MAINTENANCE_REQUESTER])
        .then_some(())
    })
    .await;
    assert!(unschedulable(&get_node(&client, &n).await));

    Api::<NodeMaintenance>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the maintenance gone", || async {
        get_nm(&client, &name).await.is_none().then_some(())
    })
    .await;
    let reqs = requests(&client, &ns).await;
    assert!(
        !reqs.contains_key("own"),
        "the request it alone made is deleted: {reqs:?}"
    );
    assert_eq!(requester_names(&reqs["shared"]), vec!["other.example.com"]);
    let left = pods(&client, &ns).await;
    assert_eq!(left.get("own"), own.uid().as_ref(), "the pod stays");
    assert!(left.contains_key("shared"));
    let node = get_node(&client, &n).await;
    assert!(!unschedulable(&node) && before_annotation(&node).is_none());
    finish(&client, &ns, &[], &[&n]).await;
}

#[tokio::test]
async fn a_pod_protected_by_a_pdb_keeps_the_maintenance_from_drained() {
    let (client, ns) = setup("nm-pdb").await;
    let n = format!("{ns}-n");
    node(&n).create(&client).await;
    pod("blocked")
        .on_node(&n)
        .label("app", "blocked")
        .create(&client, &ns)
        .await;
    pod("free").on_node(&n).create(&client, &ns).await;
    blocking_pdb(&client, &ns, "blocked", "app", "blocked", 1).await;
    let name = ns.clone();
    maintenance(&client, &name, &[&n], Stage::Drain, &[]).await;

    let check = || async {
        let left = pods(&client, &ns).await;
        let reqs = requests(&client, &ns).await;
        let nm = get_nm(&client, &name).await?;
        let s = node_status(&nm, &n)?;
        let ok = !left.contains_key("free")
            && left.contains_key("blocked")
            && requester_names(reqs.get("blocked")?) == [NODE_MAINTENANCE_REQUESTER]
            && reqs.get("blocked")?.status.as_ref()?.failed_evictions() >= 1
            && s.drain_message.starts_with("Evacuating")
            && (s.pods_pending_evacuation, s.pods_evacuating) == (0, 1)
            && drained(&nm) == Some(false);
        ok.then_some(())
    };
    eventually(
        "the PDB-protected pod reported as evacuating, not Drained",
        check,
    )
    .await;
    // Still so a little later (the eviction is retried meanwhile).
    tokio::time::sleep(Duration::from_secs(3)).await;
    eventually("still not Drained", check).await;

    pdb_api(&client, &ns)
        .delete("blocked", &DeleteParams::default())
        .await
        .unwrap();
    eventually("Drained once the PDB is gone", || async {
        let nm = get_nm(&client, &name).await?;
        (drained(&nm) == Some(true) && pods(&client, &ns).await.is_empty()).then_some(())
    })
    .await;
    // The event follows the status write that set the condition.
    eventually("a Drained event", || async {
        (events(&client, &name, "Drained").await > 0).then_some(())
    })
    .await;
    finish(&client, &ns, &[&name], &[&n]).await;
}
