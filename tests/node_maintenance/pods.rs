//! Which pods a maintenance's drain leaves and how its requests look: static pods without a node
//! agent stay, DaemonSet pods leave through their interceptor, requests carry their pods' labels.

use super::*;

/// A static pod on a node without a node agent stays, and does not hold `Drained`; a DaemonSet pod
/// leaves through `daemonset.apps.k8s.io` (here an orphan of a DaemonSet that does not exist:
/// nothing starts it again, so it is simply deleted).
#[tokio::test]
async fn drained_leaves_static_pods_without_a_node_agent() {
    let (client, ns) = setup("nm-leftovers").await;
    let n = format!("{ns}-n");
    node(&n).create(&client).await;
    pod("ds")
        .on_node(&n)
        .daemonset("agent")
        .create(&client, &ns)
        .await;
    pod("static")
        .on_node(&n)
        .mirror()
        .create(&client, &ns)
        .await;
    pod("plain").on_node(&n).create(&client, &ns).await;
    let name = ns.clone();
    maintenance(&client, &name, &[&n], Stage::Drain, &[]).await;
    let (left, nm) = eventually("Drained with the plain and DaemonSet pods gone", || async {
        let nm = get_nm(&client, &name).await?;
        let left = pods(&client, &ns).await;
        (drained(&nm) == Some(true) && !left.contains_key("plain") && !left.contains_key("ds"))
            .then_some((left, nm))
    })
    .await;
    // What the book says of Drained=True: a static pod without a node agent stays.
    assert_eq!(left.keys().collect::<Vec<_>>(), ["static"]);
    // It gets an EvictionRequest (for interceptors of its own), which the imperative interceptor
    // does not evict, and the node's message says why it stays.
    let reqs = requests(&client, &ns).await;
    let status = reqs["static"].status.clone().unwrap_or_default();
    assert!(!status.is_true("Evicted"), "{status:?}");
    let message = &nm.status.unwrap().node_statuses[0].drain_message;
    assert_eq!(
        message,
        &format!(
            "Drained; 1 pod stays: {ns}/static (static pod on a node without an evictord node agent)"
        )
    );
    finish(&client, &ns, &[&name], &[&n]).await;
}

/// A request the maintenance creates carries its pod's labels from the start (SPEC 2.3 step 4):
/// watched from before its creation, the request is added with them and no later version
/// changes them, so the eviction request controller never patches it for labels.
#[tokio::test]
async fn requests_are_created_with_their_pod_labels() {
    use futures::TryStreamExt;
    use kube::api::{ListParams, WatchEvent, WatchParams};

    let (client, ns) = setup("nm-labels").await;
    let n = format!("{ns}-n");
    node(&n).create(&client).await;
    pod("web")
        .on_node(&n)
        .label("app", "web")
        .label("tier", "front")
        .create(&client, &ns)
        .await;
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = Box::pin(
        api.watch(
            &WatchParams::default().timeout(TIMEOUT.as_secs() as u32),
            &rv,
        )
        .await
        .unwrap(),
    );
    let name = ns.clone();
    maintenance(&client, &name, &[&n], Stage::Drain, &[]).await;

    // Every version of the request, in order, until it is Evicted.
    let mut versions: Vec<(&str, Option<BTreeMap<String, String>>)> = Vec::new();
    while let Some(event) = events.try_next().await.unwrap() {
        let (kind, r) = match event {
            WatchEvent::Added(r) => ("ADDED", r),
            WatchEvent::Modified(r) => ("MODIFIED", r),
            WatchEvent::Deleted(r) => ("DELETED", r),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watching the requests: {e}"),
        };
        let evicted = r.status.as_ref().is_some_and(|s| s.is_true("Evicted"));
        versions.push((kind, r.metadata.labels.clone()));
        if evicted || kind == "DELETED" {
            break;
        }
    }
    let want = Some(BTreeMap::from([
        ("app".to_string(), "web".to_string()),
        ("tier".to_string(), "front".to_string()),
    ]));
    assert_eq!(
        versions.first(),
        Some(&("ADDED", want.clone())),
        "the request as created: {versions:?}"
    );
    assert!(
        versions.iter().all(|(_, labels)| *labels == want),
        "labels changed after creation: {versions:?}"
    );
    assert!(
        versions.len() > 1,
        "never saw the request Evicted: {versions:?}"
    );
    finish(&client, &ns, &[&name], &[&n]).await;
}
