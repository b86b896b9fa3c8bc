//! Drain deadlines and pod drain rules on a real control plane (SPEC 6.2): a pod held by a
//! PodDisruptionBudget past `drainDeadlineSeconds` under `Report` (condition and event, the pod
//! stays) and under `Force` (it and a pod waiting on an interceptor nobody runs are deleted
//! within seconds, events `ForcedByDeadline`, the maintenance Drained); a maintenance queued by a
//! budget longer than its deadline forces nothing when admitted; `skip` and `wait-completed` by
//! label and by `spec.podRules`, the label winning over the rule.
//! Interceptors keep their default 20-minute deadline here, so a silent one holds its pod.

mod support;

use std::future::Future;
use std::time::Duration;

use evictord::api::{CONDITION_DEADLINE_EXCEEDED, EvictionRequest, NodeMaintenance, Stage};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::budget::{admitted, budget, by_name, drained, get, pool, set_stage};
use support::fixtures::{blocking_pdb, pod};

/// Longer than a 60 s deadline plus the time to act on it.
const TIMEOUT: Duration = Duration::from_secs(120);

async fn setup(prefix: &str) -> (Client, String) {
    let c = support::cluster().await;
    support::evictord::shared(&["--eviction-backoff-base=1s", "--eviction-backoff-cap=4s"]).await;
    (c.client().await, c.namespace(prefix).await)
}

async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let evictord = support::evictord::shared(&[]).await;
    support::wait::until_logged(TIMEOUT, what, || evictord.logs(), f).await
}

/// A maintenance of `nodes` in Drain with these extra spec fields.
async fn maintenance(client: &Client, name: &str, nodes: &[&str], extra: Value) -> NodeMaintenance {
    let mut spec =
        json!({"nodeSelector": by_name(nodes), "stage": "Drain", "reason": "deadline test"});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("maintenance");
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap_or_else(|e| panic!("creating maintenance {name}: {e}"))
}

async fn pod_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

/// The events of `reason` in `ns` (events about pods) or, for cluster-scoped objects, in the
/// namespaces events of cluster-scoped objects go to.
async fn events(client: &Client, ns: &str, reason: &str) -> Vec<Event> {
    let mut out = Vec::new();
    for n in [ns, "default", "kube-system"] {
        let list = Api::<Event>::namespaced(client.clone(), n)
            .list(&ListParams::default())
            .await
            .unwrap();
        out.extend(
            list.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason)),
        );
    }
    out
}

fn condition(nm: &NodeMaintenance, type_: &str) -> Option<(String, String)> {
    let c = nm
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.message.clone()))
}

#[tokio::test]
async fn report_marks_the_deadline_and_leaves_the_pod() {
    let (client, ns) = setup("deadline-report").await;
    let nodes = pool(&client, "report", 1).await;
    pod("held")
        .label("app", "held")
        .on_node(&nodes[0])
        .replicaset("rs")
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "held", "app", "held", 1).await;
    let started = std::time::Instant::now();
    maintenance(
        &client,
        "report",
        &[&nodes[0]],
        json!({"drainDeadlineSeconds": 60}),
    )
    .await;
    let message = eventually("DeadlineExceeded", || async {
        let nm = get(&client, "report").await?;
        let (status, message) = condition(&nm, CONDITION_DEADLINE_EXCEEDED)?;
        (status == "True").then_some(message)
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(59),
        "not before the deadline"
    );
    assert_eq!(
        message,
        format!("Drain deadline passed on {} (1 pod left)", nodes[0])
    );
    let nm = get(&client, "report").await.unwrap();
    let line = &nm.status.unwrap().node_statuses[0];
    assert!(line.deadline_exceeded && line.deadline_time.is_some());
    eventually("the DeadlineExceeded event", || async {
        (!events(&client, &ns, "DeadlineExceeded").await.is_empty()).then_some(())
    })
    .await;
    // Report changes nothing else: the pod stays, nothing forced.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pod_exists(&client, &ns, "held").await);
    assert!(events(&client, &ns, "ForcedByDeadline").await.is_empty());
    set_stage(&client, "report", Stage::Complete).await;
}

