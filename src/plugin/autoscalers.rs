//! Which HorizontalPodAutoscaler will raise its floor before a planned pod leaves: for a pod that
//! declares `horizontalpodautoscaler.autoscaling.k8s.io`, the autoscaler the interceptor will
//! find, decided with the interceptor's own functions ([`controller_chain`], [`autoscaler_for`])
//! from the ReplicaSets and autoscalers `plan` has read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::cluster::CachedPod;
use crate::interceptor::hpa::NAME as HPA_INTERCEPTOR;
use crate::interceptor::hpa::target::{
    Autoscaler, Scaled, autoscaler_for, controller_chain, controller_of,
};

use super::planned::Preview;

/// A ReplicaSet's controller (a Deployment, an Argo Rollout, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSetOwner {
    /// Namespace.
    pub namespace: String,
    /// The ReplicaSet's name.
    pub name: String,
    /// Its controller owner, if any.
    pub owner: Option<OwnerReference>,
}

/// An autoscaler and its namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespacedAutoscaler {
    /// Namespace.
    pub namespace: String,
    /// Name and target.
    pub autoscaler: Autoscaler,
}

/// `web-hpa (Deployment web)`: the autoscaler the HPA interceptor will raise for `pod`, if the pod
/// declares that interceptor and one autoscaler scales one of its controllers.
pub fn surging_autoscaler(
    pod: &CachedPod,
    replicasets: &[ReplicaSetOwner],
    autoscalers: &[NamespacedAutoscaler],
) -> Option<String> {
    if !pod.interceptors().iter().any(|i| i == HPA_INTERCEPTOR) {
        return None;
    }
    let ns = pod.namespace();
    let owner = controller_of(pod.metadata.owner_references.as_ref());
    let above = owner
        .and_then(|o| {
            replicasets
                .iter()
                .find(|rs| rs.namespace == ns && rs.name == o.name)
        })
        .and_then(|rs| rs.owner.as_ref());
    let chain = controller_chain(owner, above);
    let here: Vec<Autoscaler> = autoscalers
        .iter()
        .filter(|a| a.namespace == ns)
        .map(|a| a.autoscaler.clone())
        .collect();
    match autoscaler_for(&chain, &here) {
        Scaled::By {
            autoscaler,
            workload,
        } => Some(format!("{} ({workload})", autoscaler.name)),
        Scaled::No | Scaled::Ambiguous { .. } => None,
    }
}

/// Fills in [`PlannedPod::autoscaler`](super::planned::PlannedPod::autoscaler) for the pods of
/// `preview` (`pods` are the pods it was made from).
pub fn name_autoscalers(
    preview: &mut Preview,
    pods: &[CachedPod],
    replicasets: &[ReplicaSetOwner],
    autoscalers: &[NamespacedAutoscaler],
) {
    for planned in &mut preview.pods {
        planned.autoscaler = pods
            .iter()
            .find(|p| p.namespace() == planned.namespace && p.name() == planned.name)
            .and_then(|p| surging_autoscaler(p, replicasets, autoscalers));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interceptor::hpa::target::Workload;
    use crate::plugin::fixtures::pod;

    fn deployment_of(rs: &str, deployment: &str) -> ReplicaSetOwner {
        ReplicaSetOwner {
            namespace: "ns".into(),
            name: rs.into(),
            owner: Some(OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: deployment.into(),
                controller: Some(true),
                ..Default::default()
            }),
        }
    }

    fn hpa(namespace: &str, name: &str, deployment: &str) -> NamespacedAutoscaler {
        NamespacedAutoscaler {
            namespace: namespace.into(),
            autoscaler: Autoscaler {
                name: name.into(),
                target: Workload {
                    api_version: Some("apps/v1".into()),
                    kind: "Deployment".into(),
                    name: deployment.into(),
                },
            },
        }
    }

    #[test]
    fn names_the_autoscaler_of_the_pods_deployment() {
        let declared = pod("web-1-a")
            .replicaset("web-1")
            .interceptors("horizontalpodautoscaler.autoscaling.k8s.io,deployment.apps.k8s.io")
            .build();
        let sets = [deployment_of("web-1", "web")];
        let hpas = [
            hpa("other", "elsewhere", "web"),
            hpa("ns", "web-hpa", "web"),
        ];
        assert_eq!(
            surging_autoscaler(&declared, &sets, &hpas).as_deref(),
            Some("web-hpa (Deployment web)")
        );
        // Not declared: the interceptor never runs for it.
        let undeclared = pod("web-1-b")
            .replicaset("web-1")
            .interceptors("deployment.apps.k8s.io")
            .build();
        assert_eq!(surging_autoscaler(&undeclared, &sets, &hpas), None);
        // No autoscaler in its namespace.
        assert_eq!(
            surging_autoscaler(&declared, &sets, &[hpa("other", "x", "web")]),
            None
        );
    }

    /// What `plan` prints for such a pod.
    #[test]
    fn plan_names_the_autoscaler() {
        use crate::api::Stage;
        use crate::plugin::fixtures::{node, t};
        use crate::plugin::maintenance::maintenance_for;
        use crate::plugin::preview::preview;
        use crate::plugin::report::{plan_report, plan_text};

        let pods = [
            pod("web-1-a")
                .replicaset("web-1")
                .interceptors("horizontalpodautoscaler.autoscaling.k8s.io")
                .build(),
            pod("plain").build(),
        ];
        let selected = vec!["n1".to_string()];
        let nodes = [node("n1")];
        let mine = maintenance_for("mine", &selected, &[], None, Stage::Drain);
        let mut p = preview(&mine, &[], &nodes, &pods, &[], &Default::default(), t(0));
        name_autoscalers(
            &mut p,
            &pods,
            &[deployment_of("web-1", "web")],
            &[hpa("ns", "web-hpa", "web")],
        );
        let r = plan_report(p, &selected, &pods, &[], &[], &nodes, None);
        let named: Vec<(&str, Option<&str>)> = r
            .pods
            .iter()
            .map(|p| (p.name.as_str(), p.autoscaler.as_deref()))
            .collect();
        assert_eq!(
            named,
            vec![
                ("plain", None),
                ("web-1-a", Some("web-hpa (Deployment web)"))
            ]
        );
        let text = plan_text(&r);
        assert!(
            text.contains(
                "HorizontalPodAutoscaler web-hpa (Deployment web) gets a higher minReplicas first"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["pods"][1]["autoscaler"], "web-hpa (Deployment web)");
        assert!(json["pods"][0].get("autoscaler").is_none());
    }
}
