//! Admission of `EvictionRequest` writes (SPEC 2.2): the pure review that the validating webhook
//! runs on CREATE (E1–E8), UPDATE of the main resource (U1–U5), UPDATE of the `status`
//! subresource (S1–S7) and DELETE (D1–D2), plus the heartbeat deadline that the rules and the
//! controller share.
//!
//! Rules run in SPEC order and the first violation is the one reported
//! ([`Verdict::deny_if_allowed`]); later rules may still add warnings. Lookups the view cannot
//! answer (`Lookup::Unknown`, `Authorization::Skipped`) never deny on their own: the rule that
//! needed them is skipped with a warning.
//!
//! Before calling [`review_eviction_request`] the server prefetches what the review will ask the
//! view for: the SubjectAccessReviews of [`access_checks`] and, for [`target_pod`], a live GET
//! whenever its cache does not show that pod with the requested UID (E7 and the "pod exists"
//! reading of U3/D2 must not rest on a stale cache).

mod create;
mod delete;
mod heartbeat;
mod status;
mod status_interceptors;
mod status_registration;
mod update;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod properties;

use std::borrow::Cow;

use kube::core::admission::Operation;

use super::{ReviewRequest, Settings, Verdict};
use crate::api::{EvictionRequest, PodReference};
use crate::cluster::{AccessCheck, Authorization, ClusterView, Lookup};

pub use heartbeat::{heartbeat_deadline_at, heartbeat_expired};

/// Reviews one write of an EvictionRequest.
///
/// # Guarantees
/// Denies (never allows by accident) when the AdmissionReview lacks the object the operation
/// needs. Status updates are not authorized here: RBAC on the `status` subresource covers them.
pub fn review_eviction_request(
    req: &ReviewRequest<'_, EvictionRequest>,
    view: &dyn ClusterView,
    settings: &Settings,
) -> Verdict {
    match (&req.operation, req.sub_resource) {
        (Operation::Create, None) => {
            with_object(req.object, "object", |new| create::review(req, new, view))
        }
        (Operation::Update, None) => {
            with_objects(req, |old, new| update::review(req, old, new, view))
        }
        (Operation::Update, Some("status")) => with_objects(req, |old, new| {
            status::review(req, old, new, view, settings)
        }),
        (Operation::Delete, None) => with_object(req.old_object, "oldObject", |old| {
            delete::review(req, old, view)
        }),
        (operation, sub_resource) => Verdict::deny(format!(
            "evictord does not review {operation:?} of evictionrequests{}; the webhook configuration \
             should only send CREATE, UPDATE and DELETE of the resource and UPDATE of its status",
            sub_resource.map(|s| format!("/{s}")).unwrap_or_default()
        )),
    }
}

/// The access checks [`review_eviction_request`] will ask the view for: whether the user may
/// delete the target pod (E8, U5, D1). Empty for status updates.
pub fn access_checks<'a>(req: &ReviewRequest<'a, EvictionRequest>) -> Vec<AccessCheck<'a>> {
    authorized_object(req)
        .map(|er| pod_delete_check(req, er))
        .into_iter()
        .collect()
}

/// The pod (namespace, name) [`review_eviction_request`] will look up in the view, if any: the
/// target on CREATE (E7); on UPDATE and DELETE only when U3 or D2 depend on whether it exists.
/// `None` for a malformed pod name (E2 denies it without a lookup).
pub fn target_pod<'a>(req: &ReviewRequest<'a, EvictionRequest>) -> Option<(&'a str, &'a str)> {
    let er = match (&req.operation, req.sub_resource) {
        (Operation::Create, None) => req.object,
        (Operation::Update, None) => req
            .old_object
            .filter(|old| req.object.is_some_and(|new| update::u3_needs_pod(old, new))),
        (Operation::Delete, None) => req.old_object.filter(|old| delete::d2_needs_pod(old)),
        _ => None,
    }?;
    let name = &er.spec.target.pod.name;
    create::validate_pod_name(name)
        .is_ok()
        .then(|| (namespace(req, er), name.as_str()))
}

/// The object whose target pod the user must be allowed to delete: the new object on CREATE, the
/// stored one on UPDATE (the target is immutable, U1) and DELETE.
fn authorized_object<'a>(req: &ReviewRequest<'a, EvictionRequest>) -> Option<&'a EvictionRequest> {
    match (&req.operation, req.sub_resource) {
        (Operation::Create, None) => req.object,
        (Operation::Update, None) | (Operation::Delete, None) => req.old_object,
        _ => None,
    }
}

fn with_object(
    object: Option<&EvictionRequest>,
    field: &str,
    review: impl FnOnce(&EvictionRequest) -> Verdict,
) -> Verdict {
    match object {
        Some(er) => review(er),
        None => Verdict::deny(format!(
            "the AdmissionReview carries no {field}; evictord cannot review this EvictionRequest write"
        )),
    }
}

fn with_objects(
    req: &ReviewRequest<'_, EvictionRequest>,
    review: impl FnOnce(&EvictionRequest, &EvictionRequest) -> Verdict,
) -> Verdict {
    with_object(req.old_object, "oldObject", |old| {
        with_object(req.object, "object", |new| review(old, new))
    })
}

/// Namespace of the request: from the AdmissionReview, else from the object.
fn namespace<'a>(req: &ReviewRequest<'a, EvictionRequest>, er: &'a EvictionRequest) -> &'a str {
    req.namespace
        .or(er.metadata.namespace.as_deref())
        .unwrap_or_default()
}

