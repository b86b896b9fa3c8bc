//! The eviction request controller's write economy on a real kube-apiserver: evicting pods
//! without interceptors costs each request two status writes (first sight, which activates the
//! imperative interceptor and starts its turn before the Eviction API call; `Evicted=True` when
//! the pod is gone) — seeing the pod terminating in between costs none — and none is refused
//! because the controller decided on a cached copy older than its own previous write. Counted from
//! kube-apiserver's own request counters and evictord's retry counter; this binary has its own
//! control plane and a single evictord, so nothing else writes the requests. The selection of the
//! imperative interceptor is told in the event of the eviction it made in the same pass, not in
//! an `InterceptorSelected` event of its own; the pod gone is not told again (one `Evicted` event
//! per request). The event recorder's repeats are checked here too.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::Evictord;
use support::evictord::install_crds;
use support::fixtures::pod;
use support::wait::until;

const PODS: usize = 60;

/// kube-apiserver's count of `PATCH evictionrequests/status` answered with each of `codes`.
async fn status_patches(client: &Client, codes: &[&str]) -> f64 {
    let counters = support::apiserver::counters(client)
        .await
        .expect("apiserver /metrics");
    codes
        .iter()
        .filter_map(|code| {
            counters
                .get(&format!(
                    "{}|PATCH evictionrequests/status {code}",
                    support::apiserver::REQUESTS
                ))
                .copied()
        })
        .sum()
}

#[tokio::test]
async fn evictions_without_interceptors_take_two_status_writes_and_none_refused() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("writes").await;
    // Default heartbeat settings (60 s minimum step): within this test the controller has no
    // reason to heartbeat again, so every status write is one of the two.
    let e = Evictord::start(c, &[]).await;
    e.register_webhooks(c, "evictord").await;

    let pods: Vec<_> = futures::stream::iter(0..PODS)
        .map(|i| {
            let (client, ns) = (client.clone(), ns.clone());
            async move { pod(&format!("p{i:03}")).create(&client, &ns).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let ok_before = status_patches(&client, &["200"]).await;
    let refused_before = status_patches(&client, &["409", "422"]).await;

    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    futures::stream::iter(&pods)
        .for_each_concurrent(8, |p| {
            let api = api.clone();
            async move {
                let (name, uid) = (p.metadata.name.clone().unwrap(), p.metadata.uid.clone().unwrap());
                let er: EvictionRequest = serde_json::from_value(json!({
                    "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
                    "metadata": {"name": uid},
                    "spec": {"target": {"pod": {"name": name, "uid": uid}}, "requesters": [{"name": "test.example.com"}]}
                }))
                .unwrap();
                api.create(&PostParams::default(), &er).await.unwrap();
            }
        })
        .await;

    until(
        Duration::from_secs(120),
        "every request Evicted",
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            let evicted = list
                .items
                .iter()
                .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Evicted")))
                .count();
            (evicted == PODS).then_some(())
        },
    )
    .await;
    // A write still in flight when the last condition was read would be missed: let it land.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let ok = status_patches(&client, &["200"]).await - ok_before;
    let refused = status_patches(&client, &["409", "422"]).await - refused_before;
    let retries = e
        .metric("evictord_reconcile_retries_total{controller=\"evictionrequest\"}")
        .await;
    assert_eq!(
        refused, 0.0,
        "status writes refused as conflicts: {refused} (controller retries: {retries})"
    );
    // kube-apiserver deletes an evicted pod in two steps (deletionTimestamp, then gone) even with
    // a zero grace period; a reconcile that falls between them sees the pod terminating, which
    // is no reason for a write of its own (its message rides along with a write made anyway).
    let messages: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|r| r.status.unwrap_or_default().interceptors)
        .filter_map(|i| i.message)
        .collect();
    assert!(
        messages.is_empty(),
        "interceptor messages written: {messages:?}"
    );
    assert_eq!(
        ok,
        2.0 * PODS as f64,
        "status writes for {PODS} requests: {ok}, expected 2 each"
    );
    assert_eq!(retries, 0.0, "controller retries");

    // Events are written in the background: wait for the eviction's on every request. The pod's
    // going is not told again (its request was told `Evicted` when the Eviction API was called):
    // no second `Evicted` event, which cost every evicted pod one more request.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let by_kind = ListParams::default().fields("involvedObject.kind=EvictionRequest");
    let made = "Interceptor imperative-eviction.k8s.io selected (1 of 1); pod ";
    let evicted_events = |list: &[Event], p: &Pod| -> Vec<String> {
        list.iter()
            .filter(|e| e.reason.as_deref() == Some("Evicted"))
            .filter(|e| e.involved_object.name == p.metadata.uid)
            .filter_map(|e| e.message.clone())
            .collect()
    };
    until(
        Duration::from_secs(60),
        "the Evicted event on every request",
        || async {
            let list = events.list(&by_kind).await.ok()?.items;
            pods.iter()
                .all(|p| evicted_events(&list, p).iter().any(|m| m.starts_with(made)))
                .then_some(())
        },
    )
    .await;
    // The conclusions were queued before the waits above ended: give a second event the time
    // to land, were one queued.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stored = events.list(&by_kind).await.unwrap().items;
    for p in &pods {
        let told = evicted_events(&stored, p);
        assert_eq!(
            told.len(),
            1,
            "Evicted events of the request of {}: {told:?}",
            p.name_any()
        );
    }
    let selected = stored
        .iter()
        .filter(|e| e.reason.as_deref() == Some("InterceptorSelected"))
        .count();
    assert_eq!(selected, 0, "InterceptorSelected events of their own");
}

