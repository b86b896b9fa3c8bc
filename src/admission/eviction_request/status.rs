//! UPDATE of the `status` subresource of an EvictionRequest: rules S1–S3, S5 and S6 (SPEC 2.2);
//! S4 (the `interceptors[]` entries) lives in [`super::status_interceptors`], S7 and the
//! registration proof of S2 (SPEC 5.5) in [`super::status_registration`].
//!
//! The status is written by the controller (first sight, selection, hand-off, conditions, the
//! imperative interceptor) and by the active interceptor (its own entry). No authorization check
//! runs here: RBAC on the `status` subresource covers these writes, and under
//! `--interceptor-registration=enforce` rule S7 says whose writes change which entry.

use std::collections::BTreeSet;

use jiff::Timestamp;

use super::status_interceptors::{s4_interceptors, target_names};
use super::status_registration::{NotRegistered, not_registered_proof, s7_entry_writers};
use super::{apply, heartbeat_deadline_at};
use crate::admission::names::{k8s_io_interceptor_allowed, validate_fqdn};
use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::{
    CONDITION_CANCELED, CONDITION_EVICTED, EvictionRequest, EvictionRequestStatus,
    IMPERATIVE_INTERCEPTOR, InterceptorStatus, MAX_INTERCEPTORS,
};
use crate::cluster::ClusterView;

pub(super) fn review(
    req: &ReviewRequest<'_, EvictionRequest>,
    old: &EvictionRequest,
    new: &EvictionRequest,
    view: &dyn ClusterView,
    settings: &Settings,
) -> Verdict {
    let empty = EvictionRequestStatus::default();
    let was = old.status.as_ref().unwrap_or(&empty);
    let is = new.status.as_ref().unwrap_or(&empty);
    let mut verdict = Verdict::allow();
    apply(&mut verdict, s1_target_interceptors(was, is, settings));
    let s2 = S2 {
        old,
        now: req.now,
        view,
        settings,
    };
    match s2.active_interceptor(was, is) {
        Ok(Some(warning)) => verdict.warn(warning),
        other => apply(&mut verdict, other.map(|_| ())),
    }
    apply(&mut verdict, s3_processed_interceptors(was, is));
    apply(&mut verdict, s4_interceptors(was, is, req.now, settings));
    apply(&mut verdict, s5_final_conditions(was, is));
    apply(&mut verdict, s6_monotonic(was, is));
    let (s7, warnings) = s7_entry_writers(req.user, was, is, view, settings);
    apply(&mut verdict, s7);
    for w in warnings {
        verdict.warn(w);
    }
    verdict
}

