//! The StatefulSet straggler of issue 45, reproduced on the real kube-controller-manager: a pod
//! of a StatefulSet evicted under a PodDisruptionBudget of `maxUnavailable: 1` comes back under
//! the same name within seconds, Running and Ready; when the disruption controller looks at the
//! budget only then (a busy controller manager), it keeps the name the Eviction API wrote into
//! the budget's `status.disruptedPods` and counts the pod as disrupted until two minutes after
//! the eviction (its `DeletionTimeout`): every eviction of a sibling is refused (429) meanwhile,
//! with a message that names neither the budget's reason nor the wait. Two siblings evicted in turn,
//! as a drain of several nodes does, wait about four minutes: the 236 s the pool benchmark saw.
//! This is Kubernetes' own accounting (`kubectl drain` waits the same); evictord says it: the
//! refused request's `EvictionFailed` event names the budget, the held pod and until when.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::fixtures::{create_eviction_request, node, pdb_api};
use support::kubelet::{Kubelet, condition};
use support::surge::FLAGS;
use support::wait::until;

const T: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_sibling_refused_for_a_name_back_says_which_budget_holds_it_and_until_when() {
    let c = support::control_plane::cluster_with_controller_manager().await;
    support::evictord::shared(FLAGS).await;
    let client = c.client().await;
    let ns = c.namespace("held-name").await;
    let node_name = format!("{ns}-n");
    node(&node_name).create(&client).await;
    let _kubelet = Kubelet::start(client.clone(), &ns, &node_name);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let sts = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                         "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}
            }
        }
    }))
    .unwrap();
    sets.create(&PostParams::default(), &sts).await.unwrap();
    let pdb = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }))
    .unwrap();
    let pdbs = pdb_api(&client, &ns);
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let allowed = || async {
        let b = pdbs.get("db").await.ok()?;
        b.data["status"]["disruptionsAllowed"].as_i64()
    };
    until(T, "3 ready pods and the budget allowing 1", || async {
        (allowed().await == Some(1)).then_some(())
    })
    .await;

    // db-2 evicted through an EvictionRequest (no interceptor: the Eviction API), while the
    // controller manager is stopped: its disruption controller looks at the budget again only
    // once db-2 is back — the order a busy controller manager takes (in the pool benchmark its
    // client, limited to 20 requests/s, was saturated by the autoscalers' reads), made certain
    // here. With it stopped the test plays the StatefulSet controller: db-2 created again under
    // its name, as the controller would (it adopts the pod once resumed).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // kube-controller-manager, resumed, may look at the budget between db-2's removal and its
    // return in its informer (the pod away: the name is dropped) rather than after both; that
    // other order makes no held name, and the scenario is played again (at most 3 times).
    let mut status = serde_json::Value::Null;
    for attempt in 1..=3 {
        let first = pods.get("db-2").await.unwrap();
        let first_uid = first.uid().unwrap();
        let paused = support::control_plane::pause_controller_manager();
        create_eviction_request(&client, &ns, "db-2", &first_uid, &["test.example.com"]).await;
        until(T, "db-2 evicted and gone", || async {
            pods.get_opt("db-2")
                .await
                .ok()
                .map(|p| p.is_none_or(|p| p.uid().as_deref() != Some(first_uid.as_str())))
                .filter(|gone| *gone)
        })
        .await;
        let recorded = pdbs.get("db").await.unwrap().data["status"].clone();
        assert!(
            recorded["disruptedPods"].get("db-2").is_some(),
            "the Eviction API recorded db-2's name in the budget: {recorded}"
        );
        // As the StatefulSet controller creates it: the same labels (its revision), owner and spec.
        let mut again = Pod {
            metadata: kube::api::ObjectMeta {
                name: first.metadata.name.clone(),
                labels: first.metadata.labels.clone(),
                owner_references: first.metadata.owner_references.clone(),
                ..Default::default()
            },
            spec: first.spec.clone(),
            status: None,
        };
        if let Some(spec) = again.spec.as_mut() {
            spec.node_name = None;
        }
        pods.create(&PostParams::default(), &again).await.unwrap();
        until(T, "db-2 back under its name and Ready", || async {
            let p = pods.get_opt("db-2").await.ok()??;
            (p.metadata.deletion_timestamp.is_none() && condition(&p, "Ready") == Some("True"))
                .then_some(())
        })
        .await;
        paused.resume();
        // The disruption controller's next look: every pod Ready, one counted as disrupted.
        let looked = until(
            T,
            "the disruption controller's look at the budget",
            || async {
                let st = pdbs.get("db").await.ok()?.data["status"].clone();
                (st["currentHealthy"].as_i64() != Some(3)
                    || st["disruptionsAllowed"].as_i64() == Some(1))
                .then_some(st)
            },
        )
        .await;
        if looked["disruptedPods"].get("db-2").is_some() {
            status = looked;
            break;
        }
        println!(
            "attempt {attempt}: the disruption controller looked while db-2 was away: {looked}"
        );
        status = looked;
        until(T, "the budget allowing 1 again", || async {
            (allowed().await == Some(1)).then_some(())
        })
        .await;
    }
    let ready = pods
        .list(&ListParams::default().labels("app=db"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| condition(p, "Ready") == Some("True"))
        .count();
    assert_eq!(ready, 3, "every pod of the StatefulSet Ready again");
    assert!(
        status["disruptedPods"].get("db-2").is_some()
            && status["currentHealthy"] == 2
            && status["disruptionsAllowed"] == 0,
        "the disruption controller counts db-2, back and Ready, as disrupted: {status}"
    );

    // A sibling's eviction is refused, and the refusal says why and until when.
    let second = pods.get("db-1").await.unwrap();
    let second_uid = second.uid().unwrap();
    create_eviction_request(&client, &ns, "db-1", &second_uid, &["test.example.com"]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let note = until(T, "an EvictionFailed event for db-1", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("EvictionFailed"))
            .filter_map(|e| e.message)
            .find(|m| m.contains("db-1"))
    })
    .await;
    println!("EvictionFailed: {note}");
    assert!(
        note.contains("429")
            && note.contains(&format!(
                "PodDisruptionBudget {ns}/db counts pod db-2 as disrupted until"
            )),
        "the refusal names the budget and the held name: {note}"
    );
    assert!(
        pods.get("db-1")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none(),
        "db-1 not evicted while the name is held"
    );
    c.delete_namespace(&ns).await;
}