/// The check of E8, U5 and D1, borrowing the user and names from the request.
fn pod_delete_check<'a>(
    req: &ReviewRequest<'a, EvictionRequest>,
    er: &'a EvictionRequest,
) -> AccessCheck<'a> {
    AccessCheck {
        user: Cow::Borrowed(req.user),
        verb: "delete",
        group: "",
        resource: "pods",
        namespace: Some(Cow::Borrowed(namespace(req, er))),
        name: Some(Cow::Borrowed(&er.spec.target.pod.name)),
    }
}

/// E8, U5, D1: the user must be allowed to delete the target pod.
fn authorize_pod_delete(
    req: &ReviewRequest<'_, EvictionRequest>,
    er: &EvictionRequest,
    view: &dyn ClusterView,
    rule: &str,
    verdict: &mut Verdict,
) {
    let user = req.user.username.as_deref().unwrap_or("<anonymous>");
    let (ns, name) = (namespace(req, er), &er.spec.target.pod.name);
    match view.authorize(&pod_delete_check(req, er)) {
        Authorization::Allowed => {}
        Authorization::Denied(reason) => verdict.deny_if_allowed(format!(
            "user {user:?} may not delete pod {ns}/{name} (rule {rule}: creating, changing or \
             deleting an EvictionRequest requires permission to delete its target pod){}; grant \
             the user \"delete\" on \"pods\" in namespace {ns:?}",
            reason_suffix(&reason),
        )),
        Authorization::Skipped(reason) => verdict.warn(format!(
            "rule {rule} not checked: whether user {user:?} may delete pod {ns}/{name} is unknown \
             ({reason})"
        )),
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

/// Whether the target pod (that name and that UID) exists, for U3 and D2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PodPresence {
    /// A pod of that name and UID exists.
    Present,
    /// No pod of that name, or one with another UID (the target is gone).
    Gone,
    /// The view cannot tell.
    Unknown,
}

fn pod_presence(view: &dyn ClusterView, namespace: &str, target: &PodReference) -> PodPresence {
    match view.pod(namespace, &target.name) {
        Lookup::Found(pod) if pod.uid() == target.uid => PodPresence::Present,
        Lookup::Found(_) | Lookup::Missing => PodPresence::Gone,
        Lookup::Unknown => PodPresence::Unknown,
    }
}

/// Puts a rule's outcome into the verdict (first violation wins).
fn apply(verdict: &mut Verdict, outcome: Result<(), String>) {
    if let Err(message) = outcome {
        verdict.deny_if_allowed(message);
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn access_checks_ask_about_the_target_pod_except_for_status() {
        let er = request(UID).pod("p1").build();
        let user = user();
        let mut req = review_request(Operation::Create, None, None, Some(&er), &user);
        let checks = access_checks(&req);
        assert_eq!(checks.len(), 1);
        assert_eq!(
            (checks[0].verb, checks[0].resource, checks[0].group),
            ("delete", "pods", "")
        );
        assert_eq!(checks[0].namespace.as_deref(), Some(NS));
        assert_eq!(checks[0].name.as_deref(), Some("p1"));
        assert_eq!(checks[0].user.username.as_deref(), Some("alice"));
        req.operation = Operation::Update;
        req.old_object = Some(&er);
        req.sub_resource = Some("status");
        assert!(access_checks(&req).is_empty());
        req.sub_resource = None;
        assert_eq!(access_checks(&req).len(), 1);
    }

    #[test]
    fn target_pod_only_when_the_review_looks_it_up() {
        let user = user();
        let er = request(UID).pod("p1").build();
        let forbid = request(UID)
            .pod("p1")
            .status(status().policy_forbid())
            .build();
        let removed = request(UID)
            .pod("p1")
            .requesters(&[])
            .status(status().policy_forbid())
            .build();
        let pod = Some((NS, "p1"));
        let create = review_request(Operation::Create, None, None, Some(&er), &user);
        assert_eq!(target_pod(&create), pod);
        let update = review_request(Operation::Update, None, Some(&er), Some(&er), &user);
        assert_eq!(target_pod(&update), None);
        let cancel = review_request(
            Operation::Update,
            None,
            Some(&forbid),
            Some(&removed),
            &user,
        );
        assert_eq!(target_pod(&cancel), pod);
        let delete = review_request(Operation::Delete, None, Some(&er), None, &user);
        assert_eq!(target_pod(&delete), None);
        let delete_forbid = review_request(Operation::Delete, None, Some(&forbid), None, &user);
        assert_eq!(target_pod(&delete_forbid), pod);
        let status = review_request(
            Operation::Update,
            Some("status"),
            Some(&er),
            Some(&er),
            &user,
        );
        assert_eq!(target_pod(&status), None);
        let malformed = request(UID).pod("a/b").build();
        let create = review_request(Operation::Create, None, None, Some(&malformed), &user);
        assert_eq!(target_pod(&create), None);
    }

    #[test]
    fn missing_objects_and_unexpected_operations_deny() {
        let user = user();
        let view = view(vec![], None);
        let settings = Settings::default();
        let req = review_request(Operation::Update, None, None, None, &user);
        let verdict = review_eviction_request(&req, &view, &settings);
        assert!(verdict.denied.is_some_and(|m| m.contains("no oldObject")));
        let req = review_request(Operation::Connect, None, None, None, &user);
        let verdict = review_eviction_request(&req, &view, &settings);
        assert!(
            verdict
                .denied
                .is_some_and(|m| m.contains("does not review Connect"))
        );
    }
}
