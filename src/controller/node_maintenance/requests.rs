//! Pure decisions about EvictionRequests (SPEC 3.3): which to create or join while draining,
//! and, in Complete, which to withdraw from and which to delete.
//!
//! Every maintenance asks under the one requester name `nodemaintenance.evictord.dev`, so a
//! request does not say which maintenance wanted it. Two things make Complete precise anyway:
//! - a request the controller creates carries the annotation `evictord.dev/requested-for-node`
//!   naming the pod's node, so that a maintenance finds the requests it created even after their
//!   pods are gone (to delete them once Evicted or Canceled);
//! - a pod that another maintenance in Drain still targets keeps the request untouched: that
//!   maintenance still asks for it.
//!
//! A request is created already carrying its pod's labels (SPEC 2.3 step 4), so that the
//! eviction request controller has no labels to patch onto it afterwards.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{
    CONDITION_CANCELED, CancellationPolicy, EvictionRequest, EvictionRequestSpec, EvictionTarget,
    NODE_MAINTENANCE_REQUESTER, PodReference, Requester, pod_owner_reference,
};
use crate::cluster::PodLabels;
use crate::drain::PodRef;

pub use crate::api::REQUESTED_FOR_NODE_ANNOTATION;

/// One write to an EvictionRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestAction {
    /// Create the request for this pod (on this node).
    Create {
        /// The pod.
        pod: PodRef,
        /// Its node, recorded in [`REQUESTED_FOR_NODE_ANNOTATION`].
        node: String,
        /// Its labels, which the request carries from its creation.
        labels: BTreeMap<String, String>,
    },
    /// Add the requester to an existing request: write `requesters` (the cached list plus ours)
    /// only if the request is still at `resource_version`, so no other entry can be lost.
    Join {
        /// Namespace.
        namespace: String,
        /// Name (the pod UID).
        name: String,
        /// The version the new list was computed from.
        resource_version: Option<String>,
        /// The new `spec.requesters`.
        requesters: Vec<Requester>,
    },
    /// Remove the requester: write `requesters` (the cached list without ours) only if the
    /// request is still at `resource_version`.
    Withdraw {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The version the new list was computed from.
        resource_version: Option<String>,
        /// The new `spec.requesters`.
        requesters: Vec<Requester>,
    },
    /// Delete the request.
    Delete {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

impl RequestAction {
    /// The request a [`RequestAction::Create`] creates, as `namespace/name` (named after the
    /// pod's UID, [`new_request`]); `None` for the other writes.
    pub fn created(&self) -> Option<String> {
        match self {
            RequestAction::Create { pod, .. } => Some(format!("{}/{}", pod.namespace, pod.uid)),
            _ => None,
        }
    }
}

fn ns_name(r: &EvictionRequest) -> (String, String) {
    (
        r.metadata.namespace.clone().unwrap_or_default(),
        r.metadata.name.clone().unwrap_or_default(),
    )
}

fn our_index(r: &EvictionRequest) -> Option<usize> {
    r.spec
        .requesters
        .iter()
        .position(|q| q.name == NODE_MAINTENANCE_REQUESTER)
}

fn is_terminal(r: &EvictionRequest) -> bool {
    r.status.as_ref().is_some_and(|s| s.is_terminal())
}

fn forbids_cancellation(r: &EvictionRequest) -> bool {
    r.status
        .as_ref()
        .is_some_and(|s| s.cancellation_policy() == CancellationPolicy::Forbid)
}

/// The node a request was created for (our annotation).
pub fn requested_for_node(r: &EvictionRequest) -> Option<&str> {
    r.metadata
        .annotations
        .as_ref()?
        .get(REQUESTED_FOR_NODE_ANNOTATION)
        .map(String::as_str)
}

/// The request [`RequestAction::Create`] creates: named after the pod's UID and owned by the pod,
/// our requester alone, the node in [`REQUESTED_FOR_NODE_ANNOTATION`] and the pod's labels.
pub fn new_request(pod: &PodRef, node: &str, labels: &BTreeMap<String, String>) -> EvictionRequest {
    EvictionRequest {
        metadata: ObjectMeta {
            name: Some(pod.uid.clone()),
            namespace: Some(pod.namespace.clone()),
            labels: (!labels.is_empty()).then(|| labels.clone()),
            annotations: Some(BTreeMap::from([(
                REQUESTED_FOR_NODE_ANNOTATION.to_string(),
                node.to_string(),
            )])),
            owner_references: Some(vec![pod_owner_reference(&pod.name, &pod.uid)]),
            ..Default::default()
        },
        spec: EvictionRequestSpec {
            target: EvictionTarget {
                pod: PodReference {
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                },
            },
            requesters: vec![Requester {
                name: NODE_MAINTENANCE_REQUESTER.to_string(),
            }],
            heartbeat_deadline_seconds: None,
        },
        status: None,
    }
}

/// Drain: for each targeted pod (with its node and labels) and its existing request, if any:
/// - no request → create it;
/// - a live request without our requester → join it;
/// - a live request with it → nothing;
/// - a request Canceled with no requester left (withdrawn earlier) → delete it, so that it can
///   be created again: its name, the pod UID, is taken until then;
/// - any other Evicted or Canceled request → nothing (U4: its requesters are final).
pub fn drain_action(
    pod: &PodRef,
    node: &str,
    labels: PodLabels<'_>,
    existing: Option<&EvictionRequest>,
) -> Option<RequestAction> {
    let Some(r) = existing else {
        return Some(RequestAction::Create {
            pod: pod.clone(),
            node: node.to_string(),
            labels: labels.to_map(),
        });
    };
    let (namespace, name) = ns_name(r);
    if is_terminal(r) {
        let canceled = r
            .status
            .as_ref()
            .is_some_and(|s| s.is_true(CONDITION_CANCELED));
        return (canceled && r.spec.requesters.is_empty())
            .then_some(RequestAction::Delete { namespace, name });
    }
    if our_index(r).is_some() {
        return None;
    }
    let mut requesters = r.spec.requesters.clone();
    requesters.push(Requester {
        name: NODE_MAINTENANCE_REQUESTER.to_string(),
    });
    Some(RequestAction::Join {
        namespace,
        name,
        resource_version: r.metadata.resource_version.clone(),
        requesters,
    })
}

/// What Complete still has to do about requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompleteWork {
    /// Writes to make now.
    pub actions: Vec<RequestAction>,
    /// Requests this maintenance alone asked for that are withdrawn (now or before) and not yet
    /// Canceled by the eviction request controller: they are deleted on a later pass. The
    /// finalizer stays until none is left.
    pub pending: usize,
    /// Requests kept because their cancellation policy is Forbid (U3 forbids withdrawing).
    pub kept_forbidden: usize,
}