/// evictord's event recorder on a real kube-apiserver: an identical event is one more
/// occurrence of the stored one (its series), one that differs only in its note is stored as
/// its own (kube-runtime's recorder patched it into the first as a repeat, and its note was
/// lost); a repeat of a deleted event is created anew; events of a cluster-scoped object are
/// stored (in kube-system where kube-apiserver is older than v1.22).
#[tokio::test]
async fn the_recorder_repeats_only_identical_events() {
    use evictord::recorder::{Event as Happened, EventType, Recorder, Reporter};
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as NewEvent;

    let c = support::cluster().await;
    let client = c.client().await;
    let ns = c.namespace("recorder").await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "evictord-test".into(),
            instance: None,
        },
    );
    let happened = |note: &str| Happened {
        type_: EventType::Normal,
        reason: "Evicted".into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = |namespace: Option<&str>, kind: &str, name: &str| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(kind.into()),
        namespace: namespace.map(Into::into),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    };
    let subject = reference(Some(&ns), "ConfigMap", "subject");
    for note in ["made", "made", "gone"] {
        recorder.publish(&happened(note), &subject).await.unwrap();
    }
    let api: Api<NewEvent> = Api::namespaced(client.clone(), &ns);
    let with_note = |all: &[NewEvent], note: &str| -> Vec<NewEvent> {
        all.iter()
            .filter(|e| e.note.as_deref() == Some(note))
            .cloned()
            .collect()
    };
    let stored = api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(stored.len(), 2, "events stored: {stored:?}");
    let made = with_note(&stored, "made");
    assert_eq!(made.len(), 1);
    assert_eq!(
        made[0].series.as_ref().map(|s| s.count),
        Some(2),
        "the repeat"
    );
    let gone = with_note(&stored, "gone");
    assert_eq!(gone.len(), 1);
    assert!(
        gone[0].series.is_none(),
        "an event of its own: {:?}",
        gone[0]
    );

    // Deleted (as kube-apiserver's event TTL would): the repeat is a new event.
    api.delete(&gone[0].name_any(), &Default::default())
        .await
        .unwrap();
    recorder.publish(&happened("gone"), &subject).await.unwrap();
    let again = with_note(
        &api.list(&ListParams::default()).await.unwrap().items,
        "gone",
    );
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].name_any(), gone[0].name_any());
    assert!(again[0].series.is_none());

    // A cluster-scoped object: both events stored, wherever this kube-apiserver takes them.
    let node = format!("{ns}-node");
    let node_ref = reference(None, "Node", &node);
    for note in [
        format!("Node {node}-a cordoned"),
        format!("Node {node}-b cordoned"),
    ] {
        recorder.publish(&happened(&note), &node_ref).await.unwrap();
    }
    let on_node: Vec<NewEvent> = Api::<NewEvent>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node.as_str()))
        .collect();
    assert_eq!(on_node.len(), 2, "events of the node: {on_node:?}");
    assert!(on_node.iter().all(|e| e.series.is_none()));
}
