//! CREATE of an EvictionRequest: rules E1–E8 (SPEC 2.2), and the requester-list rule shared
//! with U2.

use std::collections::BTreeSet;

use super::{apply, authorize_pod_delete, namespace};
use crate::admission::names::validate_fqdn;
use crate::admission::{ReviewRequest, Verdict};
use crate::api::{
    DEFAULT_HEARTBEAT_DEADLINE_SECONDS, EvictionRequest, EvictionRequestSpec,
    EvictionRequestStatus, MAX_HEARTBEAT_DEADLINE_SECONDS, MAX_REQUESTERS,
    MIN_HEARTBEAT_DEADLINE_SECONDS, Requester,
};
use crate::cluster::{ClusterView, Lookup};

pub(super) fn review(
    req: &ReviewRequest<'_, EvictionRequest>,
    new: &EvictionRequest,
    view: &dyn ClusterView,
) -> Verdict {
    let mut verdict = Verdict::allow();
    apply(&mut verdict, e1_no_generate_name(new));
    apply(&mut verdict, e2_target_pod(&new.spec));
    apply(&mut verdict, e3_named_after_pod_uid(req, new));
    apply(
        &mut verdict,
        validate_requesters(&new.spec.requesters, "E4", 1),
    );
    apply(&mut verdict, e5_heartbeat_deadline(&new.spec));
    apply(&mut verdict, e6_no_status(new.status.as_ref()));
    e7_pod_check(req, new, view, &mut verdict);
    authorize_pod_delete(req, new, view, "E8", &mut verdict);
    verdict
}

/// E1: the request is named after the pod UID, so a generated name can never be right.
fn e1_no_generate_name(new: &EvictionRequest) -> Result<(), String> {
    match new.metadata.generate_name.as_deref() {
        Some(prefix) if !prefix.is_empty() => Err(format!(
            "metadata.generateName ({prefix:?}) is not supported (rule E1): generateName is not \
             supported; name the request after the pod UID"
        )),
        _ => Ok(()),
    }
}

/// E2: `spec.target.pod` names a valid pod and carries its UID.
fn e2_target_pod(spec: &EvictionRequestSpec) -> Result<(), String> {
    let pod = &spec.target.pod;
    if pod.name.is_empty() {
        return Err(
            "spec.target.pod.name is required (rule E2): set it to the name of the pod to evict"
                .into(),
        );
    }
    validate_pod_name(&pod.name).map_err(|problem| {
        format!(
            "spec.target.pod.name {:?} is not a valid pod name (rule E2): {problem}",
            pod.name
        )
    })?;
    if pod.uid.is_empty() {
        return Err(format!(
            "spec.target.pod.uid is required (rule E2): set it to the UID of pod {:?} \
             (kubectl get pod {} -o jsonpath='{{.metadata.uid}}')",
            pod.name, pod.name
        ));
    }
    Ok(())
}

/// A pod name is a DNS-1123 subdomain: at most 253 characters of `[a-z0-9-.]`, each
/// dot-separated part non-empty, starting and ending alphanumeric.
pub(super) fn validate_pod_name(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err("it must be at most 253 characters".into());
    }
    let part_ok = |part: &str| {
        let b = part.as_bytes();
        b.first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.last()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    };
    if name.split('.').all(part_ok) {
        Ok(())
    } else {
        Err("it must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', starting and \
             ending with a letter or digit"
            .into())
    }
}

/// E3: `metadata.name` equals `spec.target.pod.uid`.
fn e3_named_after_pod_uid(
    req: &ReviewRequest<'_, EvictionRequest>,
    new: &EvictionRequest,
) -> Result<(), String> {
    let name = new.metadata.name.as_deref().unwrap_or(req.name);
    let uid = &new.spec.target.pod.uid;
    if name == uid {
        Ok(())
    } else {
        Err(format!(
            "metadata.name {name:?} must equal spec.target.pod.uid {uid:?} (rule E3: EvictionRequests \
             are named after the pod UID, so that a pod has at most one); rename the request to {uid:?}"
        ))
    }
}