impl CompleteWork {
    /// Nothing left to withdraw or to wait for (deletions made now count as done).
    pub fn done(&self) -> bool {
        self.pending == 0
            && !self
                .actions
                .iter()
                .any(|a| matches!(a, RequestAction::Withdraw { .. }))
    }
}

/// Complete: for every request of a pod on one of `nodes` (`pod_node` gives the node of a
/// request's live target pod) or created for one of them, unless a maintenance in Drain still
/// targets the pod (`wanted`, by UID):
/// - live and ours → withdraw (kept when its policy is Forbid);
/// - Evicted or Canceled, and ours alone (or no one's, if we created it) → delete;
/// - Evicted or Canceled with other requesters → nothing (U4).
pub fn complete_work<'a>(
    nodes: &BTreeSet<String>,
    requests: impl IntoIterator<Item = &'a EvictionRequest>,
    pod_node: impl Fn(&EvictionRequest) -> Option<String>,
    wanted: &BTreeSet<String>,
) -> CompleteWork {
    let mut work = CompleteWork::default();
    for r in requests {
        let created_here = requested_for_node(r).is_some_and(|n| nodes.contains(n));
        let on_our_node = pod_node(r).is_some_and(|n| nodes.contains(&n));
        if !(created_here || on_our_node) || wanted.contains(&r.spec.target.pod.uid) {
            continue;
        }
        let (namespace, name) = ns_name(r);
        let ours = our_index(r);
        let alone = ours.is_some() && r.spec.requesters.len() == 1;
        let orphaned = r.spec.requesters.is_empty() && created_here;
        if is_terminal(r) {
            if alone || orphaned {
                work.actions.push(RequestAction::Delete { namespace, name });
            }
            continue;
        }
        match ours {
            Some(_) if forbids_cancellation(r) => work.kept_forbidden += 1,
            Some(index) => {
                let mut requesters = r.spec.requesters.clone();
                requesters.remove(index);
                work.actions.push(RequestAction::Withdraw {
                    namespace,
                    name,
                    resource_version: r.metadata.resource_version.clone(),
                    requesters,
                });
                if alone {
                    work.pending += 1;
                }
            }
            None if orphaned && !forbids_cancellation(r) => work.pending += 1,
            None => {}
        }
    }
    work
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EvictionRequestStatus;
    use crate::cluster::CachedPod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    const OURS: &str = NODE_MAINTENANCE_REQUESTER;
    const OTHER: &str = "other.example.com";

    fn request(
        requesters: &[&str],
        condition: Option<&str>,
        for_node: Option<&str>,
    ) -> EvictionRequest {
        let mut r = EvictionRequest::new(
            "uid-1",
            EvictionRequestSpec {
                requesters: requesters
                    .iter()
                    .map(|n| Requester {
                        name: n.to_string(),
                    })
                    .collect(),
                ..Default::default()
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.resource_version = Some("5".into());
        r.spec.target.pod.name = "p".into();
        r.spec.target.pod.uid = "uid-1".into();
        if let Some(c) = condition {
            r.status = Some(EvictionRequestStatus {
                conditions: vec![Condition {
                    type_: c.into(),
                    status: "True".into(),
                    reason: "X".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                }],
                ..Default::default()
            });
        }
        if let Some(n) = for_node {
            r.metadata.annotations = Some(
                [(REQUESTED_FOR_NODE_ANNOTATION.to_string(), n.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        r
    }

    fn forbid(mut r: EvictionRequest) -> EvictionRequest {
        r.status
            .get_or_insert_with(Default::default)
            .eviction_request_cancellation_policy = Some(CancellationPolicy::Forbid);
        r
    }

    fn pod() -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "uid-1".into(),
        }
    }

    fn app_web() -> BTreeMap<String, String> {
        BTreeMap::from([("app".to_string(), "web".to_string())])
    }

    /// A cached pod `ns/p` (UID `uid-1`) with these labels, running on node `one`.
    fn cached_pod(labels: &BTreeMap<String, String>) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("uid-1".into());
        p.metadata.labels = Some(labels.clone());
        p.spec.node_name = Some("one".into());
        p.status.phase = Some("Running".into());
        p
    }

    #[test]
    fn new_requests_carry_the_pod_labels_so_step_4_patches_nothing() {
        let rows = [
            ("no labels", BTreeMap::new(), None),
            ("one label", app_web(), Some(app_web())),
            (
                "two labels",
                BTreeMap::from([
                    ("app".to_string(), "web".to_string()),
                    ("tier".to_string(), "front".to_string()),
                ]),
                Some(BTreeMap::from([
                    ("app".to_string(), "web".to_string()),
                    ("tier".to_string(), "front".to_string()),
                ])),
            ),
        ];
        for (name, labels, want) in rows {
            let r = new_request(&pod(), "one", &labels);
            assert_eq!(r.metadata.labels, want, "{name}");
            assert_eq!(r.metadata.name.as_deref(), Some("uid-1"), "{name}");
            assert_eq!(r.metadata.namespace.as_deref(), Some("ns"), "{name}");
            assert_eq!(requested_for_node(&r), Some("one"), "{name}");
            assert_eq!(requester_names(&r), [OURS], "{name}");
            let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Pod", "uid-1"));
            assert_eq!(
                (
                    r.spec.target.pod.name.as_str(),
                    r.spec.target.pod.uid.as_str()
                ),
                ("p", "uid-1")
            );
            // The eviction request controller's first look (SPEC 2.3 step 4) finds the labels.
            let decision = crate::controller::eviction_request::decide(
                &r,
                Some(&cached_pod(&labels)),
                jiff::Timestamp::UNIX_EPOCH,
                &Default::default(),
            );
            assert_eq!(
                decision.labels, None,
                "{name}: labels patched after creation"
            );
        }
    }

    fn requester_names(r: &EvictionRequest) -> Vec<&str> {
        r.spec.requesters.iter().map(|q| q.name.as_str()).collect()
    }

    fn names(list: &[&str]) -> Vec<Requester> {
        list.iter()
            .map(|n| Requester {
                name: n.to_string(),
            })
            .collect()
    }

    fn join(after: &[&str]) -> Option<RequestAction> {
        Some(RequestAction::Join {
            namespace: "ns".into(),
            name: "uid-1".into(),
            resource_version: Some("5".into()),
            requesters: names(after),
        })
    }

    fn delete() -> RequestAction {
        RequestAction::Delete {
            namespace: "ns".into(),
            name: "uid-1".into(),
        }
    }

    fn withdraw(after: &[&str]) -> RequestAction {
        RequestAction::Withdraw {
            namespace: "ns".into(),
            name: "uid-1".into(),
            resource_version: Some("5".into()),
            requesters: names(after),
        }
    }

    #[test]
    fn a_creation_names_the_request_it_creates() {
        let create = RequestAction::Create {
            pod: pod(),
            node: "one".into(),
            labels: app_web(),
        };
        let created = new_request(&pod(), "one", &app_web());
        assert_eq!(create.created().as_deref(), Some("ns/uid-1"));
        assert_eq!(
            create.created(),
            Some(format!(
                "{}/{}",
                created.metadata.namespace.unwrap(),
                created.metadata.name.unwrap()
            ))
        );
        for other in [join(&[OURS]).unwrap(), withdraw(&[]), delete()] {
            assert_eq!(other.created(), None, "{other:?}");
        }
    }

    #[test]
    fn drain_rows() {
        let create = Some(RequestAction::Create {
            pod: pod(),
            node: "one".into(),
            labels: app_web(),
        });
        let rows = [
            ("no request: create", None, create),
            (
                "live request of another requester: join",
                Some(request(&[OTHER], None, None)),
                join(&[OTHER, OURS]),
            ),
            (
                "live request we are in: nothing",
                Some(request(&[OTHER, OURS], None, None)),
                None,
            ),
            (
                "evicted request: nothing (U4)",
                Some(request(&[OTHER], Some("Evicted"), None)),
                None,
            ),
            (
                "canceled with requesters: nothing (U4)",
                Some(request(&[OURS], Some("Canceled"), None)),
                None,
            ),
            (
                "canceled with no requester: delete to recreate",
                Some(request(&[], Some("Canceled"), None)),
                Some(delete()),
            ),
        ];
        for (name, existing, want) in rows {
            assert_eq!(
                drain_action(&pod(), "one", PodLabels::Map(&app_web()), existing.as_ref()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn complete_rows() {
        let nodes: BTreeSet<String> = ["one".to_string()].into();
        let none = BTreeSet::new();
        let wanted: BTreeSet<String> = ["uid-1".to_string()].into();
        let on = |n: &'static str| move |_: &EvictionRequest| Some(n.to_string());
        let gone = |_: &EvictionRequest| None;
        let work =
            |r: EvictionRequest,
             node: &dyn Fn(&EvictionRequest) -> Option<String>,
             wanted: &BTreeSet<String>| { complete_work(&nodes, [&r], node, wanted) };
        let w = |actions: Vec<RequestAction>, pending, kept_forbidden| CompleteWork {
            actions,
            pending,
            kept_forbidden,
        };
        let rows: Vec<(&str, CompleteWork, CompleteWork)> = vec![
            (
                "live, ours alone: withdraw and wait for Canceled",
                work(request(&[OURS], None, Some("one")), &on("one"), &none),
                w(vec![withdraw(&[])], 1, 0),
            ),
            (
                "live, joined: withdraw, nothing to wait for",
                work(request(&[OTHER, OURS], None, None), &on("one"), &none),
                w(vec![withdraw(&[OTHER])], 0, 0),
            ),
            (
                "live, pod on another node, not created here: untouched",
                work(request(&[OURS], None, Some("two")), &on("two"), &none),
                w(vec![], 0, 0),
            ),
            (
                "live, still wanted by a maintenance in Drain: untouched",
                work(request(&[OURS], None, Some("one")), &on("one"), &wanted),
                w(vec![], 0, 0),
            ),
            (
                "live, Forbid: kept (U3)",
                work(
                    forbid(request(&[OURS], None, Some("one"))),
                    &on("one"),
                    &none,
                ),
                w(vec![], 0, 1),
            ),
            (
                "withdrawn, not yet Canceled: wait",
                work(request(&[], None, Some("one")), &on("one"), &none),
                w(vec![], 1, 0),
            ),
            (
                "withdrawn joined request of others: untouched",
                work(request(&[OTHER], None, None), &on("one"), &none),
                w(vec![], 0, 0),
            ),
            (
                "evicted, ours alone, pod gone: delete",
                work(request(&[OURS], Some("Evicted"), Some("one")), &gone, &none),
                w(vec![delete()], 0, 0),
            ),
            (
                "canceled, no requester, created here: delete",
                work(
                    request(&[], Some("Canceled"), Some("one")),
                    &on("one"),
                    &none,
                ),
                w(vec![delete()], 0, 0),
            ),
            (
                "evicted with other requesters: untouched (U4)",
                work(
                    request(&[OTHER, OURS], Some("Evicted"), Some("one")),
                    &gone,
                    &none,
                ),
                w(vec![], 0, 0),
            ),
            (
                "evicted, pod gone, created for another node: untouched",
                work(request(&[OURS], Some("Evicted"), Some("two")), &gone, &none),
                w(vec![], 0, 0),
            ),
        ];
        for (name, got, want) in rows {
            assert_eq!(got, want, "{name}");
        }
        assert!(w(vec![delete()], 0, 1).done());
        assert!(!w(vec![withdraw(&[])], 0, 0).done());
        assert!(!w(vec![], 1, 0).done());
    }
}