/// S1: `targetInterceptors` is immutable once set; when set, its names are unique allowlisted
/// FQDNs, at most 16, ending with the imperative interceptor. A list already stored is not
/// validated again (a later change of the allowlist must not block status updates).
fn s1_target_interceptors(
    was: &EvictionRequestStatus,
    is: &EvictionRequestStatus,
    settings: &Settings,
) -> Result<(), String> {
    if !was.target_interceptors.is_empty() {
        if was.target_interceptors == is.target_interceptors {
            return Ok(());
        }
        return Err(format!(
            "status.targetInterceptors is immutable once set (rule S1): it is {:?} and cannot become {:?}",
            target_names(was),
            target_names(is)
        ));
    }
    let targets = target_names(is);
    let Some(last) = targets.len().checked_sub(1) else {
        return Ok(());
    };
    if targets.len() > MAX_INTERCEPTORS {
        return Err(format!(
            "status.targetInterceptors has {} entries; at most {MAX_INTERCEPTORS} are allowed (rule S1): 15 \
             from the pod and {IMPERATIVE_INTERCEPTOR}",
            targets.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, name) in targets.iter().enumerate() {
        validate_fqdn(name).map_err(|problem| {
            format!("status.targetInterceptors[{i}].name: {problem} (rule S1)")
        })?;
        if !seen.insert(*name) {
            return Err(format!(
                "status.targetInterceptors[{i}].name {name:?} is listed twice (rule S1)"
            ));
        }
        if !k8s_io_interceptor_allowed(name, &settings.extra_k8s_io_interceptors, i == last) {
            return Err(not_allowlisted(i, name));
        }
    }
    if targets[last] != IMPERATIVE_INTERCEPTOR {
        return Err(format!(
            "status.targetInterceptors must end with {IMPERATIVE_INTERCEPTOR} (rule S1): the default \
             interceptor always comes last; append it"
        ));
    }
    Ok(())
}

fn not_allowlisted(i: usize, name: &str) -> String {
    if name == IMPERATIVE_INTERCEPTOR {
        format!(
            "status.targetInterceptors[{i}]: {IMPERATIVE_INTERCEPTOR} may only be the last interceptor (rule S1)"
        )
    } else {
        format!(
            "status.targetInterceptors[{i}].name {name:?} is under k8s.io but not in the allowlist (rule S1); \
             use a name of your own domain, or ask the operator to add it to the allowlist"
        )
    }
}

/// What rule S2 reads besides the two statuses.
struct S2<'a> {
    old: &'a EvictionRequest,
    now: Timestamp,
    view: &'a dyn ClusterView,
    settings: &'a Settings,
}

/// A passed S2 check, with a warning when a proof rested on an unknown registration.
type S2Outcome = Result<Option<String>, String>;

impl S2<'_> {
    /// S2: at most one active interceptor, a member of `targetInterceptors`, changing only along
    /// the allowed transitions.
    fn active_interceptor(
        &self,
        was: &EvictionRequestStatus,
        is: &EvictionRequestStatus,
    ) -> S2Outcome {
        if is.active_interceptors.len() > 1 {
            return Err(format!(
                "status.activeInterceptors lists {:?}; at most one interceptor is active at a time (rule S2)",
                is.active_interceptors
            ));
        }
        let targets = target_names(is);
        if let Some(y) = is
            .active_interceptors
            .first()
            .filter(|y| !targets.contains(&y.as_str()))
        {
            return Err(format!(
                "status.activeInterceptors: {y:?} is not in status.targetInterceptors {targets:?} (rule S2)"
            ));
        }
        match (was.active_interceptors.first(), is.active_interceptors.first()) {
            (x, y) if x == y => Ok(None),
            (None, Some(y)) => s2_activate_next(was, &targets, y).map(|()| None),
            (Some(x), Some(y)) => {
                s2_follows(&targets, x, y)?;
                self.handed_off(was, is, x)
            }
            (Some(_), None) if is.is_terminal() => Ok(None),
            (Some(x), None) => self.handed_off(was, is, x).map_err(|reason| {
                format!(
                    "{reason}; the active interceptor can only be cleared this way or when the request is \
                     Evicted or Canceled"
                )
            }),
            (None, None) => Ok(None),
        }
    }

    /// The proof that `x` may stop being active: it is appended to `processedInterceptors` in
    /// this update, and it had completed or its heartbeat had expired (with the clock skew in its
    /// favour of the writer, so that a controller whose clock runs slightly ahead is not
    /// refused) or, under `--interceptor-registration=enforce`, nothing registers it and the
    /// grace since its activation has passed.
    fn handed_off(
        &self,
        was: &EvictionRequestStatus,
        is: &EvictionRequestStatus,
        x: &str,
    ) -> S2Outcome {
        let appended = is.processed_interceptors.len() == was.processed_interceptors.len() + 1
            && is.processed_interceptors.last().map(String::as_str) == Some(x);
        if !appended {
            return Err(format!(
                "status.activeInterceptors: {x:?} must be appended to status.processedInterceptors in the same \
                 update that deactivates it (rule S2)"
            ));
        }
        let entry = was
            .interceptor(x)
            .cloned()
            .unwrap_or_else(|| InterceptorStatus {
                name: x.to_string(),
                ..InterceptorStatus::default()
            });
        if entry.completion_time.is_some() {
            return Ok(None);
        }
        let (old, now, settings) = (self.old, self.now, self.settings);
        let deadline = heartbeat_deadline_at(old, &entry, settings.interceptor_deadline);
        let skewed_now = now
            .checked_add(settings.clock_skew)
            .unwrap_or(Timestamp::MAX);
        if skewed_now >= deadline {
            return Ok(None);
        }
        match not_registered_proof(old, &entry, now, self.view, settings) {
            Some(NotRegistered::Confirmed) => return Ok(None),
            Some(NotRegistered::Unknown(warning)) => return Ok(Some(warning)),
            None => {}
        }
        Err(format!(
            "status.activeInterceptors: {x:?} cannot be deactivated yet (rule S2): its status.interceptors entry \
             has no completionTime and its heartbeat deadline {deadline} has not passed (now {now}); wait for \
             the interceptor to complete or for the deadline{}",
            if settings.interceptor_registration.enforces() {
                " (or, if no EvictionInterceptor registers it, for the grace after its activation)"
            } else {
                ""
            }
        ))
    }
}

