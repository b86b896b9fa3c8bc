//! Rows of S7 and of the registration proof of S2, per `--interceptor-registration` mode.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;
use rstest::rstest;

use super::super::fixtures::*;
use super::super::review_eviction_request;
use crate::admission::{Settings, Verdict};
use crate::api::{
    CONDITION_EVICTED, EvictionInterceptor, EvictionInterceptorSpec, RegistrationMode,
    ServiceAccountReference,
};
use crate::cluster::StaticView;

const OWN: &str = "system:serviceaccount:evictord:evictord";
const RUNNER: &str = "system:serviceaccount:db:operator";
const OTHER: &str = "system:serviceaccount:web:deployer";

/// Which registrations the view knows.
#[derive(Clone, Copy, Debug)]
enum Known {
    /// `a.example.com` is registered to `db/operator`.
    ARegistered,
    /// No EvictionInterceptor exists.
    None,
    /// Registrations are unknown (offline, cache not synced).
    Unknown,
}

fn view(known: Known) -> StaticView {
    let registered = EvictionInterceptor::new(
        A,
        EvictionInterceptorSpec {
            service_accounts: vec![ServiceAccountReference {
                namespace: "db".into(),
                name: "operator".into(),
            }],
        },
    );
    let complete = StaticView::with_objects([], [], [], []);
    match known {
        Known::ARegistered => complete.with_interceptors([registered]),
        Known::None => complete.with_interceptors([]),
        Known::Unknown => complete,
    }
}

fn settings(mode: RegistrationMode) -> Settings {
    Settings {
        interceptor_registration: mode,
        unregistered_interceptor_grace: Duration::from_secs(60),
        own_user: Some(OWN.into()),
        ..Settings::default()
    }
}

fn review(
    old: StatusBuilder,
    new: StatusBuilder,
    user: &str,
    known: Known,
    mode: RegistrationMode,
) -> Verdict {
    let old = request(UID).status(old).build();
    let new = request(UID).status(new).build();
    let user = UserInfo {
        username: Some(user.into()),
        ..UserInfo::default()
    };
    let req = review_request(
        Operation::Update,
        Some("status"),
        Some(&old),
        Some(&new),
        &user,
    );
    review_eviction_request(&req, &view(known), &settings(mode))
}

/// `a` active since `secs` seconds, never started (an interceptor that does not run).
fn a_active(secs: i64) -> StatusBuilder {
    initialized().active(&[A]).activated(A, secs)
}

/// The controller's hand-over of `a` (active since `secs`) to `b`.
fn handed_over(secs: i64) -> StatusBuilder {
    a_active(secs).processed(&[A]).active(&[B]).activated(B, 0)
}

use RegistrationMode::{Enforce, Off, Warn};

#[rstest]
#[case::s2_not_registered_after_grace_allowed(-61, OWN, Known::None, Enforce, Expect::Allow)]
#[case::s2_not_registered_at_grace_within_skew_allowed(-50, OWN, Known::None, Enforce, Expect::Allow)]
#[case::s2_not_registered_unknown_after_grace_warns(
    -61,
    OWN,
    Known::Unknown,
    Enforce,
    Expect::Warn("whether an EvictionInterceptor registers it is unknown")
)]
#[case::s2_not_registered_by_anyone_allowed(-61, OTHER, Known::None, Enforce, Expect::Allow)]
#[case::s2_not_registered_within_grace_denied(
    -49,
    OWN,
    Known::None,
    Enforce,
    Expect::Deny("\"a.example.com\" cannot be deactivated yet (rule S2)")
)]
#[case::s2_unknown_within_grace_denied(
    -49,
    OWN,
    Known::Unknown,
    Enforce,
    Expect::Deny("cannot be deactivated yet (rule S2)")
)]
#[case::s2_registered_keeps_its_deadline_denied(
    -61,
    OWN,
    Known::ARegistered,
    Enforce,
    Expect::Deny("cannot be deactivated yet (rule S2)")
)]
#[case::s2_warn_mode_keeps_the_deadline_denied(
    -61,
    OWN,
    Known::None,
    Warn,
    Expect::Deny("cannot be deactivated yet (rule S2)")
)]
#[case::s2_off_mode_keeps_the_deadline_denied(
    -61,
    OWN,
    Known::None,
    Off,
    Expect::Deny("cannot be deactivated yet (rule S2)")
)]
fn s2_registration_proof(
    #[case] activated: i64,
    #[case] user: &str,
    #[case] known: Known,
    #[case] mode: RegistrationMode,
    #[case] expect: Expect,
) {
    check(
        &review(
            a_active(activated),
            handed_over(activated),
            user,
            known,
            mode,
        ),
        expect,
    );
}

/// The deny message names the grace only when it applies.
#[test]
fn s2_denial_mentions_the_grace_under_enforce_only() {
    let deny = |mode| {
        review(a_active(-10), handed_over(-10), OWN, Known::None, mode)
            .denied
            .unwrap()
    };
    assert!(deny(Enforce).contains("for the grace after its activation"));
    assert!(!deny(Warn).contains("grace"));
}

