//! Interceptor registration under `--interceptor-registration=enforce` (SPEC 5.5) on a real
//! kube-apiserver: a pod with a mistyped interceptor is evicted about the grace after the
//! request (not the heartbeat deadline, 10 minutes here); an SDK interceptor registers itself
//! through its runner and completes under rule S7, and once its runner stopped it keeps its turn
//! past the grace (the normal deadline); a status write by a service account that is not the
//! interceptor's is denied with rule S7, while its own account and evictord's controller are
//! admitted; the registrations' own rules (R1) and the pod warning (P8) through `kubectl`. This
//! binary has its own control plane and one evictord.

mod support;

use std::time::{Duration, Instant};

use evictord::api::{
    EvictionInterceptor, EvictionInterceptorSpec, EvictionRequest, EvictionRequestStatus,
    InterceptorStatus, ServiceAccountReference,
};
use evictord::interceptor::{BoxError, Interceptor, Progress, Runner, Settings};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use support::audit::requests;
use support::fixtures::{create_eviction_request, pod};
use support::interceptor::now;
use support::tools::kubectl;
use support::wait::until;

/// A 10-minute deadline: anything evicted within the test's minute was not timed out.
const ARGS: &[&str] = &[
    "--interceptor-registration=enforce",
    "--unregistered-interceptor-grace=3s",
    "--interceptor-deadline=10m",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=4s",
];
const T: Duration = Duration::from_secs(60);
const RUNNER_SA: (&str, &str) = ("registration-system", "runner");

async fn setup(prefix: &str) -> (Client, String) {
    // Every test of this binary starts here: the control plane writes the audit log that
    // `runner_registers_and_a_stopped_runner_keeps_the_deadline` reads.
    support::control_plane::cluster_with_request_audit().await;
    let e = support::evictord::shared(ARGS).await;
    let c = support::cluster().await;
    let client = c.client().await;
    // The registrations' cache syncs after readiness; wait until evictord's own interceptors
    // registered (its runners start with the controllers).
    let evis: Api<EvictionInterceptor> = Api::all(client.clone());
    until(T, "deployment.apps.k8s.io registered", || async {
        evis.get_opt("deployment.apps.k8s.io").await.ok()?
    })
    .await;
    assert!(
        e.logs().contains("interceptor registration"),
        "{}",
        e.logs()
    );
    (client, c.namespace(prefix).await)
}

fn sa_user((ns, name): (&str, &str)) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}

/// A client acting as `user` (with every permission, so that only evictord's webhook decides).
async fn client_as(user: &str) -> Client {
    support::cluster()
        .await
        .client_as(user, &["system:masters"])
        .await
}

async fn status(api: &Api<EvictionRequest>, name: &str) -> EvictionRequestStatus {
    api.get(name).await.expect("get").status.unwrap_or_default()
}

async fn events(client: &Client, ns: &str, request: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().fields(&format!("involvedObject.name={request}")))
        .await
        .unwrap()
        .items
}

