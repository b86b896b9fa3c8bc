//! One row per rule of the bridge (SPEC 5.1; rule ids B1–B7 as
//! docs/src/reference/admission-rules.md names them).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use k8s_openapi::api::authentication::v1::UserInfo;

use super::*;
use crate::admission::eviction_request::fixtures::{
    A, IMP, NS, StatusBuilder, UID, at, now, pod, request, status,
};
use crate::api::INTERCEPTORS_ANNOTATION;

fn annotated() -> CachedPod {
    let mut p = pod("p1", UID);
    p.metadata.annotations = Some(BTreeMap::from([(
        INTERCEPTORS_ANNOTATION.to_string(),
        A.to_string(),
    )]));
    p
}

fn admin() -> UserInfo {
    UserInfo {
        username: Some("admin".into()),
        ..Default::default()
    }
}

struct Case {
    dry_run: bool,
    acting_for: Option<&'static str>,
    pod: Lookup<Arc<CachedPod>>,
    request: Lookup<Arc<EvictionRequest>>,
}

fn case(pod: CachedPod) -> Case {
    Case {
        dry_run: false,
        acting_for: None,
        pod: Lookup::Found(Arc::new(pod)),
        request: Lookup::Missing,
    }
}

impl Case {
    fn request(mut self, r: EvictionRequest) -> Self {
        self.request = Lookup::Found(Arc::new(r));
        self
    }
    fn call<'a>(&self, user: &'a UserInfo) -> EvictionCall<'a> {
        EvictionCall {
            namespace: NS,
            pod_name: "p1",
            user,
            dry_run: self.dry_run,
            acting_for: self.acting_for,
            now: now(),
        }
    }
    fn decide(&self) -> BridgeDecision {
        let user = admin();
        review_pod_eviction(
            &self.call(&user),
            &self.pod,
            &self.request,
            &Settings::default(),
        )
    }
    /// [`confirm_live`] for the call this case decides as `d`.
    fn confirm(&self, d: &BridgeDecision) -> bool {
        let user = admin();
        confirm_live(&self.call(&user), &self.pod, d)
    }
}

fn with_bridge(s: StatusBuilder, last_call_secs: i64, caller: &str) -> EvictionRequest {
    let mut r = request(UID)
        .requesters(&[A, EVICTION_API_REQUESTER])
        .status(s)
        .build();
    r.metadata.annotations = Some(BTreeMap::from([
        (
            EVICTION_API_LAST_CALL_ANNOTATION.to_string(),
            at(last_call_secs).0.to_string(),
        ),
        (
            EVICTION_API_CALLER_ANNOTATION.to_string(),
            caller.to_string(),
        ),
    ]));
    r
}

fn imperative_active() -> StatusBuilder {
    status()
        .target(&[A, IMP])
        .processed(&[A])
        .active(&[IMP])
        .activated(IMP, -30)
        .started(IMP, -30)
        .heartbeat(IMP, -30)
}

#[test]
fn b1_pod_without_interceptors_is_allowed() {
    let d = case(pod("p1", UID)).decide();
    assert_eq!(d.outcome, Outcome::NoInterceptors);
    assert!(d.too_many_requests.is_none() && d.write.is_none() && d.event.is_none());
}

#[test]
fn b1_unknown_or_missing_pod_is_allowed() {
    let mut c = case(annotated());
    c.pod = Lookup::Unknown;
    assert_eq!(c.decide().outcome, Outcome::Unknown);
    c.pod = Lookup::Missing;
    assert_eq!(c.decide().outcome, Outcome::PodNotFound);
    assert!(c.decide().too_many_requests.is_none());
}

#[test]
fn b2_terminating_pod_is_allowed() {
    let mut p = annotated();
    p.metadata.deletion_timestamp = Some(at(-5));
    let d = case(p).decide();
    assert_eq!(d.outcome, Outcome::Terminating);
    assert!(d.too_many_requests.is_none());
}

