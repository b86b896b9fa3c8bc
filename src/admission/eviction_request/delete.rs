//! DELETE of an EvictionRequest: rules D1–D2 (SPEC 2.2).
//!
//! As in U3, "the pod exists" means a pod of that name and UID; when the view cannot tell, D2
//! does not deny and warns instead.

use super::{PodPresence, authorize_pod_delete, namespace, pod_presence};
use crate::admission::{ReviewRequest, Verdict};
use crate::api::{CONDITION_EVICTED, CancellationPolicy, EvictionRequest};
use crate::cluster::ClusterView;

pub(super) fn review(
    req: &ReviewRequest<'_, EvictionRequest>,
    old: &EvictionRequest,
    view: &dyn ClusterView,
) -> Verdict {
    let mut verdict = Verdict::allow();
    authorize_pod_delete(req, old, view, "D1", &mut verdict);
    d2_forbid_deletion(req, old, view, &mut verdict);
    verdict
}

/// Whether D2 depends on the target pod's existence: the policy is Forbid and the request is not
/// Evicted.
pub(super) fn d2_needs_pod(old: &EvictionRequest) -> bool {
    old.status.as_ref().is_some_and(|s| {
        s.cancellation_policy() == CancellationPolicy::Forbid && !s.is_true(CONDITION_EVICTED)
    })
}

/// D2: with the Forbid policy, the request cannot be deleted while its pod exists and it is not
/// Evicted.
fn d2_forbid_deletion(
    req: &ReviewRequest<'_, EvictionRequest>,
    old: &EvictionRequest,
    view: &dyn ClusterView,
    verdict: &mut Verdict,
) {
    if !d2_needs_pod(old) {
        return;
    }
    let ns = namespace(req, old);
    let name = old.metadata.name.as_deref().unwrap_or(req.name);
    let pod = &old.spec.target.pod.name;
    match pod_presence(view, ns, &old.spec.target.pod) {
        PodPresence::Gone => {}
        PodPresence::Present => verdict.deny_if_allowed(format!(
            "EvictionRequest {ns}/{name} cannot be deleted (rule D2): status.evictionRequestCancellationPolicy \
             is Forbid, pod {ns}/{pod} still exists and the request is not Evicted; wait until the pod is \
             evicted or its interceptor sets the policy to Allow"
        )),
        PodPresence::Unknown => verdict.warn(format!(
            "rule D2 not checked: the cancellation policy is Forbid but whether pod {ns}/{pod} still exists \
             is unknown"
        )),
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
    #[case::d1_authorized_allowed(request(UID).build(), pod_present(), Expect::Allow)]
    #[case::d1_unauthorized_denied(request(UID).build(), view(vec![], Some(Authorization::Denied("no RBAC rule".into()))), Expect::Deny("user \"alice\" may not delete pod ns/p1 (rule D1"))]
    #[case::d1_skipped_warns(request(UID).build(), offline(), Expect::Warn("rule D1 not checked"))]
    #[case::d2_allow_policy_allowed(request(UID).status(status().policy_allow()).build(), pod_present(), Expect::Allow)]
    #[case::d2_forbid_pod_gone_allowed(request(UID).status(status().policy_forbid()).build(), view(vec![], None), Expect::Allow)]
    #[case::d2_forbid_evicted_allowed(request(UID).status(status().policy_forbid().condition(CONDITION_EVICTED, "True")).build(), pod_present(), Expect::Allow)]
    #[case::d2_forbid_pod_unknown_warns(request(UID).status(status().policy_forbid()).build(), StaticView { authorization: Some(Authorization::Allowed), ..StaticView::unknown() }, Expect::Warn("rule D2 not checked"))]
    #[case::d2_forbid_pod_exists_denied(request(UID).status(status().policy_forbid()).build(), pod_present(), Expect::Deny("EvictionRequest ns/6f1c7c1e-0000-4000-8000-000000000001 cannot be deleted (rule D2)"))]
    #[case::d2_forbid_canceled_pod_exists_denied(request(UID).status(status().policy_forbid().condition(CONDITION_CANCELED, "True")).build(), pod_present(), Expect::Deny("(rule D2)"))]
    fn delete(#[case] old: EvictionRequest, #[case] view: StaticView, #[case] expect: Expect) {
        check(
            &run(Operation::Delete, None, Some(&old), None, &view),
            expect,
        );
    }
}