/// `[] → [t[k]]` with `k = len(processedInterceptors)`.
fn s2_activate_next(was: &EvictionRequestStatus, targets: &[&str], y: &str) -> Result<(), String> {
    let k = was.processed_interceptors.len();
    match targets.get(k) {
        Some(next) if *next == y => Ok(()),
        next => Err(format!(
            "status.activeInterceptors: cannot activate {y:?} (rule S2): the next unprocessed interceptor \
             is {} (targetInterceptors[{k}], after {k} processed)",
            next.map_or_else(|| "none".to_string(), |n| format!("{n:?}"))
        )),
    }
}

/// `[x] → [y]` requires `y` right after `x` in `targetInterceptors`.
fn s2_follows(targets: &[&str], x: &str, y: &str) -> Result<(), String> {
    let next = targets
        .iter()
        .position(|t| *t == x)
        .and_then(|i| targets.get(i + 1));
    if next == Some(&y) {
        return Ok(());
    }
    Err(format!(
        "status.activeInterceptors: cannot switch from {x:?} to {y:?} (rule S2): only the interceptor \
         right after {x:?} in status.targetInterceptors ({}) may follow it",
        next.map_or_else(|| "none".to_string(), |n| format!("{n:?}"))
    ))
}

/// S3: `processedInterceptors` only grows, by interceptors that were active, in the order of
/// `targetInterceptors`, without duplicates.
fn s3_processed_interceptors(
    was: &EvictionRequestStatus,
    is: &EvictionRequestStatus,
) -> Result<(), String> {
    let (old, new) = (&was.processed_interceptors, &is.processed_interceptors);
    if !new.starts_with(old) {
        return Err(format!(
            "status.processedInterceptors is append-only (rule S3): the stored list {old:?} must be a prefix \
             of the new one {new:?}"
        ));
    }
    if let Some(name) = new[old.len()..]
        .iter()
        .find(|n| was.active_interceptors.first() != Some(*n))
    {
        return Err(format!(
            "status.processedInterceptors: {name:?} was not the active interceptor (rule S3); only the \
             interceptor in status.activeInterceptors ({:?}) may be appended",
            was.active_interceptors
        ));
    }
    let targets = target_names(is);
    let mut previous: Option<usize> = None;
    for name in new {
        let Some(index) = targets.iter().position(|t| t == name) else {
            return Err(format!(
                "status.processedInterceptors: {name:?} is not in status.targetInterceptors {targets:?} (rule S3)"
            ));
        };
        match previous {
            Some(p) if p == index => {
                return Err(format!(
                    "status.processedInterceptors lists {name:?} twice (rule S3)"
                ));
            }
            Some(p) if p > index => {
                return Err(format!(
                    "status.processedInterceptors: {name:?} is out of order (rule S3): the list must follow \
                     the order of status.targetInterceptors {targets:?}"
                ));
            }
            _ => previous = Some(index),
        }
    }
    Ok(())
}

/// S5: `Evicted` and `Canceled`, once `True`, stay `True`.
fn s5_final_conditions(
    was: &EvictionRequestStatus,
    is: &EvictionRequestStatus,
) -> Result<(), String> {
    for condition in [CONDITION_EVICTED, CONDITION_CANCELED] {
        if was.is_true(condition) && !is.is_true(condition) {
            return Err(format!(
                "status.conditions: {condition} was True and must stay True (rule S5): the request is final"
            ));
        }
    }
    Ok(())
}