#[test]
fn b3_evicted_request_is_allowed() {
    let r = request(UID)
        .status(status().target(&[A, IMP]).condition("Evicted", "True"))
        .build();
    let d = case(annotated()).request(r).decide();
    assert_eq!(d.outcome, Outcome::AlreadyEvicted);
    assert!(d.write.is_none());
}

#[test]
fn b4_first_call_creates_the_request_and_answers_429() {
    let d = case(annotated()).decide();
    assert_eq!(d.outcome, Outcome::Intercepted);
    let msg = d.too_many_requests.expect("429");
    assert!(
        msg.starts_with("Eviction triggered: EvictionRequest ns/"),
        "{msg}"
    );
    assert!(msg.contains(UID) && msg.contains("pod ns/p1"), "{msg}");
    assert!(
        msg.contains("interceptors a.example.com take turns first"),
        "{msg}"
    );
    let Some(BridgeWrite::Apply(r)) = d.write else {
        panic!("expected an apply, got {:?}", d.write)
    };
    assert_eq!(r.metadata.name.as_deref(), Some(UID));
    assert_eq!(r.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(r.spec.target.pod.uid, UID);
    assert_eq!(r.spec.target.pod.name, "p1");
    assert_eq!(r.spec.requesters[0].name, EVICTION_API_REQUESTER);
    let a = r.metadata.annotations.as_ref().unwrap();
    assert_eq!(a[EVICTION_API_CALLER_ANNOTATION], "user admin");
    assert_eq!(
        a[EVICTION_API_LAST_CALL_ANNOTATION]
            .parse::<Timestamp>()
            .unwrap(),
        now()
    );
    assert!(r.status.is_none());
    let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Pod", UID),
        "removed with its pod"
    );
    let e = d.event.expect("event on the pod");
    assert_eq!(e.reason, REASON_EVICTION_INTERCEPTED);
    assert!(e.message.contains("user admin"), "{}", e.message);
}

#[test]
fn b4_call_joins_an_existing_request_of_another_requester() {
    let r = request(UID)
        .status(status().target(&[A, IMP]).active(&[A]).activated(A, -90))
        .build();
    let d = case(annotated()).request(r).decide();
    assert!(matches!(d.write, Some(BridgeWrite::Apply(_))));
    assert!(d.event.is_some(), "joining is news for the pod");
    let msg = d.too_many_requests.unwrap();
    assert!(
        msg.contains("interceptor a.example.com active since 2029-12-31T23:58:30Z (90s ago)"),
        "{msg}"
    );
}

#[test]
fn b4_repeated_calls_write_only_when_the_record_is_stale() {
    let s = status()
        .target(&[A, IMP])
        .active(&[A])
        .activated(A, -90)
        .started(A, -80)
        .heartbeat(A, -20)
        .message(A, "copying 3/5 shards");
    let fresh = with_bridge(s.clone(), -30, "user admin");
    let d = case(annotated()).request(fresh).decide();
    assert_eq!(d.outcome, Outcome::Intercepted);
    assert!(
        d.write.is_none(),
        "last call 30 s ago, refresh interval 60 s"
    );
    assert!(d.event.is_none());
    let msg = d.too_many_requests.unwrap();
    assert!(msg.contains("since 2029-12-31T23:58:40Z (80s ago), last heartbeat 2029-12-31T23:59:40Z (20s ago) (\"copying 3/5 shards\")"), "{msg}");

    let stale = with_bridge(s.clone(), -61, "user admin");
    assert!(matches!(
        case(annotated()).request(stale).decide().write,
        Some(BridgeWrite::Apply(_))
    ));
    let other_caller = with_bridge(s, -5, "descheduler (x)");
    let d = case(annotated()).request(other_caller).decide();
    assert!(
        matches!(d.write, Some(BridgeWrite::Apply(_))),
        "a new caller is recorded at once"
    );
    assert!(d.event.is_none(), "already a requester");
}