#[tokio::test]
async fn force_deletes_what_is_left_at_the_deadline_and_the_drain_ends() {
    let (client, ns) = setup("deadline-force").await;
    let nodes = pool(&client, "force", 1).await;
    pod("held")
        .label("app", "held")
        .on_node(&nodes[0])
        .replicaset("rs")
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "held", "app", "held", 1).await;
    pod("waiting")
        .on_node(&nodes[0])
        .replicaset("rs2")
        .interceptors(&["nobody.example.com"])
        .create(&client, &ns)
        .await;
    maintenance(
        &client,
        "force",
        &[&nodes[0]],
        json!({"drainDeadlineSeconds": 60, "deadlinePolicy": "Force"}),
    )
    .await;
    // Both pods are still there a little before the deadline.
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert!(pod_exists(&client, &ns, "held").await && pod_exists(&client, &ns, "waiting").await);
    let passed = eventually("DeadlineExceeded", || async {
        let nm = get(&client, "force").await?;
        let (status, _) = condition(&nm, CONDITION_DEADLINE_EXCEEDED)?;
        (status == "True").then(std::time::Instant::now)
    })
    .await;
    eventually("both pods deleted", || async {
        let gone =
            !pod_exists(&client, &ns, "held").await && !pod_exists(&client, &ns, "waiting").await;
        gone.then_some(())
    })
    .await;
    assert!(
        passed.elapsed() < Duration::from_secs(15),
        "deleted within seconds of the deadline"
    );
    let forced = eventually("two ForcedByDeadline events", || async {
        let e = events(&client, &ns, "ForcedByDeadline").await;
        (e.len() >= 2).then_some(e)
    })
    .await;
    assert!(
        forced[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("NodeMaintenance force")),
        "{forced:?}"
    );
    eventually("Drained", || async {
        drained(&get(&client, "force").await?).then_some(())
    })
    .await;
    // The requests of the deleted pods end Evicted (PodDeleted); no interceptor entry rewritten.
    let requests = Api::<EvictionRequest>::namespaced(client.clone(), &ns);
    eventually("the requests Evicted", || async {
        let list = requests.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
            .then_some(())
    })
    .await;
    set_stage(&client, "force", Stage::Complete).await;
}

#[tokio::test]
async fn a_maintenance_queued_longer_than_its_deadline_forces_nothing_when_admitted() {
    let (client, ns) = setup("deadline-queued").await;
    let nodes = pool(&client, "queued", 2).await;
    budget(&client, "queued", "queued", json!(1), json!([])).await;
    maintenance(&client, "queued-first", &[&nodes[0]], json!({})).await;
    eventually("the first admitted", || async {
        (admitted(&get(&client, "queued-first").await?)?.0 == "True").then_some(())
    })
    .await;
    pod("held")
        .label("app", "held")
        .on_node(&nodes[1])
        .replicaset("rs")
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "held", "app", "held", 1).await;
    maintenance(
        &client,
        "queued-late",
        &[&nodes[1]],
        json!({"drainDeadlineSeconds": 60, "deadlinePolicy": "Force"}),
    )
    .await;
    // Queued for longer than its deadline.
    tokio::time::sleep(Duration::from_secs(65)).await;
    assert_eq!(
        admitted(&get(&client, "queued-late").await.unwrap()).map(|a| a.0),
        Some("False".to_string())
    );
    set_stage(&client, "queued-first", Stage::Complete).await;
    eventually("the late one admitted", || async {
        (admitted(&get(&client, "queued-late").await?)?.0 == "True").then_some(())
    })
    .await;
    // Its deadline counts from its admission: nothing is forced at once.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        pod_exists(&client, &ns, "held").await,
        "forced at admission"
    );
    let nm = get(&client, "queued-late").await.unwrap();
    assert!(condition(&nm, CONDITION_DEADLINE_EXCEEDED).is_none());
    set_stage(&client, "queued-late", Stage::Complete).await;
}

/// Sets the pod's phase (the kubelet's part).
async fn finish(client: &Client, ns: &str, name: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
}

async fn requested(client: &Client, ns: &str, pod_name: &str) -> bool {
    Api::<EvictionRequest>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|r| r.spec.target.pod.name == pod_name)
}