/// E4 (`min = 1`) and U2 (`min = 0`): at most 100 requesters, unique, each an FQDN.
pub(super) fn validate_requesters(
    requesters: &[Requester],
    rule: &str,
    min: usize,
) -> Result<(), String> {
    if requesters.len() < min {
        return Err(format!(
            "spec.requesters must name at least {min} requester (rule {rule}): add the FQDN of whoever \
             asks for the eviction, e.g. {{name: example.com}}"
        ));
    }
    if requesters.len() > MAX_REQUESTERS {
        return Err(format!(
            "spec.requesters has {} entries; at most {MAX_REQUESTERS} are allowed (rule {rule})",
            requesters.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, requester) in requesters.iter().enumerate() {
        validate_fqdn(&requester.name)
            .map_err(|problem| format!("spec.requesters[{i}].name: {problem} (rule {rule})"))?;
        if !seen.insert(requester.name.as_str()) {
            return Err(format!(
                "spec.requesters[{i}].name {:?} is listed twice (rule {rule}); each requester must appear once",
                requester.name
            ));
        }
    }
    Ok(())
}

/// E5: `spec.heartbeatDeadlineSeconds`, if set, is within 600..=86400.
fn e5_heartbeat_deadline(spec: &EvictionRequestSpec) -> Result<(), String> {
    match spec.heartbeat_deadline_seconds {
        Some(s)
            if !(MIN_HEARTBEAT_DEADLINE_SECONDS..=MAX_HEARTBEAT_DEADLINE_SECONDS).contains(&s) =>
        {
            Err(format!(
                "spec.heartbeatDeadlineSeconds is {s}; it must be between {MIN_HEARTBEAT_DEADLINE_SECONDS} and \
             {MAX_HEARTBEAT_DEADLINE_SECONDS} (rule E5), or unset for the default of \
             {DEFAULT_HEARTBEAT_DEADLINE_SECONDS}"
            ))
        }
        _ => Ok(()),
    }
}

/// E6: a new request carries no status.
fn e6_no_status(status: Option<&EvictionRequestStatus>) -> Result<(), String> {
    match status {
        Some(s) if *s != EvictionRequestStatus::default() => Err(
            "status must be empty when the request is created (rule E6): the controller and the \
             interceptors fill it in through the status subresource; remove the status"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// E7: the target pod, if it exists, has the UID the request names. A missing pod or an unknown
/// answer only warns: the controller cancels requests for missing pods.
fn e7_pod_check(
    req: &ReviewRequest<'_, EvictionRequest>,
    new: &EvictionRequest,
    view: &dyn ClusterView,
    verdict: &mut Verdict,
) {
    let target = &new.spec.target.pod;
    if validate_pod_name(&target.name).is_err() {
        return; // E2 has denied; never look up a malformed name
    }
    let ns = namespace(req, new);
    match view.pod(ns, &target.name) {
        Lookup::Found(pod) if pod.uid() == target.uid => {}
        Lookup::Found(pod) => verdict.deny_if_allowed(format!(
            "spec.target.pod: pod {ns}/{} has UID {:?}, not {:?} (rule E7); the pod was probably \
             replaced: create the request for the current pod, named after UID {:?}",
            target.name,
            pod.uid(),
            target.uid,
            pod.uid()
        )),
        Lookup::Missing => verdict.warn(format!(
            "pod {ns}/{} not found; the request will be canceled (rule E7)",
            target.name
        )),
        Lookup::Unknown => verdict.warn(format!(
            "rule E7 not checked: whether pod {ns}/{} exists with UID {:?} is unknown (the cluster \
             could not be consulted)",
            target.name, target.uid
        )),
    }
}

#[cfg(test)]
mod tests {
    use kube::core::admission::Operation;
    use rstest::rstest;

    use super::super::fixtures::*;
    use crate::cluster::{Authorization, StaticView};

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("r{i}.example.com")).collect()
    }

    #[rstest]
    #[case::e1_no_generate_name_allowed(request(UID).build(), pod_present(), Expect::Allow)]
    #[case::e1_generate_name_denied(request(UID).generate_name("evr-").build(), pod_present(), Expect::Deny("generateName is not supported; name the request after the pod UID"))]
    #[case::e2_valid_target_allowed(request(UID).pod("p1").build(), pod_present(), Expect::Allow)]
    #[case::e2_missing_pod_name_denied(request(UID).pod("").build(), pod_present(), Expect::Deny("spec.target.pod.name is required (rule E2)"))]
    #[case::e2_invalid_pod_name_denied(request(UID).pod("P_1").build(), pod_present(), Expect::Deny("\"P_1\" is not a valid pod name (rule E2)"))]
    #[case::e2_missing_uid_denied(request("").build(), pod_present(), Expect::Deny("spec.target.pod.uid is required (rule E2)"))]
    #[case::e3_named_after_uid_allowed(request(UID).build(), pod_present(), Expect::Allow)]
    #[case::e3_name_differs_denied(request(UID).name("abc").build(), pod_present(), Expect::Deny(r#"metadata.name "abc" must equal spec.target.pod.uid "6f1c7c1e-0000-4000-8000-000000000001" (rule E3: EvictionRequests are named after the pod UID"#))]
    #[case::e4_hundred_requesters_allowed(request(UID).requesters(&names(100).iter().map(String::as_str).collect::<Vec<_>>()).build(), pod_present(), Expect::Allow)]
    #[case::e4_no_requester_denied(request(UID).requesters(&[]).build(), pod_present(), Expect::Deny("spec.requesters must name at least 1 requester (rule E4)"))]
    #[case::e4_too_many_denied(request(UID).requesters(&names(101).iter().map(String::as_str).collect::<Vec<_>>()).build(), pod_present(), Expect::Deny("spec.requesters has 101 entries; at most 100"))]
    #[case::e4_duplicate_denied(request(UID).requesters(&[A, B, A]).build(), pod_present(), Expect::Deny("spec.requesters[2].name \"a.example.com\" is listed twice (rule E4)"))]
    #[case::e4_not_fqdn_denied(request(UID).requesters(&[A, "drain"]).build(), pod_present(), Expect::Deny("spec.requesters[1].name: \"drain\" must be a fully qualified domain name"))]
    #[case::e5_deadline_in_range_allowed(request(UID).deadline(600).build(), pod_present(), Expect::Allow)]
    #[case::e5_deadline_max_allowed(request(UID).deadline(86400).build(), pod_present(), Expect::Allow)]
    #[case::e5_deadline_too_short_denied(request(UID).deadline(599).build(), pod_present(), Expect::Deny("spec.heartbeatDeadlineSeconds is 599; it must be between 600 and 86400 (rule E5)"))]
    #[case::e5_deadline_too_long_denied(request(UID).deadline(86401).build(), pod_present(), Expect::Deny("(rule E5)"))]
    #[case::e6_empty_status_allowed(request(UID).status(status()).build(), pod_present(), Expect::Allow)]
    #[case::e6_status_denied(request(UID).status(status().active(&[A])).build(), pod_present(), Expect::Deny("status must be empty when the request is created (rule E6)"))]
    #[case::e7_pod_with_uid_allowed(request(UID).build(), pod_present(), Expect::Allow)]
    #[case::e7_pod_missing_warns(request(UID).build(), view(vec![], None), Expect::Warn("pod ns/p1 not found; the request will be canceled"))]
    #[case::e7_pod_unknown_warns(request(UID).build(), view_unknown_pods(Authorization::Allowed), Expect::Warn("rule E7 not checked"))]
    #[case::e7_other_uid_denied(request(UID).build(), view(vec![pod("p1", OTHER_UID)], None), Expect::Deny("pod ns/p1 has UID \"0b2d9a7e-0000-4000-8000-000000000002\", not \"6f1c7c1e-0000-4000-8000-000000000001\" (rule E7)"))]
    #[case::e8_authorized_allowed(request(UID).build(), pod_present(), Expect::Allow)]
    #[case::e8_unauthorized_denied(request(UID).build(), view(vec![pod("p1", UID)], Some(Authorization::Denied("RBAC: no rule".into()))), Expect::Deny("user \"alice\" may not delete pod ns/p1 (rule E8"))]
    #[case::e8_skipped_warns(request(UID).build(), view(vec![pod("p1", UID)], Some(Authorization::Skipped("offline".into()))), Expect::Warn("rule E8 not checked"))]
    fn create(
        #[case] new: crate::api::EvictionRequest,
        #[case] view: StaticView,
        #[case] expect: Expect,
    ) {
        check(
            &run(Operation::Create, None, None, Some(&new), &view),
            expect,
        );
    }

    /// A view that answers access checks but cannot look pods up.
    fn view_unknown_pods(authorization: Authorization) -> StaticView {
        StaticView {
            authorization: Some(authorization),
            ..StaticView::unknown()
        }
    }

    #[test]
    fn first_violation_wins_and_warnings_still_accumulate() {
        let new = request(UID).generate_name("x-").name("abc").build();
        let verdict = run(Operation::Create, None, None, Some(&new), &offline());
        assert!(
            verdict
                .denied
                .as_deref()
                .is_some_and(|m| m.contains("rule E1"))
        );
        assert_eq!(verdict.warnings.len(), 2, "{:?}", verdict.warnings);
    }

    #[test]
    fn pod_names() {
        for ok in ["p", "p-1", "web-0.ns", "a".repeat(253).as_str()] {
            assert!(super::validate_pod_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "-p",
            "p-",
            "P",
            "p..q",
            "p_q",
            ".p",
            "a".repeat(254).as_str(),
        ] {
            assert!(super::validate_pod_name(bad).is_err(), "{bad}");
        }
    }
}
