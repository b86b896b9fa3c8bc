//! UPDATE of the main resource of an EvictionRequest: rules U1–U5 (SPEC 2.2).
//!
//! The API server ignores status changes written through the main resource, so the
//! cancellation policy and the conditions are read from the stored (old) object.
//!
//! "The target pod exists" (U3) means a pod of that name **and** UID exists. When the view cannot
//! tell, U3 does not deny (an unknown lookup is never the sole reason for a denial) and warns.

use std::collections::BTreeSet;

use super::create::validate_requesters;
use super::{PodPresence, apply, authorize_pod_delete, namespace, pod_presence};
use crate::admission::{ReviewRequest, Verdict};
use crate::api::{
    CONDITION_CANCELED, CONDITION_EVICTED, CancellationPolicy, EvictionRequest,
    EvictionRequestStatus,
};
use crate::cluster::ClusterView;

pub(super) fn review(
    req: &ReviewRequest<'_, EvictionRequest>,
    old: &EvictionRequest,
    new: &EvictionRequest,
    view: &dyn ClusterView,
) -> Verdict {
    let mut verdict = Verdict::allow();
    apply(&mut verdict, u1_immutable_spec(old, new));
    apply(
        &mut verdict,
        validate_requesters(&new.spec.requesters, "U2", 0),
    );
    u3_forbid_removal(req, old, new, view, &mut verdict);
    apply(&mut verdict, u4_final_requesters(old, new));
    authorize_pod_delete(req, old, view, "U5", &mut verdict);
    verdict
}

/// U1: `spec.target` and `spec.heartbeatDeadlineSeconds` never change.
fn u1_immutable_spec(old: &EvictionRequest, new: &EvictionRequest) -> Result<(), String> {
    let (was, is) = (&old.spec.target.pod, &new.spec.target.pod);
    if was != is {
        return Err(format!(
            "spec.target is immutable (rule U1): it was pod {:?} (uid {:?}) and cannot become {:?} \
             (uid {:?}); create a new EvictionRequest for another pod",
            was.name, was.uid, is.name, is.uid
        ));
    }
    let (was, is) = (
        old.spec.heartbeat_deadline_seconds,
        new.spec.heartbeat_deadline_seconds,
    );
    if was != is {
        return Err(format!(
            "spec.heartbeatDeadlineSeconds is immutable (rule U1): it was {} and cannot become {}",
            describe_deadline(was),
            describe_deadline(is)
        ));
    }
    Ok(())
}

fn describe_deadline(seconds: Option<i32>) -> String {
    seconds.map_or_else(|| "unset".to_string(), |s| s.to_string())
}

fn status_of(er: &EvictionRequest) -> EvictionRequestStatus {
    er.status.clone().unwrap_or_default()
}

fn removed_requesters<'a>(old: &'a EvictionRequest, new: &EvictionRequest) -> Vec<&'a str> {
    let kept: BTreeSet<&str> = new
        .spec
        .requesters
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    old.spec
        .requesters
        .iter()
        .map(|r| r.name.as_str())
        .filter(|n| !kept.contains(n))
        .collect()
}

/// Whether U3 depends on the target pod's existence (so the pod must be looked up): the policy
/// is Forbid, the request is not Evicted and requesters are removed.
pub(super) fn u3_needs_pod(old: &EvictionRequest, new: &EvictionRequest) -> bool {
    let status = status_of(old);
    status.cancellation_policy() == CancellationPolicy::Forbid
        && !status.is_true(CONDITION_EVICTED)
        && !removed_requesters(old, new).is_empty()
}

/// U3: while the policy is Forbid, the pod exists and the request is not Evicted, requesters
/// cannot be removed.
fn u3_forbid_removal(
    req: &ReviewRequest<'_, EvictionRequest>,
    old: &EvictionRequest,
    new: &EvictionRequest,
    view: &dyn ClusterView,
    verdict: &mut Verdict,
) {
    if !u3_needs_pod(old, new) {
        return;
    }
    let ns = namespace(req, old);
    let target = &old.spec.target.pod;
    let removed = removed_requesters(old, new);
    match pod_presence(view, ns, target) {
        PodPresence::Gone => {}
        PodPresence::Present => verdict.deny_if_allowed(format!(
            "spec.requesters: cannot remove {removed:?} (rule U3): status.evictionRequestCancellationPolicy \
             is Forbid, pod {ns}/{} still exists and the request is not Evicted; wait until the pod is \
             evicted or its interceptor sets the policy to Allow",
            target.name
        )),
        PodPresence::Unknown => verdict.warn(format!(
            "rule U3 not checked: the cancellation policy is Forbid but whether pod {ns}/{} still exists \
             is unknown; requesters {removed:?} were removed",
            target.name
        )),
    }
}

/// U4: once Evicted or Canceled, the set of requesters is final (order is not significant in
/// this list-map).
fn u4_final_requesters(old: &EvictionRequest, new: &EvictionRequest) -> Result<(), String> {
    let status = status_of(old);
    let Some(condition) = [CONDITION_EVICTED, CONDITION_CANCELED]
        .into_iter()
        .find(|c| status.is_true(c))
    else {
        return Ok(());
    };
    let names = |er: &EvictionRequest| {
        er.spec
            .requesters
            .iter()
            .map(|r| r.name.clone())
            .collect::<BTreeSet<_>>()
    };
    if names(old) == names(new) {
        Ok(())
    } else {
        Err(format!(
            "spec.requesters cannot change once the request is {condition} (rule U4): the request is \
             final; delete it, or create a new one for a new pod"
        ))
    }
}

#[cfg(test)]
mod tests {
    use kube::core::admission::Operation;
    use rstest::rstest;

