//! Leader election with real `serve` processes on one coordination.k8s.io Lease: exactly one runs
//! the controllers and every request is processed once; after SIGKILL of the leader the standby
//! takes over once the lease expires; SIGTERM releases the lease so that a standby takes over at
//! once; a leader whose Lease is taken over stops its controllers. Every replica serves the
//! webhook.

mod support;

use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::Evictord;
use support::evictord::{FAST, SpawnOptions, install_crds};
use support::fixtures::pod;
use support::wait::until;

const T: Duration = Duration::from_secs(60);
/// Generous bound on a takeover (the lease lasts 4 s).
const TAKEOVER: Duration = Duration::from_secs(30);
const LEADING: &str = "acquired leadership";
const SUCCESS: &str = "evictionrequest_controller_imperative_evictions_total{result=\"success\"}";
const WEBHOOKS: &str = "evictord-leader";

/// Creates a pod and an EvictionRequest for it; waits until it is Evicted and the pod gone.
async fn evict(client: &Client, ns: &str, name: &str) {
    let p = pod(name).label("app", name).create(client, ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": name, "uid": uid}}, "requesters": [{"name": "leader.example.com"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &er)
        .await
        .expect("create EvictionRequest");
    until(T, &format!("{name} Evicted"), || async {
        let r = api.get(&uid).await.ok()?;
        r.status
            .as_ref()
            .is_some_and(|s| s.is_true("Evicted"))
            .then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    assert!(pods.get_opt(name).await.unwrap().is_none(), "{name} gone");
}

fn identity(e: &Evictord) -> String {
    format!("evictord-{}", e.pid().expect("running"))
}

async fn holder(client: &Client, ns: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get_opt("evictord-controllers")
        .await
        .ok()??
        .spec?
        .holder_identity
}

async fn wait_leading(e: &Evictord, what: &str) {
    until(TAKEOVER, what, || async {
        e.logs().contains(LEADING).then_some(())
    })
    .await;
}

#[tokio::test]
async fn one_leader_takeover_after_kill_release_on_term() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("leader").await;
    let lease_ns = format!("--leader-election-namespace={ns}");
    let mut args = FAST.to_vec();
    args.extend([
        "--leader-election",
        "--lease-duration=4s",
        "--leader-election-id=evictord-controllers",
        &lease_ns,
    ]);

    // Two replicas at once: exactly one leads.
    let a = Evictord::spawn(c, &args, SpawnOptions::default());
    let b = Evictord::spawn(c, &args, SpawnOptions::default());
    a.ready().await;
    b.ready().await;
    let first = until(T, "one replica to lead", || async {
        match (a.logs().contains(LEADING), b.logs().contains(LEADING)) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            (true, true) => panic!("both lead:\n{}\n---\n{}", a.logs(), b.logs()),
            _ => None,
        }
    })
    .await;
    let (mut leader, mut standby) = if first { (a, b) } else { (b, a) };
    assert_eq!(
        holder(&client, &ns).await.as_deref(),
        Some(identity(&leader).as_str())
    );
    // The standby serves the webhook too: kube-apiserver calls it.
    standby.register_webhooks(c, WEBHOOKS).await;

    evict(&client, &ns, "p1").await;
    let (l, s) = (leader.metric(SUCCESS).await, standby.metric(SUCCESS).await);
    assert_eq!((l, s), (1.0, 0.0), "one eviction, by the leader");
    let logs = standby.logs();
    assert!(
        !logs.contains(LEADING) && !logs.contains("starting the eviction request controller"),
        "the standby runs no controller:\n{logs}"
    );

    // SIGKILL the leader: the standby takes over once the lease expires.
    leader.kill();
    wait_leading(&standby, "the standby to take over after SIGKILL").await;
    until(T, "the lease held by the new leader", || async {
        (holder(&client, &ns).await? == identity(&standby)).then_some(())
    })
    .await;
    evict(&client, &ns, "p2").await;
    assert_eq!(standby.metric(SUCCESS).await, 1.0, "p2 evicted once");

    // SIGTERM the new leader: it releases the lease, a third replica takes over.
    let third = Evictord::spawn(c, &args, SpawnOptions::default());
    third.ready().await;
    assert!(!third.logs().contains(LEADING), "the lease is held");
    third.register_webhooks(c, WEBHOOKS).await;
    let leaving = identity(&standby);
    let status = standby.stop().expect("exit status");
    assert!(status.success(), "exit {status}:\n{}", standby.logs());
    assert!(
        standby.logs().contains("released the leader lease"),
        "{}",
        standby.logs()
    );
    // A released lease has no holder (or already the next one) before it would have expired.
    assert_ne!(
        holder(&client, &ns).await.as_deref(),
        Some(leaving.as_str()),
        "the lease was not released on SIGTERM"
    );
    wait_leading(&third, "the third replica to take over after SIGTERM").await;
    evict(&client, &ns, "p3").await;
    assert_eq!(third.metric(SUCCESS).await, 1.0, "p3 evicted once");

    let mut third = third;
    assert!(third.stop().is_some_and(|s| s.success()));
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(WEBHOOKS, &Default::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(WEBHOOKS, &Default::default())
        .await;
    c.delete_namespace(&ns).await;
}

/// A leader whose Lease is taken over (another holder written into it) stops its controllers.
#[tokio::test]
async fn a_leader_that_loses_the_lease_stops_its_controllers() {
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("lease-loss").await;
    let lease_ns = format!("--leader-election-namespace={ns}");
    // No eviction request controller: the other test of this binary shares the control plane
    // and must see its EvictionRequests handled by its own replicas only.
    let args = [
        "--controllers=nodemaintenance",
        "--leader-election",
        "--lease-duration=4s",
        "--leader-election-id=evictord-controllers",
        &lease_ns,
    ];
    let mut e = Evictord::spawn(c, &args, SpawnOptions::default());
    e.ready().await;
    wait_leading(&e, "the only replica to lead").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let takeover = json!({"spec": {
        "holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
        "acquireTime": now, "renewTime": now,
    }});
    leases
        .patch(
            "evictord-controllers",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&takeover),
        )
        .await
        .expect("taking the lease over");
    until(TAKEOVER, "the controllers to stop", || async {
        e.logs()
            .contains("lost leadership; stopping controllers")
            .then_some(())
    })
    .await;
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("someone-else"));
    assert!(e.stop().is_some_and(|s| s.success()), "{}", e.logs());
    c.delete_namespace(&ns).await;
}
