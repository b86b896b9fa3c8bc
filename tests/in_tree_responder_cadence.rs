//! The Eviction API bridge keeps the request of a caller that retries as rarely as Kubernetes'
//! in-tree `imperative-eviction.k8s.io/evictor` responder (kubernetes/kubernetes PR #137396): 5 s
//! after its first refused call, the wait doubling per attempt up to 10 minutes. The test replays
//! that cadence on a real control plane with every duration divided by [`SCALE`], the bridge's
//! default requester TTL divided the same way: while the caller keeps retrying, the request is
//! never canceled nor replaced and its requester never expires; once the caller stops, the
//! requester expires a TTL after the last call and the request is canceled (what an abandoned
//! drain costs: its request lives a TTL longer than its last call).

mod support;

use std::time::Duration;

use evictord::admission::pod_eviction::{DEFAULT_REQUESTER_TTL, IN_TREE_RESPONDER_BACKOFF_CAP};
use evictord::api::{EVICTION_API_REQUESTER, EvictionRequest};
use http::{Request, header};
use kube::{Api, Client};
use support::fixtures::pod;
use support::wait::until;
use tokio::time::Instant;

/// Every duration of the replay is divided by this: 10 minutes become 12 s.
const SCALE: u32 = 50;
/// The in-tree responder's first wait after a refused call (`heartbeatMinDurationBetweenUpdates`
/// in PR #137396), doubled per attempt up to [`IN_TREE_RESPONDER_BACKOFF_CAP`].
const FIRST_WAIT: Duration = Duration::from_secs(5);
/// What each retry comes later than its wait, at full scale: the responder waits from the moment
/// its previous call returned, and its work queue (a few workers for every Eviction of a large
/// drain) adds its own delay.
const QUEUE_DELAY: Duration = Duration::from_secs(30);
/// Retries replayed at the cap, after the doubling ones.
const RETRIES_AT_CAP: usize = 3;
const T: Duration = Duration::from_secs(60);

fn scaled(d: Duration) -> Duration {
    d / SCALE
}

/// A client that makes each call once, as client-go does on a 429 without `Retry-After` (kube's
/// default retry layer would repeat a refused call for minutes inside one call).
async fn caller(c: &support::TestCluster) -> Client {
    let kc = kube::config::Kubeconfig::read_from(&c.kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    config.default_retry = false;
    Client::try_from(config).expect("client")
}

/// `POST pods/NAME/eviction` once, as the in-tree responder makes it (the 1.20 test server takes
/// policy/v1beta1 Evictions); returns the HTTP status code and message of the refusal.
async fn evict(client: &Client, ns: &str, name: &str) -> (u16, String) {
    let body = serde_json::json!({
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    });
    let request = Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match client.request_text(request).await {
        Ok(text) => (201, text),
        Err(kube::Error::Api(status)) => (status.code, status.message.clone()),
        Err(e) => panic!("the Eviction API call failed: {e}"),
    }
}

/// The pod's request, which must still be the first one (same UID), open, with the bridge as
/// requester.
async fn still_open(api: &Api<EvictionRequest>, name: &str, first_uid: &str, when: &str) {
    let r = api.get(name).await.unwrap();
    let s = r.status.clone().unwrap_or_default();
    assert_eq!(
        r.metadata.uid.as_deref(),
        Some(first_uid),
        "{when}: the request was canceled and replaced: {s:?}"
    );
    assert!(!s.is_true("Canceled"), "{when}: canceled: {s:?}");
    assert!(
        r.has_requester(EVICTION_API_REQUESTER),
        "{when}: the bridge's requester expired: {:?}",
        r.spec.requesters
    );
}

#[tokio::test]
async fn a_caller_retrying_at_the_in_tree_responders_cap_keeps_its_request() {
    let ttl = scaled(DEFAULT_REQUESTER_TTL);
    let ttl_flag = format!("--eviction-api-requester-ttl={}ms", ttl.as_millis());
    let flags = [
        // The interceptor stays active (silent) for the whole replay.
        "--interceptor-deadline=10m",
        "--min-heartbeat-interval=1s",
        ttl_flag.as_str(),
    ];
    let e = support::evictord::shared(&flags).await;
    let c = support::cluster().await;
    let client = c.client().await;
    let ns = c.namespace("in-tree-cadence").await;
    let p = pod("db")
        .interceptors(&["slow.example.com"])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let responder = caller(c).await;

    let (code, message) = evict(&responder, &ns, "db").await;
    assert_eq!(code, 429, "{message}");
    assert!(message.contains("Eviction triggered"), "{message}");
    let first = until(T, "the bridged request", || async {
        api.get_opt(&uid)
            .await
            .unwrap()
            .filter(|r| r.has_requester(EVICTION_API_REQUESTER))
    })
    .await;
    let first_uid = first.metadata.uid.clone().unwrap();

    let mut waits = Vec::new();
    let mut wait = FIRST_WAIT;
    while wait < IN_TREE_RESPONDER_BACKOFF_CAP {
        waits.push(wait);
        wait *= 2;
    }
    waits.extend([IN_TREE_RESPONDER_BACKOFF_CAP; RETRIES_AT_CAP]);
    let mut returned = Instant::now();
    for (attempt, wait) in waits.into_iter().enumerate() {
        // Between two calls the request must stay as it is, checked every 200 ms.
        let next = returned + scaled(wait + QUEUE_DELAY);
        while Instant::now() < next {
            let when = format!("before retry {} ({wait:?} wait, scaled)", attempt + 1);
            still_open(&api, &uid, &first_uid, &when).await;
            tokio::time::sleep(Duration::from_millis(200).min(next - Instant::now())).await;
        }
        let (code, message) = evict(&responder, &ns, "db").await;
        returned = Instant::now();
        assert_eq!(code, 429, "retry {}: {message}", attempt + 1);
        assert!(message.contains("Eviction triggered"), "{message}");
        still_open(
            &api,
            &uid,
            &first_uid,
            &format!("after retry {}", attempt + 1),
        )
        .await;
    }
    assert_eq!(
        e.metric("evictord_eviction_api_requesters_expired_total")
            .await,
        0.0,
        "no requester expired while the caller kept retrying"
    );

    // The caller stops: a TTL after its last call the requester goes and the request is canceled.
    let s = until(T, "Canceled=True a TTL after the last call", || async {
        let s = api.get(&uid).await.unwrap().status.unwrap_or_default();
        s.is_true("Canceled").then_some(s)
    })
    .await;
    let after = returned.elapsed();
    assert!(
        after + Duration::from_secs(1) >= ttl,
        "canceled {after:?} after the last call, before the TTL {ttl:?}"
    );
    assert_eq!(s.condition("Canceled").unwrap().reason, "NoRequesters");
    assert_eq!(
        e.metric("evictord_eviction_api_requesters_expired_total")
            .await,
        1.0
    );
    c.delete_namespace(&ns).await;
}