/// Writes `name`'s own entry as the client's user; the server's answer.
async fn try_write_entry(
    api: &Api<EvictionRequest>,
    uid: &str,
    name: &str,
    edit: impl Fn(&mut InterceptorStatus),
) -> Result<(), String> {
    for _ in 0..20 {
        let mut obj = api.get(uid).await.unwrap();
        let mut s = obj.status.clone().unwrap_or_default();
        edit(s.interceptors.iter_mut().find(|i| i.name == name).unwrap());
        obj.status = Some(s);
        obj.metadata.managed_fields = None;
        match api.replace_status(uid, &PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("too many conflicts".into())
}

async fn register(client: &Client, name: &str, accounts: &[(&str, &str)]) {
    let evi = EvictionInterceptor::new(
        name,
        EvictionInterceptorSpec {
            service_accounts: accounts
                .iter()
                .map(|(namespace, name)| ServiceAccountReference {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
                .collect(),
        },
    );
    Api::<EvictionInterceptor>::all(client.clone())
        .create(&PostParams::default(), &evi)
        .await
        .expect("create EvictionInterceptor");
}

/// The acceptance of issue 36: a mistyped interceptor costs the grace, not the deadline.
#[tokio::test]
async fn mistyped_interceptor_is_passed_over_after_the_grace() {
    let (client, ns) = setup("reg-typo").await;
    let typo = "db.exmaple.com";
    let p = pod("p").interceptors(&[typo]).create(&client, &ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let started = Instant::now();
    let api = create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    let s = until(T, "Evicted=True", || async {
        let s = status(&api, &uid).await;
        s.is_true("Evicted").then_some(s)
    })
    .await;
    let took = started.elapsed();
    // Well under the 10-minute deadline: the grace (3 s) and the eviction.
    assert!(took < Duration::from_secs(60), "evicted after {took:?}");
    assert_eq!(s.processed_interceptors[0], typo);
    let entry = s.interceptor(typo).unwrap();
    let activated = entry.activation_time.clone().unwrap().0;
    let imperative = s
        .interceptor("imperative-eviction.k8s.io")
        .and_then(|e| e.activation_time.clone())
        .unwrap()
        .0;
    let turn = imperative.duration_since(activated).as_secs();
    assert!(
        (3..=30).contains(&turn),
        "the mistyped interceptor's turn lasted {turn}s"
    );
    assert!(
        entry
            .message
            .as_deref()
            .is_some_and(|m| m.contains("passed over: no EvictionInterceptor registers it")),
        "{entry:?}"
    );
    let evs = until(T, "the registration events", || async {
        let evs = events(&client, &ns, &uid).await;
        let has = |r: &str| evs.iter().any(|e| e.reason.as_deref() == Some(r));
        (has("UnregisteredInterceptor") && has("InterceptorNotRegistered")).then_some(evs)
    })
    .await;
    let passed = evs
        .iter()
        .find(|e| e.reason.as_deref() == Some("InterceptorNotRegistered"))
        .unwrap();
    assert_eq!(passed.type_.as_deref(), Some("Warning"));
    assert!(
        passed
            .message
            .as_deref()
            .is_some_and(|m| m.contains(typo) && m.contains("passed over")),
        "{passed:?}"
    );
    let e = support::evictord::shared(ARGS).await;
    let series = format!(
        "evictionrequest_controller_processed_interceptor_total{{interceptor=\"{typo}\",reason=\"not_registered\"}}"
    );
    assert_eq!(e.metric(&series).await, 1.0);
    assert!(
        e.metric("evictord_unregistered_interceptors_total{source=\"activation\"}")
            .await
            >= 1.0
    );
}

/// An interceptor of the SDK: completes at once.
struct Quick;

impl Interceptor for Quick {
    fn name(&self) -> &str {
        "sdk.registration.example.com"
    }

    async fn progress(
        &self,
        _request: &EvictionRequest,
        _pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        Ok(Progress::complete("done"))
    }
}

/// The SDK's runner registers its interceptor with its service account and renews the
/// heartbeat; its writes pass rule S7; once the runner stopped, the interceptor keeps its turn
/// past the grace (a registered interceptor keeps the normal deadline: it may be restarting).
#[tokio::test]
async fn runner_registers_and_a_stopped_runner_keeps_the_deadline() {
    let (client, ns) = setup("reg-sdk").await;
    let name = Quick.name().to_string();
    let settings = Settings {
        min_heartbeat_interval: Duration::from_secs(1),
        default_deadline: Duration::from_secs(600),
        poll_interval: Duration::from_secs(1),
        ..Settings::default()
    };
    let runner_client = client_as(&sa_user(RUNNER_SA)).await;
    let runner = Runner::new(runner_client, settings)
        .namespaced(&ns)
        .service_accounts(vec![ServiceAccountReference {
            namespace: RUNNER_SA.0.into(),
            name: RUNNER_SA.1.into(),
        }])
        .renew_registration_every(Duration::from_secs(1));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.run(Quick, async move {
        let _ = stop_rx.await;
    }));
    let evis: Api<EvictionInterceptor> = Api::all(client.clone());
    let registered = until(T, "the runner's registration renewed", || async {
        let evi = evis.get_opt(&name).await.ok()??;
        evi.status.as_ref()?.heartbeat_time.as_ref()?;
        Some(evi)
    })
    .await;
    assert_eq!(
        registered.spec.service_accounts,
        [ServiceAccountReference {
            namespace: RUNNER_SA.0.into(),
            name: RUNNER_SA.1.into()
        }]
    );

    // Its writes (as its service account) are admitted: the pod is evicted through it.
    let p = pod("served")
        .interceptors(&[&name])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(&client, &ns, "served", &uid, &["test.example.com"]).await;
    let s = until(T, "Evicted=True through the SDK interceptor", || async {
        let s = status(&api, &uid).await;
        s.is_true("Evicted").then_some(s)
    })
    .await;
    assert_eq!(
        s.interceptor(&name).and_then(|e| e.message.as_deref()),
        Some("done")
    );
    assert!(s.interceptor(&name).unwrap().completion_time.is_some());

    // Renewed at least once more (its heartbeat moved), then the runner stops; its
    // registration stays. A new request waits past the grace.
    let first = registered.status.and_then(|s| s.heartbeat_time);
    until(T, "the runner's registration renewed again", || async {
        let evi = evis.get_opt(&name).await.ok()??;
        (evi.status?.heartbeat_time != first).then_some(())
    })
    .await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;

    // Each renewal (one a second here) was one PATCH of the status: the registration is read by
    // nobody, so a renewal never GETs it first (issue 44).
    let log = support::cluster()
        .await
        .request_audit
        .clone()
        .expect("audit log");
    let runner_user = sa_user(RUNNER_SA);
    let on_registration: Vec<_> = requests(&log)
        .into_iter()
        .filter(|r| r.user == runner_user && r.resource.starts_with("evictioninterceptors"))
        .map(|r| (r.verb, r.resource, r.code))
        .collect();
    let renewals = on_registration
        .iter()
        .filter(|(verb, resource, code)| {
            verb == "patch" && resource == "evictioninterceptors/status" && *code == 200
        })
        .count();
    assert!(renewals >= 2, "{on_registration:?}");
    assert!(
        !on_registration.iter().any(|(verb, _, _)| verb == "get"),
        "the runner read its registration: {on_registration:?}"
    );
    let p = pod("waiting")
        .interceptors(&[&name])
        .create(&client, &ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(&client, &ns, "waiting", &uid, &["test.example.com"]).await;
    until(T, "the stopped interceptor active", || async {
        (status(&api, &uid).await.active_interceptors == [name.clone()]).then_some(())
    })
    .await;
    // Five graces later it still has its turn.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let s = status(&api, &uid).await;
    assert_eq!(s.active_interceptors, std::slice::from_ref(&name), "{s:?}");
    assert!(s.processed_interceptors.is_empty(), "{s:?}");
    assert!(!s.is_true("Evicted"));
    let evs = events(&client, &ns, &uid).await;
    assert!(
        !evs.iter().any(|e| matches!(
            e.reason.as_deref(),
            Some("InterceptorNotRegistered" | "UnregisteredInterceptor")
        )),
        "{evs:?}"
    );
}

/// Rule S7: only the interceptor's own service accounts (and evictord) change its entry.
#[tokio::test]
async fn s7_only_the_interceptors_accounts_and_evictord_write_its_entry() {
    let (client, ns) = setup("reg-s7").await;
    let name = "guarded.registration.example.com";
    let owner = ("db", "operator");
    register(&client, name, &[owner]).await;
    // Let the webhook's cache see the registration before the request is created.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = pod("p").interceptors(&[name]).create(&client, &ns).await;
    let uid = p.metadata.uid.clone().unwrap();
    let api = create_eviction_request(&client, &ns, "p", &uid, &["test.example.com"]).await;
    // evictord's controller activated it (it wrote the registered entry's activationTime).
    let s = until(T, "the guarded interceptor active", || async {
        let s = status(&api, &uid).await;
        (s.active_interceptors == [name]).then_some(s)
    })
    .await;
    assert!(s.interceptor(name).unwrap().activation_time.is_some());

    // Another service account: denied, naming the rule and the registered accounts.
    let stranger: Api<EvictionRequest> =
        Api::namespaced(client_as("system:serviceaccount:web:deployer").await, &ns);
    let denied = try_write_entry(&stranger, &uid, name, |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
    })
    .await;
    let message = denied.expect_err("a stranger's write of the entry");
    assert!(
        message.contains("rule S7") && message.contains("db/operator"),
        "{message}"
    );
    // Completing someone else's interceptor to have the pod evicted early: denied too.
    let denied = try_write_entry(&stranger, &uid, name, |e| e.completion_time = Some(now())).await;
    assert!(denied.is_err_and(|m| m.contains("rule S7")));

    // Its own account: admitted (start, then completion).
    let own: Api<EvictionRequest> = Api::namespaced(client_as(&sa_user(owner)).await, &ns);
    try_write_entry(&own, &uid, name, |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
    })
    .await
    .expect("the interceptor's own account starts");
    try_write_entry(&own, &uid, name, |e| {
        e.completion_time = Some(now());
        e.message = Some("moved".into());
    })
    .await
    .expect("the interceptor's own account completes");

    // evictord hands over, evicts as imperative-eviction.k8s.io (its own entry), and concludes.
    let s = until(T, "Evicted=True", || async {
        let s = status(&api, &uid).await;
        s.is_true("Evicted").then_some(s)
    })
    .await;
    assert_eq!(s.processed_interceptors[0], name);
    assert_eq!(
        s.interceptor(name).and_then(|e| e.message.as_deref()),
        Some("moved")
    );
}

/// R1 through kube-apiserver, the printer columns, and rule P8's warning through `kubectl`.
#[tokio::test]
async fn registration_rules_and_pod_warning_through_kubectl() {
    let (client, ns) = setup("reg-kubectl").await;
    let c = support::cluster().await;
    let reserved = Api::<EvictionInterceptor>::all(client.clone())
        .create(
            &PostParams::default(),
            &EvictionInterceptor::new("imperative-eviction.k8s.io", Default::default()),
        )
        .await;
    assert!(
        reserved
            .as_ref()
            .is_err_and(|e| e.to_string().contains("rule R1")),
        "{reserved:?}"
    );
    let out = kubectl(c, &["get", "evi", "deployment.apps.k8s.io"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("SERVICE ACCOUNTS") && text.contains("LAST HEARTBEAT"),
        "{text}"
    );

    let manifest = serde_json::to_string(
        &pod("typo")
            .interceptors(&["db.exmaple.com", "deployment.apps.k8s.io"])
            .build(),
    )
    .unwrap();
    let out = kubectl(c, &["create", "-n", &ns, "-f", "-"], Some(&manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the pod is never denied for it: {stderr}"
    );
    assert!(
        stderr.contains("Warning: interceptor \"db.exmaple.com\" is not registered")
            && stderr.contains("rule P8")
            && stderr.contains("passed over 3s after it becomes active"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("deployment.apps.k8s.io\" is not registered"),
        "evictord's own interceptor registered itself: {stderr}"
    );
}
