//! The interceptors' pod cache ([`PodCache`]) when kube-apiserver refuses its watch (403), on a
//! real kube-apiserver: an account that may list pods but not watch them gets the first list
//! in, then a refused watch. The cache must not go on serving what that list held (a pod gone
//! since is gone, however often it is asked), and once the account may watch again the cache
//! asks again and serves from a watch. A kube-apiserver that has just restarted refuses an
//! account bound by RBAC the same way until its authorization caches are in (the soak saw it,
//! issue 45): before this was fixed, one such refusal froze a node's pods in the cache for the
//! life of the process, and a settler reading from it never saw a surged pod leave. This binary
//! has its own control plane and no evictord.

mod support;

use std::time::{Duration, Instant};

use evictord::interceptor::PodCache;
use evictord_interceptor::pods::Source;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::pod;

/// The role of `user` in `ns`: pods with `verbs`.
async fn grant(admin: &Client, ns: &str, user: &str, verbs: &[&str]) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": user},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}],
    }))
    .unwrap();
    let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
    let params = PatchParams::apply("pod-cache-refused").force();
    roles
        .patch(user, &params, &Patch::Apply(&role))
        .await
        .expect("the Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
    match bindings.create(&PostParams::default(), &binding).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("the RoleBinding: {e}"),
    }
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_refused_pod_watch_serves_nothing_stale_and_is_asked_again() {
    let c = support::cluster().await;
    let admin = c.client().await;
    let ns = c.namespace("pod-cache-refused").await;
    let user = format!("pod-reader-{ns}");
    grant(&admin, &ns, &user, &["get", "list"]).await;
    let node = format!("{ns}-node");
    let a = pod("a").on_node(&node).create(&admin, &ns).await;
    let recheck = Duration::from_secs(3);
    let cache = PodCache::with_recheck(c.client_as(&user, &[]).await, Some(ns.clone()), recheck);

    // The first read is live and starts the node's watch: its list is allowed, its watch not.
    let (read, source) = cache.get_from(&ns, "a", &uid(&a)).await.expect("a read");
    assert!(read.is_some());
    assert_eq!(source, Source::Live);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The pod goes; the cache must not serve what the refused watch's list held.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting a");
    let t = Instant::now();
    while pods.get_opt("a").await.expect("get a").is_some() {
        assert!(t.elapsed() < Duration::from_secs(30), "pod a not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..5 {
        let (read, source) = cache.get_from(&ns, "a", &uid(&a)).await.expect("a read");
        assert!(
            read.is_none(),
            "the cache served pod a after it was deleted (from {source:?}): a refused watch's \
             store was still read"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The account may watch now: after the recheck the cache watches the node again and serves
    // its pods from the watch.
    grant(&admin, &ns, &user, &["get", "list", "watch"]).await;
    let b = pod("b").on_node(&node).create(&admin, &ns).await;
    tokio::time::sleep(recheck).await;
    let t = Instant::now();
    loop {
        let (read, source) = cache.get_from(&ns, "b", &uid(&b)).await.expect("b read");
        assert!(read.is_some(), "pod b is there");
        if source == Source::Cache {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the cache did not watch the node again after the refusal passed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.delete_namespace(&ns).await;
}