#[tokio::test]
async fn skip_and_wait_completed_by_label_and_by_rule() {
    let (client, ns) = setup("drain-rules").await;
    let nodes = pool(&client, "rules", 2).await;
    // By label on the first node; by rule on the second, where a label wins over the rule.
    pod("cache")
        .label("evictord.dev/drain", "skip")
        .on_node(&nodes[0])
        .replicaset("a")
        .create(&client, &ns)
        .await;
    pod("job")
        .label("evictord.dev/drain", "wait-completed")
        .on_node(&nodes[0])
        .create(&client, &ns)
        .await;
    pod("ruled-cache")
        .label("role", "cache")
        .on_node(&nodes[1])
        .replicaset("b")
        .create(&client, &ns)
        .await;
    pod("ruled-job")
        .label("role", "batch")
        .on_node(&nodes[1])
        .create(&client, &ns)
        .await;
    pod("label-wins")
        .label("role", "cache")
        .label("evictord.dev/drain", "drain")
        .on_node(&nodes[1])
        .replicaset("c")
        .create(&client, &ns)
        .await;
    let rules = json!({"podRules": [
        {"podSelector": {"matchLabels": {"role": "cache"}}, "behavior": "Skip"},
        {"podSelector": {"matchLabels": {"role": "batch"}}, "behavior": "WaitCompleted"},
    ]});
    maintenance(&client, "rules", &[&nodes[0], &nodes[1]], rules).await;
    // The pod the label lets drain leaves; the others are not requested.
    eventually("label-wins evicted", || async {
        (!pod_exists(&client, &ns, "label-wins").await).then_some(())
    })
    .await;
    let nm = eventually("the waited-for and skipped pods listed", || async {
        let nm = get(&client, "rules").await?;
        let s = nm.status.as_ref()?;
        let listed = s
            .node_statuses
            .iter()
            .all(|l| !l.waiting_pods.is_empty() && !l.skipped_pods.is_empty());
        (listed && s.node_statuses.len() == 2).then_some(nm)
    })
    .await;
    assert!(!drained(&nm), "the jobs hold the drain");
    for p in ["cache", "job", "ruled-cache", "ruled-job"] {
        assert!(!requested(&client, &ns, p).await, "{p} requested");
        assert!(pod_exists(&client, &ns, p).await, "{p} gone");
    }
    let lines = nm.status.unwrap().node_statuses;
    let first = lines.iter().find(|l| l.node_ref.name == nodes[0]).unwrap();
    assert_eq!(first.skipped_pods, [format!("{ns}/cache")]);
    assert_eq!(first.waiting_pods, [format!("{ns}/job")]);
    // The jobs finish: Drained, the skipped pods still there.
    finish(&client, &ns, "job").await;
    finish(&client, &ns, "ruled-job").await;
    eventually("Drained once the jobs finished", || async {
        drained(&get(&client, "rules").await?).then_some(())
    })
    .await;
    assert!(
        pod_exists(&client, &ns, "cache").await && pod_exists(&client, &ns, "ruled-cache").await
    );
    set_stage(&client, "rules", Stage::Complete).await;
}

#[tokio::test]
async fn a_job_waited_for_is_deleted_at_a_forcing_deadline() {
    let (client, ns) = setup("wait-force").await;
    let nodes = pool(&client, "waitforce", 1).await;
    pod("job")
        .label("evictord.dev/drain", "wait-completed")
        .on_node(&nodes[0])
        .create(&client, &ns)
        .await;
    maintenance(
        &client,
        "waitforce",
        &[&nodes[0]],
        json!({"drainDeadlineSeconds": 60, "deadlinePolicy": "Force"}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        pod_exists(&client, &ns, "job").await,
        "waited for, not requested"
    );
    assert!(!requested(&client, &ns, "job").await);
    eventually(
        "the job deleted at the deadline, the maintenance Drained",
        || async {
            let gone = !pod_exists(&client, &ns, "job").await;
            (gone && drained(&get(&client, "waitforce").await?)).then_some(())
        },
    )
    .await;
    set_stage(&client, "waitforce", Stage::Complete).await;
}
