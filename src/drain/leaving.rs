//! Which targeted pods can leave their node (SPEC 3.3, 5.3): Default pods through the Eviction
//! API; DaemonSet pods through `daemonset.apps.k8s.io`, static pods through the node agent's
//! `kubelet.k8s.io`, or through interceptors of their own. Those that cannot ([`Stay`]) still get
//! an EvictionRequest, are named in the node's status message with the reason, and hold neither
//! plan progress nor `Drained`.

use k8s_openapi::api::core::v1::Node;

use crate::api::{EvictionRequest, IMPERATIVE_INTERCEPTOR, NODE_AGENT_ANNOTATION, PodType};
use crate::cluster::{CachedPod, pod_type};

/// Why a targeted DaemonSet or static pod stays on its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stay {
    /// Its DaemonSet tolerates the maintenance taint: deleting the pod would only have the
    /// DaemonSet controller start it again at once.
    ToleratesTaint,
    /// A DaemonSet pod, and evictord's `daemonset.apps.k8s.io` interceptor is off.
    NoDaemonSetInterceptor,
    /// A static pod on a node where no `evictord node-agent` runs.
    NoNodeAgent,
    /// Its request reached the Eviction API, which does not remove DaemonSet and static pods:
    /// the interceptors before it finished without removing the pod.
    LeftByInterceptors,
}

impl Stay {
    /// Why, for the node's status message and the plugin.
    pub fn reason(self) -> &'static str {
        match self {
            Stay::ToleratesTaint => "its DaemonSet tolerates the evictord.dev/maintenance taint",
            Stay::NoDaemonSetInterceptor => "the daemonset.apps.k8s.io interceptor is off",
            Stay::NoNodeAgent => "static pod on a node without an evictord node agent",
            Stay::LeftByInterceptors => "its interceptors finished without removing it",
        }
    }
}

/// What besides the pod decides whether it can leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaving {
    /// evictord runs `daemonset.apps.k8s.io` (`--daemonset-interceptor`).
    pub daemonset_interceptor: bool,
    /// The pod's node announces an `evictord node-agent` (annotation `evictord.dev/node-agent`).
    pub node_agent: bool,
}

/// True when the node announces an `evictord node-agent` (SPEC 5.3): its mirror pods leave
/// through `kubelet.k8s.io`.
pub fn has_node_agent(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(NODE_AGENT_ANNOTATION))
}

/// Why `pod` stays on its node although a drain targets it, or `None` when it can leave.
/// `request` is its EvictionRequest, if any: once that has handed the pod to the Eviction API,
/// a DaemonSet or static pod stays whatever was expected of it.
pub fn stays(pod: &CachedPod, request: Option<&EvictionRequest>, leaving: Leaving) -> Option<Stay> {
    let pod_type = pod_type(pod);
    if pod_type == PodType::Default {
        return None;
    }
    let own_interceptors = pod
        .interceptors()
        .iter()
        .any(|i| i != IMPERATIVE_INTERCEPTOR);
    let expected = match pod_type {
        _ if own_interceptors => None,
        PodType::DaemonSet if !leaving.daemonset_interceptor => Some(Stay::NoDaemonSetInterceptor),
        PodType::DaemonSet if pod.spec.tolerates_maintenance_taint => Some(Stay::ToleratesTaint),
        PodType::Static if !leaving.node_agent => Some(Stay::NoNodeAgent),
        _ => None,
    };
    let handed_to_the_api = request.and_then(|r| r.status.as_ref()).is_some_and(|s| {
        !s.is_terminal()
            && s.active_interceptors
                .iter()
                .any(|a| a == IMPERATIVE_INTERCEPTOR)
    });
    expected.or(handed_to_the_api.then_some(Stay::LeftByInterceptors))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;
    use crate::api::{
        EvictionRequestSpec, EvictionRequestStatus, EvictionTarget, INTERCEPTORS_ANNOTATION,
        MIRROR_POD_ANNOTATION, PodReference,
    };

    fn pod(kind: &str, tolerates: bool, own: bool) -> CachedPod {
        let mut p = CachedPod::default();
        match kind {
            "ds" => {
                p.metadata.owner_references = Some(vec![OwnerReference {
                    kind: "DaemonSet".into(),
                    name: "ds".into(),
                    controller: Some(true),
                    ..Default::default()
                }])
            }
            "static" => {
                p.metadata.annotations =
                    Some([(MIRROR_POD_ANNOTATION.to_string(), "h".to_string())].into())
            }
            _ => {}
        }
        if own {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(INTERCEPTORS_ANNOTATION.into(), "mine.example.com".into());
        }
        p.spec.tolerates_maintenance_taint = tolerates;
        p
    }

    fn request(active: &str, terminal: bool) -> EvictionRequest {
        let mut r = EvictionRequest::new(
            "u",
            EvictionRequestSpec {
                target: EvictionTarget {
                    pod: PodReference {
                        name: "p".into(),
                        uid: "u".into(),
                    },
                },
                ..Default::default()
            },
        );
        let mut s = EvictionRequestStatus {
            active_interceptors: vec![active.to_string()],
            ..Default::default()
        };
        if terminal {
            s.conditions
                .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                    type_: "Canceled".into(),
                    status: "True".into(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ),
                    message: String::new(),
                    observed_generation: None,
                    reason: "NoRequesters".into(),
                });
        }
        r.status = Some(s);
        r
    }

    const ALL: Leaving = Leaving {
        daemonset_interceptor: true,
        node_agent: true,
    };
    const NONE: Leaving = Leaving {
        daemonset_interceptor: false,
        node_agent: false,
    };

    #[rstest::rstest]
    #[case::default_pod_always_leaves(pod("", true, false), None, NONE, None)]
    #[case::daemonset_pod_leaves(pod("ds", false, false), None, ALL, None)]
    #[case::daemonset_pod_tolerating_the_taint(
        pod("ds", true, false),
        None,
        ALL,
        Some(Stay::ToleratesTaint)
    )]
    #[case::daemonset_interceptor_off(
        pod("ds", false, false),
        None,
        NONE,
        Some(Stay::NoDaemonSetInterceptor)
    )]
    #[case::daemonset_pod_with_its_own_interceptor(pod("ds", true, true), None, NONE, None)]
    #[case::static_pod_with_a_node_agent(pod("static", false, false), None, ALL, None)]
    #[case::static_pod_without_a_node_agent(
        pod("static", false, false),
        None,
        NONE,
        Some(Stay::NoNodeAgent)
    )]
    #[case::static_pod_with_its_own_interceptor(pod("static", false, true), None, NONE, None)]
    #[case::handed_to_the_api(
        pod("ds", false, true),
        Some(request(IMPERATIVE_INTERCEPTOR, false)),
        ALL,
        Some(Stay::LeftByInterceptors)
    )]
    #[case::still_with_its_interceptor(
        pod("ds", false, false),
        Some(request("daemonset.apps.k8s.io", false)),
        ALL,
        None
    )]
    #[case::ended_request_says_nothing(
        pod("static", false, false),
        Some(request(IMPERATIVE_INTERCEPTOR, true)),
        ALL,
        None
    )]
    fn stays_rows(
        #[case] p: CachedPod,
        #[case] r: Option<EvictionRequest>,
        #[case] leaving: Leaving,
        #[case] want: Option<Stay>,
    ) {
        assert_eq!(stays(&p, r.as_ref(), leaving), want);
    }
}