    use super::super::fixtures::*;
    use crate::api::{CONDITION_CANCELED, CONDITION_EVICTED, EvictionRequest};
    use crate::cluster::{Authorization, StaticView};

    #[rstest]
    #[case::u1_unchanged_spec_allowed(request(UID).build(), request(UID).requesters(&[A, B]).build(), pod_present(), Expect::Allow)]
    #[case::u1_target_changed_denied(request(UID).build(), request(UID).pod("p2").build(), pod_present(), Expect::Deny("spec.target is immutable (rule U1)"))]
    #[case::u1_target_uid_changed_denied(request(UID).build(), request(UID).target_uid(OTHER_UID).build(), pod_present(), Expect::Deny("spec.target is immutable (rule U1)"))]
    #[case::u1_deadline_changed_denied(request(UID).build(), request(UID).deadline(900).build(), pod_present(), Expect::Deny("spec.heartbeatDeadlineSeconds is immutable (rule U1): it was unset and cannot become 900"))]
    #[case::u2_empty_requesters_allowed(request(UID).build(), request(UID).requesters(&[]).build(), pod_present(), Expect::Allow)]
    #[case::u2_duplicate_denied(request(UID).build(), request(UID).requesters(&[A, A]).build(), pod_present(), Expect::Deny("is listed twice (rule U2)"))]
    #[case::u2_not_fqdn_denied(request(UID).build(), request(UID).requesters(&["Drain.Example"]).build(), pod_present(), Expect::Deny("spec.requesters[0].name: \"Drain.Example\" is not a fully qualified domain name"))]
    #[case::u3_forbid_adding_allowed(forbid(&[A]), with_status(request(UID).requesters(&[A, B]), status().policy_forbid()), pod_present(), Expect::Allow)]
    #[case::u3_allow_policy_removal_allowed(request(UID).requesters(&[A, B]).status(status().policy_allow()).build(), request(UID).requesters(&[A]).build(), pod_present(), Expect::Allow)]
    #[case::u3_forbid_pod_gone_allowed(forbid(&[A, B]), request(UID).requesters(&[A]).build(), view(vec![], None), Expect::Allow)]
    #[case::u3_forbid_pod_replaced_allowed(forbid(&[A, B]), request(UID).requesters(&[A]).build(), view(vec![pod("p1", OTHER_UID)], None), Expect::Allow)]
    #[case::u3_forbid_evicted_allowed(with_status(request(UID).requesters(&[A, B]), status().policy_forbid().condition(CONDITION_EVICTED, "True")), request(UID).requesters(&[A, B]).build(), pod_present(), Expect::Allow)]
    #[case::u3_forbid_pod_unknown_warns(forbid(&[A, B]), request(UID).requesters(&[A]).build(), StaticView { authorization: Some(Authorization::Allowed), ..StaticView::unknown() }, Expect::Warn("rule U3 not checked"))]
    #[case::u3_forbid_removal_denied(forbid(&[A, B]), request(UID).requesters(&[A]).build(), pod_present(), Expect::Deny("spec.requesters: cannot remove [\"b.example.com\"] (rule U3): status.evictionRequestCancellationPolicy is Forbid, pod ns/p1 still exists"))]
    #[case::u3_forbid_cancel_all_denied(forbid(&[A]), request(UID).requesters(&[]).build(), pod_present(), Expect::Deny("(rule U3)"))]
    #[case::u4_terminal_reorder_allowed(with_status(request(UID).requesters(&[A, B]), status().condition(CONDITION_EVICTED, "True")), request(UID).requesters(&[B, A]).build(), pod_present(), Expect::Allow)]
    #[case::u4_evicted_false_change_allowed(with_status(request(UID), status().condition(CONDITION_EVICTED, "False")), request(UID).requesters(&[A, B]).build(), pod_present(), Expect::Allow)]
    #[case::u4_evicted_change_denied(with_status(request(UID), status().condition(CONDITION_EVICTED, "True")), request(UID).requesters(&[A, B]).build(), pod_present(), Expect::Deny("spec.requesters cannot change once the request is Evicted (rule U4)"))]
    #[case::u4_canceled_change_denied(with_status(request(UID).requesters(&[A, B]), status().condition(CONDITION_CANCELED, "True")), request(UID).requesters(&[A]).build(), pod_present(), Expect::Deny("once the request is Canceled (rule U4)"))]
    #[case::u5_authorized_allowed(request(UID).build(), request(UID).build(), pod_present(), Expect::Allow)]
    #[case::u5_unauthorized_denied(request(UID).build(), request(UID).build(), view(vec![], Some(Authorization::Denied(String::new()))), Expect::Deny("user \"alice\" may not delete pod ns/p1 (rule U5"))]
    #[case::u5_skipped_warns(request(UID).build(), request(UID).build(), offline(), Expect::Warn("rule U5 not checked"))]
    fn update(
        #[case] old: EvictionRequest,
        #[case] new: EvictionRequest,
        #[case] view: StaticView,
        #[case] expect: Expect,
    ) {
        check(
            &run(Operation::Update, None, Some(&old), Some(&new), &view),
            expect,
        );
    }

    fn with_status(builder: RequestBuilder, status: StatusBuilder) -> EvictionRequest {
        builder.status(status).build()
    }

    fn forbid(requesters: &[&str]) -> EvictionRequest {
        with_status(
            request(UID).requesters(requesters),
            status().policy_forbid(),
        )
    }

    #[test]
    fn authorization_uses_the_stored_target() {
        let old = request(UID).build();
        let new = request(UID).pod("p2").build();
        let user = user();
        let req = review_request(Operation::Update, None, Some(&old), Some(&new), &user);
        let checks = super::super::access_checks(&req);
        assert_eq!(checks[0].name.as_deref(), Some("p1"));
    }
}