#[test]
fn b4_canceled_request_is_replaced() {
    let mut r = request(UID)
        .status(status().target(&[A, IMP]).condition("Canceled", "True"))
        .build();
    r.metadata.uid = Some("old-request-uid".into());
    let d = case(annotated()).request(r).decide();
    let Some(BridgeWrite::Replace { old_uid, request }) = d.write else {
        panic!("expected a replace, got {:?}", d.write)
    };
    assert_eq!(old_uid, "old-request-uid");
    assert_eq!(request.spec.requesters[0].name, EVICTION_API_REQUESTER);
    assert!(d.too_many_requests.unwrap().contains("take turns first"));
}

#[test]
fn b4_request_of_a_previous_pod_with_the_same_name_is_ignored() {
    // Requests are named after the pod UID, so a request found for this name always targets
    // this pod; a stale cache entry with another target is treated as absent.
    let r = request(UID).target_uid("someone-else").build();
    let d = case(annotated()).request(r).decide();
    assert!(matches!(d.write, Some(BridgeWrite::Apply(_))));
}

#[test]
fn b5_own_call_while_imperative_is_active_is_allowed() {
    let r = with_bridge(imperative_active(), -5, "user admin");
    let mut c = case(annotated()).request(r);
    c.acting_for = Some(UID);
    assert_eq!(c.decide().outcome, Outcome::OwnEviction);
    assert!(c.decide().too_many_requests.is_none());
}

#[test]
fn b5_others_while_imperative_is_active_get_429_with_its_progress() {
    let r = with_bridge(
        imperative_active().message(
            IMP,
            "Could not evict a pod due to failing eviction requests, number of retries: 3",
        ),
        -5,
        "user admin",
    );
    let d = case(annotated()).request(r).decide();
    assert_eq!(d.outcome, Outcome::Intercepted);
    let msg = d.too_many_requests.unwrap();
    assert!(
        msg.contains("imperative-eviction.k8s.io is evicting it"),
        "{msg}"
    );
    assert!(msg.contains("number of retries: 3"), "{msg}");
}

#[test]
fn b5_marker_does_not_pass_before_the_imperative_turn() {
    let r = request(UID)
        .status(status().target(&[A, IMP]).active(&[A]).activated(A, -5))
        .build();
    let mut c = case(annotated()).request(r);
    c.acting_for = Some(UID);
    assert_eq!(c.decide().outcome, Outcome::Intercepted);
}

#[test]
fn b5_own_call_on_a_cache_behind_the_activation_is_confirmed_live() {
    // The cache still shows the previous interceptor active (or no request yet): the call is
    // decided again on the request read live, which shows the imperative interceptor active.
    let behind = request(UID)
        .status(status().target(&[A, IMP]).active(&[A]).activated(A, -5))
        .build();
    for (what, cached) in [
        (
            "the previous interceptor active",
            Lookup::Found(Arc::new(behind)),
        ),
        ("no request yet", Lookup::Missing),
    ] {
        let mut c = case(annotated());
        c.acting_for = Some(UID);
        c.request = cached;
        let d = c.decide();
        assert!(c.confirm(&d), "{what}: not confirmed live");
        c.request = Lookup::Found(Arc::new(with_bridge(imperative_active(), -5, "user admin")));
        assert_eq!(c.decide().outcome, Outcome::OwnEviction, "{what}");
    }
}