/// S6: `failedAPIEvictionCounter` and `observedGeneration` never decrease. The cancellation
/// policy is an enum of the typed object (and of the CRD schema): a value other than Allow or
/// Forbid cannot be decoded, so it never reaches the review.
fn s6_monotonic(was: &EvictionRequestStatus, is: &EvictionRequestStatus) -> Result<(), String> {
    let (before, after) = (was.failed_evictions(), is.failed_evictions());
    if after < before {
        return Err(format!(
            "status.podEvictionStatus.failedAPIEvictionCounter cannot decrease (rule S6): it was {before}, \
             not {after}"
        ));
    }
    if let Some(before) = was.observed_generation
        && is.observed_generation.is_none_or(|after| after < before)
    {
        return Err(format!(
            "status.observedGeneration cannot decrease (rule S6): it was {before}, not {}",
            is.observed_generation
                .map_or_else(|| "unset".to_string(), |g| g.to_string())
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kube::core::admission::Operation;
    use rstest::rstest;

    use super::super::fixtures::*;
    use crate::api::{CONDITION_CANCELED, CONDITION_EVICTED, EvictionRequestStatus};

    fn seventeen() -> Vec<String> {
        (0..16)
            .map(|i| format!("i{i}.example.com"))
            .chain([IMP.to_string()])
            .collect()
    }

    /// `a` completed after running, `b` and the imperative interceptor still to come.
    fn a_completed() -> StatusBuilder {
        initialized().a_running(-100).completed(A, -5)
    }

    #[rstest]
    #[case::s1_first_sight_allowed(status(), initialized())]
    #[case::s1_allowlisted_k8s_io_allowed(status(), status().target(&["kubelet.k8s.io", IMP]))]
    #[case::s1_unchanged_allowed(initialized(), initialized())]
    #[case::s2_next_unprocessed_allowed(initialized(), initialized().active(&[A]).activated(A, 0))]
    #[case::s2_first_sight_and_activation_allowed(status(), initialized().active(&[A]).activated(A, 0))]
    #[case::s2_handoff_after_completion_allowed(a_completed(), a_completed().processed(&[A]).active(&[B]).activated(B, 0))]
    #[case::s2_handoff_after_timeout_allowed(initialized().active(&[A]).activated(A, -1300), initialized().active(&[B]).activated(A, -1300).processed(&[A]).activated(B, 0))]
    #[case::s2_handoff_within_clock_skew_allowed(initialized().active(&[A]).activated(A, -1195), initialized().active(&[B]).activated(A, -1195).processed(&[A]))]
    #[case::s2_clear_when_evicted_allowed(initialized().a_running(-100), initialized().a_running(-100).active(&[]).condition(CONDITION_EVICTED, "True"))]
    #[case::s2_clear_when_already_canceled_allowed(initialized().a_running(-100).condition(CONDITION_CANCELED, "True"), initialized().a_running(-100).condition(CONDITION_CANCELED, "True").active(&[]))]
    #[case::s2_clear_after_completion_allowed(a_completed(), a_completed().processed(&[A]).active(&[]))]
    #[case::s3_append_the_active_allowed(a_completed(), a_completed().processed(&[A]).active(&[B]))]
    #[case::s5_evicted_stays_allowed(status().condition(CONDITION_EVICTED, "True"), status().condition(CONDITION_EVICTED, "True").condition(CONDITION_CANCELED, "False"))]
    #[case::s5_evicted_set_allowed(status(), status().condition(CONDITION_EVICTED, "True"))]
    #[case::s6_counter_increase_allowed(status().counter(1), status().counter(2))]
    #[case::s6_observed_generation_increase_allowed(status().observed(1), status().observed(2))]
    #[case::s6_policy_forbid_allowed(status(), status().policy_forbid())]
    fn allowed(#[case] old: StatusBuilder, #[case] new: StatusBuilder) {
        check(&status_update(old, new), Expect::Allow);
    }

    #[rstest]
    #[case::s1_changed_denied(initialized(), status().target(&[A, IMP]), "status.targetInterceptors is immutable once set (rule S1)")]
    #[case::s1_cleared_denied(initialized(), status(), "is immutable once set (rule S1)")]
    #[case::s1_missing_imperative_denied(status(), status().target(&[A, B]), "must end with imperative-eviction.k8s.io (rule S1)")]
    #[case::s1_imperative_not_last_denied(status(), status().target(&[IMP, A]), "imperative-eviction.k8s.io may only be the last interceptor (rule S1)")]
    #[case::s1_not_allowlisted_denied(status(), status().target(&["foo.k8s.io", IMP]), "\"foo.k8s.io\" is under k8s.io but not in the allowlist (rule S1)")]
    #[case::s1_duplicate_denied(status(), status().target(&[A, A, IMP]), "status.targetInterceptors[1].name \"a.example.com\" is listed twice (rule S1)")]
    #[case::s1_not_fqdn_denied(status(), status().target(&["a", IMP]), "status.targetInterceptors[0].name: \"a\" must be a fully qualified domain name")]
    #[case::s1_too_many_denied(status(), status().target(&seventeen().iter().map(String::as_str).collect::<Vec<_>>()), "has 17 entries; at most 16 are allowed (rule S1)")]
    #[case::s2_skip_denied(initialized(), initialized().active(&[B]).activated(B, 0), "cannot activate \"b.example.com\" (rule S2): the next unprocessed interceptor is \"a.example.com\"")]
    #[case::s2_two_active_denied(initialized(), initialized().active(&[A, B]), "at most one interceptor is active at a time (rule S2)")]
    #[case::s2_not_a_target_denied(initialized(), initialized().active(&["x.example.com"]), "\"x.example.com\" is not in status.targetInterceptors")]
    #[case::s2_active_before_targets_denied(status(), status().active(&[A]), "is not in status.targetInterceptors [] (rule S2)")]
    #[case::s2_handoff_too_early_denied(initialized().a_running(-100), initialized().a_running(-100).processed(&[A]).active(&[B]), "\"a.example.com\" cannot be deactivated yet (rule S2)")]
    #[case::s2_handoff_without_processing_denied(a_completed(), a_completed().active(&[B]), "must be appended to status.processedInterceptors in the same update that deactivates it (rule S2)")]
    #[case::s2_handoff_skip_denied(a_completed(), a_completed().processed(&[A]).active(&[IMP]), "cannot switch from \"a.example.com\" to \"imperative-eviction.k8s.io\" (rule S2): only the interceptor right after")]
    #[case::s2_clear_denied(initialized().a_running(-100), initialized().a_running(-100).active(&[]), "can only be cleared this way or when the request is Evicted or Canceled")]
    #[case::s3_rewrite_denied(a_completed().processed(&[A]).active(&[B]), a_completed().processed(&[B]).active(&[B]), "status.processedInterceptors is append-only (rule S3)")]
    #[case::s3_append_inactive_denied(initialized().a_running(-100), initialized().a_running(-100).processed(&[B]), "\"b.example.com\" was not the active interceptor (rule S3)")]
    #[case::s3_duplicate_denied(initialized().processed(&[A]).active(&[A]), initialized().processed(&[A, A]).active(&[A]), "status.processedInterceptors lists \"a.example.com\" twice (rule S3)")]
    #[case::s3_out_of_order_denied(initialized().processed(&[B]).active(&[A]), initialized().processed(&[B, A]).condition(CONDITION_EVICTED, "True"), "\"a.example.com\" is out of order (rule S3)")]
    #[case::s3_not_a_target_denied(initialized().active(&["x.example.com"]), initialized().processed(&["x.example.com"]).condition(CONDITION_EVICTED, "True"), "\"x.example.com\" is not in status.targetInterceptors")]
    #[case::s5_evicted_reverted_denied(status().condition(CONDITION_EVICTED, "True"), status().condition(CONDITION_EVICTED, "False"), "status.conditions: Evicted was True and must stay True (rule S5)")]
    #[case::s5_canceled_removed_denied(status().condition(CONDITION_CANCELED, "True"), status(), "Canceled was True and must stay True (rule S5)")]
    #[case::s6_counter_decrease_denied(status().counter(2), status().counter(1), "failedAPIEvictionCounter cannot decrease (rule S6): it was 2, not 1")]
    #[case::s6_counter_removed_denied(status().counter(2), status(), "failedAPIEvictionCounter cannot decrease (rule S6)")]
    #[case::s6_observed_generation_decrease_denied(status().observed(3), status().observed(2), "status.observedGeneration cannot decrease (rule S6): it was 3, not 2")]
    #[case::s6_observed_generation_removed_denied(status().observed(3), status(), "it was 3, not unset")]
    fn denied(
        #[case] old: StatusBuilder,
        #[case] new: StatusBuilder,
        #[case] message: &'static str,
    ) {
        check(&status_update(old, new), Expect::Deny(message));
    }

    #[test]
    fn s2_spec_deadline_longer_than_default_denied() {
        let old = request(UID)
            .deadline(3600)
            .status(initialized().active(&[A]).activated(A, -1300))
            .build();
        let new = request(UID)
            .deadline(3600)
            .status(
                initialized()
                    .active(&[B])
                    .activated(A, -1300)
                    .processed(&[A]),
            )
            .build();
        let verdict = run(
            Operation::Update,
            Some("status"),
            Some(&old),
            Some(&new),
            &view(vec![], None),
        );
        check(
            &verdict,
            Expect::Deny("cannot be deactivated yet (rule S2)"),
        );
    }

    #[test]
    fn s6_policy_enum_denied_by_decoding() {
        let bad = serde_json::json!({"evictionRequestCancellationPolicy": "Maybe"});
        assert!(serde_json::from_value::<EvictionRequestStatus>(bad).is_err());
        let good = serde_json::json!({"evictionRequestCancellationPolicy": "Forbid"});
        assert!(serde_json::from_value::<EvictionRequestStatus>(good).is_ok());
    }

    /// The status writes of a whole eviction, as the controller and the interceptors make them,
    /// each reviewed at its own time: every one must pass.
    #[test]
    fn controller_and_interceptor_writes_pass() {
        let steps: Vec<(i64, StatusBuilder)> = vec![
            (-3590, initialized()),
            (-3580, initialized().active(&[A]).activated(A, -3580)),
            (
                -3500,
                initialized()
                    .active(&[A])
                    .activated(A, -3580)
                    .started(A, -3500)
                    .heartbeat(A, -3500),
            ),
            (
                -3440,
                initialized()
                    .active(&[A])
                    .activated(A, -3580)
                    .started(A, -3500)
                    .heartbeat(A, -3440)
                    .expected(A, 0),
            ),
            (
                -3000,
                initialized()
                    .active(&[A])
                    .activated(A, -3580)
                    .started(A, -3500)
                    .heartbeat(A, -3440)
                    .expected(A, 0)
                    .completed(A, -3000)
                    .message(A, "done"),
            ),
            (
                -2990,
                a_done().processed(&[A]).active(&[B]).activated(B, -2990),
            ),
            // b never reports; 20 minutes later the controller hands over to the imperative interceptor.
            (
                -1790,
                a_done()
                    .processed(&[A, B])
                    .active(&[IMP])
                    .activated(B, -2990)
                    .activated(IMP, -1790),
            ),
            (
                -1780,
                imperative_running().counter(1).message(
                    IMP,
                    "Could not evict a pod due to failing eviction requests, number of retries: 1",
                ),
            ),
            (-1720, imperative_running().counter(2).heartbeat(IMP, -1720)),
            (
                -10,
                imperative_running()
                    .counter(2)
                    .heartbeat(IMP, -1720)
                    .completed(IMP, -10)
                    .active(&[])
                    .condition(CONDITION_EVICTED, "True")
                    .observed(1),
            ),
        ];
        let mut old = request(UID).build();
        for (i, (time, status)) in steps.into_iter().enumerate() {
            let new = request(UID).status(status).build();
            let user = user();
            let mut req = review_request(
                Operation::Update,
                Some("status"),
                Some(&old),
                Some(&new),
                &user,
            );
            req.now = at(time).0;
            let verdict = super::super::review_eviction_request(
                &req,
                &view(vec![], None),
                &Default::default(),
            );
            assert_eq!(verdict.denied, None, "step {i}");
            old = new;
        }

        fn a_done() -> StatusBuilder {
            initialized()
                .activated(A, -3580)
                .started(A, -3500)
                .heartbeat(A, -3440)
                .expected(A, 0)
                .completed(A, -3000)
                .message(A, "done")
        }

        fn imperative_running() -> StatusBuilder {
            a_done()
                .processed(&[A, B])
                .active(&[IMP])
                .activated(B, -2990)
                .activated(IMP, -1790)
                .started(IMP, -1780)
                .heartbeat(IMP, -1780)
        }
    }
}

#[cfg(test)]
mod initialisation_tests {
    use kube::core::admission::Operation;

    use super::super::fixtures::{UID, initialized, request, run, view};

    /// S4 (SPEC: "initialisation of the whole list at once is allowed"): an interceptor-aware tool
    /// may initialise `targetInterceptors` and every entry of `interceptors[]` (names only) in one
    /// write to a request that has no status yet, before anything is active.
    #[test]
    fn s4_initialisation_of_a_request_without_status_allowed() {
        let old = request(UID).build();
        let new = request(UID).status(initialized()).build();
        let v = run(
            Operation::Update,
            Some("status"),
            Some(&old),
            Some(&new),
            &view(vec![], None),
        );
        assert!(v.allowed(), "{v:?}");
    }
}
