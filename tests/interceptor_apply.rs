//! Interceptors write just their own entry (issue: the status lists are list-maps keyed by
//! name, as seed 000 declares them): one heartbeats and completes with a server-side apply of
//! only its own `status.interceptors` entry, as a field manager of its own; the next one with a
//! JSON merge patch. The webhook judges the merged object, the controller hands over, and the
//! pod is evicted.

mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::fixtures::{create_eviction_request, pod};
use support::wait::until;

const T: Duration = Duration::from_secs(60);
const A: &str = "a.example.com";
const B: &str = "b.example.com";

fn now() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn interceptors_write_only_their_own_entry() {
    support::evictord::shared(&["--interceptor-deadline=120s", "--min-heartbeat-interval=1s"])
        .await;
    let c = support::cluster().await;
    let client = c.client().await;
    let ns = c.namespace("own-entry").await;
    let p = pod("p").interceptors(&[A, B]).create(&client, &ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(&client, &ns, "p", &uid, &["tool.example.com"]).await;
    let active = |name: &'static str| {
        let api = api.clone();
        let uid = uid.clone();
        async move {
            until(T, &format!("{name} active"), || async {
                let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
                (s.active_interceptors.first().map(String::as_str) == Some(name)).then_some(())
            })
            .await
        }
    };

    // A: server-side apply of its own entry only, as field manager a.example.com.
    active(A).await;
    let apply = |entry: serde_json::Value| {
        json!({
            "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
            "metadata": {"name": uid},
            "status": {"interceptors": [entry]},
        })
    };
    let ssa = PatchParams::apply(A);
    let t = now();
    let written = api
        .patch_status(
            &uid,
            &ssa,
            &Patch::Apply(apply(
                json!({"name": A, "startTime": t, "heartbeatTime": t, "message": "copying"}),
            )),
        )
        .await
        .unwrap_or_else(|e| panic!("server-side apply of A's own entry: {e}"));
    let s = written.status.unwrap();
    let names: Vec<_> = s.interceptors.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [A, B, "imperative-eviction.k8s.io"],
        "the other entries stay"
    );
    assert_eq!(
        s.interceptor(A).unwrap().message.as_deref(),
        Some("copying")
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t2 = now();
    api.patch_status(&uid, &ssa, &Patch::Apply(apply(json!({"name": A, "startTime": t, "heartbeatTime": t2, "completionTime": t2, "message": "done"}))))
        .await
        .unwrap_or_else(|e| panic!("server-side apply completing A: {e}"));

    // B: a JSON merge patch. Merge patches replace lists, so B sends the list it read with
    // only its own entry changed (and the resourceVersion, so a concurrent write fails it).
    active(B).await;
    let current = api.get(&uid).await.unwrap();
    let mut entries = serde_json::to_value(&current.status.as_ref().unwrap().interceptors).unwrap();
    for e in entries.as_array_mut().unwrap() {
        if e["name"] == B {
            let t = now();
            e["startTime"] = json!(t);
            e["completionTime"] = json!(t);
        }
    }
    let merge = json!({
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "status": {"interceptors": entries},
    });
    api.patch_status(&uid, &PatchParams::default(), &Patch::Merge(&merge))
        .await
        .unwrap_or_else(|e| panic!("merge patch of B's entry: {e}"));

    let s = until(T, "Evicted", || async {
        let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
        s.is_true("Evicted").then_some(s)
    })
    .await;
    assert_eq!(
        s.processed_interceptors,
        [A, B, "imperative-eviction.k8s.io"]
    );
    let managers: Vec<String> = api
        .get(&uid)
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.iter().any(|m| m == A), "{managers:?}");
}