#[test]
fn b5_only_a_call_naming_the_pods_request_is_confirmed_live() {
    let behind = request(UID)
        .status(status().target(&[A, IMP]).active(&[A]).activated(A, -5))
        .build();
    let rows: [(&str, Option<&'static str>, EvictionRequest, bool); 4] = [
        ("another client's call", None, behind.clone(), false),
        (
            "a marker naming another request",
            Some("other-uid"),
            behind.clone(),
            false,
        ),
        ("evictord's own call, cache behind", Some(UID), behind, true),
        (
            "evictord's own call, cache up to date",
            Some(UID),
            with_bridge(imperative_active(), -5, "user admin"),
            false,
        ),
    ];
    for (what, acting_for, cached, expected) in rows {
        let mut c = case(annotated()).request(cached);
        c.acting_for = acting_for;
        assert_eq!(c.confirm(&c.decide()), expected, "{what}");
    }
    let mut gone = case(annotated());
    gone.acting_for = Some(UID);
    gone.pod = Lookup::Missing;
    assert!(
        !gone.confirm(&gone.decide()),
        "a missing pod is never read again"
    );
}

#[test]
fn b6_dry_run_writes_nothing_and_says_what_would_happen() {
    let mut c = case(annotated());
    c.dry_run = true;
    let d = c.decide();
    assert_eq!(d.outcome, Outcome::DryRun);
    assert!(d.write.is_none() && d.too_many_requests.is_none() && d.event.is_none());
    assert!(
        d.warnings[0].starts_with("dry run: evictord would create EvictionRequest ns/"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn refresh_interval_is_a_tenth_of_the_ttl_within_bounds() {
    for (ttl, expected) in [(600, 60), (3600, 60), (60, 6), (5, 1)] {
        assert_eq!(
            refresh_interval(Duration::from_secs(ttl)),
            Duration::from_secs(expected),
            "ttl {ttl}"
        );
    }
}

#[test]
fn last_call_reads_the_annotation() {
    let r = with_bridge(status(), -42, "user admin");
    assert_eq!(
        r.eviction_api_last_call(),
        Some(now() - SignedDuration::from_secs(42))
    );
    assert_eq!(request(UID).build().eviction_api_last_call(), None);
}

#[test]
fn b4_the_applied_intent_is_a_complete_object_without_status() {
    // Server-side apply needs apiVersion and kind, and must not claim any status field.
    let d = case(annotated()).decide();
    let Some(BridgeWrite::Apply(r)) = d.write else {
        panic!("expected an apply")
    };
    let v = serde_json::to_value(&*r).unwrap();
    assert_eq!(v["apiVersion"], "evictord.dev/v1alpha1");
    assert_eq!(v["kind"], "EvictionRequest");
    assert!(v.get("status").is_none_or(|s| s.is_null()), "{v}");
    assert_eq!(
        v["spec"]["requesters"],
        serde_json::json!([{"name": EVICTION_API_REQUESTER}])
    );
}

#[test]
fn b4_every_write_carries_the_pod_labels_so_the_controller_patches_none() {
    let labels = BTreeMap::from([
        ("app".to_string(), "web".to_string()),
        ("tier".to_string(), "front".to_string()),
    ]);
    let labeled = || {
        let mut p = annotated();
        p.metadata.labels = Some(labels.clone());
        p
    };
    let mut canceled = request(UID)
        .status(status().target(&[A, IMP]).condition("Canceled", "True"))
        .build();
    canceled.metadata.uid = Some("old-request-uid".into());
    let joined = request(UID)
        .status(status().target(&[A, IMP]).active(&[A]).activated(A, -90))
        .build();
    let rows = [
        ("create", case(labeled()), Some(&labels)),
        ("join", case(labeled()).request(joined), Some(&labels)),
        ("replace", case(labeled()).request(canceled), Some(&labels)),
        ("create, pod without labels", case(annotated()), None),
    ];
    for (name, c, want) in rows {
        let (BridgeWrite::Apply(r) | BridgeWrite::Replace { request: r, .. }) =
            c.decide().write.expect("a write");
        assert_eq!(r.metadata.labels.as_ref(), want, "{name}");
        let pod = c.pod.found().expect("pod");
        let decision =
            crate::controller::eviction_request::decide(&r, Some(pod), now(), &Default::default());
        assert_eq!(
            decision.labels, None,
            "{name}: labels patched after the write"
        );
    }
}

/// Every outcome is reported under a label the metrics create at zero.
#[test]
fn outcome_labels_are_the_zeroed_ones() {
    use super::Outcome::*;
    for o in [
        NoInterceptors,
        PodNotFound,
        Unknown,
        Terminating,
        AlreadyEvicted,
        OwnEviction,
        DryRun,
        Intercepted,
    ] {
        assert!(
            crate::metrics::EVICTION_API_OUTCOMES.contains(&o.label()),
            "{o:?}"
        );
    }
}