/// `a` running (registered or not), and its next heartbeat.
fn a_running() -> StatusBuilder {
    initialized().a_running(-600)
}

fn a_heartbeat() -> StatusBuilder {
    a_running().heartbeat(A, 0)
}

#[rstest]
#[case::s7_own_service_account_allowed(RUNNER, Known::ARegistered, Enforce, Expect::Allow)]
#[case::s7_evictord_allowed(OWN, Known::ARegistered, Enforce, Expect::Allow)]
#[case::s7_other_account_denied(
    OTHER,
    Known::ARegistered,
    Enforce,
    Expect::Deny(
        "user \"system:serviceaccount:web:deployer\" may not change status.interceptors[0] (a.example.com) (rule S7): the EvictionInterceptor a.example.com registers the service accounts [db/operator]"
    )
)]
#[case::s7_user_not_a_service_account_denied(
    "alice",
    Known::ARegistered,
    Enforce,
    Expect::Deny("(rule S7)")
)]
#[case::s7_unregistered_anyone_allowed(OTHER, Known::None, Enforce, Expect::Allow)]
#[case::s7_unknown_warns(
    OTHER,
    Known::Unknown,
    Enforce,
    Expect::Warn(
        "rule S7 not checked: whether an EvictionInterceptor registers a.example.com is unknown"
    )
)]
#[case::s7_warn_mode_allowed(OTHER, Known::ARegistered, Warn, Expect::Allow)]
#[case::s7_off_mode_allowed(OTHER, Known::ARegistered, Off, Expect::Allow)]
fn s7_heartbeat_of_a(
    #[case] user: &str,
    #[case] known: Known,
    #[case] mode: RegistrationMode,
    #[case] expect: Expect,
) {
    check(
        &review(a_running(), a_heartbeat(), user, known, mode),
        expect,
    );
}

/// The completion a stranger would write to have the pod evicted early: denied.
#[test]
fn s7_completion_by_a_stranger_denied() {
    let v = review(
        a_running(),
        a_running().completed(A, 0),
        OTHER,
        Known::ARegistered,
        Enforce,
    );
    check(&v, Expect::Deny("(rule S7)"));
}

/// Writes that change no entry (the controller's hand-over after completion, a writer that
/// sends back what it read, a typed client's empty messages) need no account.
#[rstest]
#[case::s7_unchanged_entries_allowed(a_running(), a_running().observed(2))]
#[case::s7_handover_after_completion_allowed(
    a_running().completed(A, -5),
    a_running().completed(A, -5).processed(&[A]).active(&[B])
)]
fn s7_no_entry_changed(#[case] old: StatusBuilder, #[case] new: StatusBuilder) {
    check(
        &review(old, new, OTHER, Known::ARegistered, Enforce),
        Expect::Allow,
    );
}

/// The controller activates a registered interceptor (its activationTime): evictord's own write.
#[rstest]
#[case::s7_activation_by_evictord_allowed(OWN, Expect::Allow)]
#[case::s7_activation_by_another_denied(OTHER, Expect::Deny("(rule S7)"))]
fn s7_activation_time(#[case] user: &str, #[case] expect: Expect) {
    check(
        &review(
            initialized(),
            initialized().active(&[A]).activated(A, 0),
            user,
            Known::ARegistered,
            Enforce,
        ),
        expect,
    );
}

/// `imperative-eviction.k8s.io` is evictord: only evictord writes its entry.
#[rstest]
#[case::s7_imperative_by_evictord_allowed(OWN, Expect::Allow)]
#[case::s7_imperative_by_another_denied(
    RUNNER,
    Expect::Deny(
        "imperative-eviction.k8s.io is evictord itself, and only evictord writes its entry"
    )
)]
fn s7_imperative_entry(#[case] user: &str, #[case] expect: Expect) {
    let running = initialized()
        .processed(&[A, B])
        .active(&[IMP])
        .activated(IMP, -100)
        .started(IMP, -100)
        .heartbeat(IMP, -100);
    check(
        &review(
            running.clone(),
            running
                .completed(IMP, 0)
                .active(&[])
                .condition(CONDITION_EVICTED, "True"),
            user,
            Known::None,
            Enforce,
        ),
        expect,
    );
}

/// Without evictord's own user name, no write counts as evictord's.
#[test]
fn s7_without_own_user_nobody_is_evictord() {
    let old = request(UID).status(a_running()).build();
    let new = request(UID).status(a_heartbeat()).build();
    let user = UserInfo {
        username: Some(OWN.into()),
        ..UserInfo::default()
    };
    let req = review_request(
        Operation::Update,
        Some("status"),
        Some(&old),
        Some(&new),
        &user,
    );
    let v = review_eviction_request(
        &req,
        &view(Known::ARegistered),
        &Settings {
            own_user: None,
            ..settings(Enforce)
        },
    );
    check(&v, Expect::Deny("(rule S7)"));
}
