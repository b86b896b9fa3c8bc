//! Which HorizontalPodAutoscaler scales a pod, pure: the pod's chain of controllers
//! ([`controller_chain`]: its own controller, and a ReplicaSet's Deployment or other owner) against
//! the `scaleTargetRef` of the autoscalers of its namespace ([`autoscaler_for`]). The interceptor
//! and `kubectl evictord plan` both decide with these two functions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// A workload, as an owner reference or a `scaleTargetRef` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// `apiVersion` (`apps/v1`); unknown when the reference has none.
    pub api_version: Option<String>,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

impl Workload {
    /// The workload an owner reference names.
    pub fn owner(o: &OwnerReference) -> Self {
        Self {
            api_version: (!o.api_version.is_empty()).then(|| o.api_version.clone()),
            kind: o.kind.clone(),
            name: o.name.clone(),
        }
    }

    /// The API group (`""` for the core group), if the version is known.
    pub fn group(&self) -> Option<&str> {
        let v = self.api_version.as_deref()?;
        Some(v.rsplit_once('/').map_or("", |(group, _)| group))
    }

    /// True for an `apps` ReplicaSet (or a ReplicaSet of unknown version), whose own controller is
    /// looked up too.
    pub fn is_replicaset(&self) -> bool {
        self.kind == "ReplicaSet" && self.group().is_none_or(|g| g == "apps")
    }

    /// True for an `apps` Deployment.
    pub fn is_deployment(&self) -> bool {
        self.kind == "Deployment" && self.group() == Some("apps")
    }

    /// True when `other` names the same object: same kind and name, and the same group wherever
    /// both are known (versions may differ).
    pub fn same_as(&self, other: &Workload) -> bool {
        self.kind == other.kind
            && self.name == other.name
            && match (self.group(), other.group()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// A HorizontalPodAutoscaler: its name and `spec.scaleTargetRef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Autoscaler {
    /// Name.
    pub name: String,
    /// `spec.scaleTargetRef`.
    pub target: Workload,
}

/// The pod's chain of controllers, innermost first: the pod's controller and, when that is a
/// ReplicaSet, the ReplicaSet's controller (`replicaset_owner`, e.g. a Deployment or an Argo
/// Rollout). Empty for a pod without a controller.
pub fn controller_chain(
    pod_owner: Option<&OwnerReference>,
    replicaset_owner: Option<&OwnerReference>,
) -> Vec<Workload> {
    let Some(owner) = pod_owner.map(Workload::owner) else {
        return Vec::new();
    };
    let above = replicaset_owner
        .filter(|_| owner.is_replicaset())
        .map(Workload::owner);
    std::iter::once(owner).chain(above).collect()
}

/// The controller owner among `owners`.
pub fn controller_of(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners?.iter().find(|o| o.controller == Some(true))
}

/// Which autoscaler scales a pod whose chain of controllers is `chain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scaled<'a> {
    /// None of the autoscalers targets the chain.
    No,
    /// `autoscaler` targets `workload` (the outermost workload of the chain that one targets:
    /// a Deployment before its ReplicaSet).
    By {
        /// The autoscaler.
        autoscaler: &'a Autoscaler,
        /// Its target in the chain.
        workload: &'a Workload,
    },
    /// Several autoscalers target `workload`: they fight each other, nothing can be raised safely.
    Ambiguous {
        /// Their names.
        autoscalers: Vec<&'a str>,
        /// The workload.
        workload: &'a Workload,
    },
}

/// The autoscaler of the pod whose controllers are `chain` (from [`controller_chain`]), among
/// the autoscalers of its namespace.
pub fn autoscaler_for<'a>(chain: &'a [Workload], autoscalers: &'a [Autoscaler]) -> Scaled<'a> {
    for workload in chain.iter().rev() {
        let mut matching = autoscalers.iter().filter(|a| a.target.same_as(workload));
        match (matching.next(), matching.next()) {
            (None, _) => continue,
            (Some(autoscaler), None) => {
                return Scaled::By {
                    autoscaler,
                    workload,
                };
            }
            (Some(first), Some(second)) => {
                let mut names = vec![first.name.as_str(), second.name.as_str()];
                names.extend(matching.map(|a| a.name.as_str()));
                return Scaled::Ambiguous {
                    autoscalers: names,
                    workload,
                };
            }
        }
    }
    Scaled::No
}

/// `ReplicaSet web-1 or Deployment web`: the chain, for messages.
pub fn chain_text(chain: &[Workload]) -> String {
    chain
        .iter()
        .map(Workload::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(api_version: &str, kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    fn hpa(name: &str, api_version: Option<&str>, kind: &str, target: &str) -> Autoscaler {
        Autoscaler {
            name: name.into(),
            target: Workload {
                api_version: api_version.map(str::to_string),
                kind: kind.into(),
                name: target.into(),
            },
        }
    }

    fn deployment_chain() -> Vec<Workload> {
        controller_chain(
            Some(&owner("apps/v1", "ReplicaSet", "web-1")),
            Some(&owner("apps/v1", "Deployment", "web")),
        )
    }

    #[test]
    fn chains() {
        assert_eq!(
            chain_text(&deployment_chain()),
            "ReplicaSet web-1 or Deployment web"
        );
        let sts = controller_chain(Some(&owner("apps/v1", "StatefulSet", "db")), None);
        assert_eq!(chain_text(&sts), "StatefulSet db");
        // Only a ReplicaSet's owner is followed.
        let other = controller_chain(
            Some(&owner("example.com/v1", "Widget", "w")),
            Some(&owner("apps/v1", "Deployment", "web")),
        );
        assert_eq!(chain_text(&other), "Widget w");
        assert!(controller_chain(None, None).is_empty());
        // A cached pod's owner has no apiVersion: a ReplicaSet is still followed.
        let cached = controller_chain(
            Some(&owner("", "ReplicaSet", "web-1")),
            Some(&owner("apps/v1", "Deployment", "web")),
        );
        assert_eq!(cached.len(), 2);
    }

    #[rstest::rstest]
    #[case::deployment(vec![hpa("h", Some("apps/v1"), "Deployment", "web")], Some(("h", "Deployment web")))]
    // Versions may differ, groups may not.
    #[case::other_version(vec![hpa("h", Some("apps/v1beta1"), "Deployment", "web")], Some(("h", "Deployment web")))]
    #[case::other_group(vec![hpa("h", Some("example.com/v1"), "Deployment", "web")], None)]
    #[case::no_api_version(vec![hpa("h", None, "Deployment", "web")], Some(("h", "Deployment web")))]
    #[case::other_name(vec![hpa("h", Some("apps/v1"), "Deployment", "api")], None)]
    #[case::the_replicaset(vec![hpa("h", Some("apps/v1"), "ReplicaSet", "web-1")], Some(("h", "ReplicaSet web-1")))]
    // Deployment first: an autoscaler of the Deployment wins over one of its ReplicaSet.
    #[case::deployment_first(vec![hpa("rs", Some("apps/v1"), "ReplicaSet", "web-1"), hpa("d", Some("apps/v1"), "Deployment", "web")], Some(("d", "Deployment web")))]
    #[case::none(vec![], None)]
    fn which_autoscaler(#[case] hpas: Vec<Autoscaler>, #[case] expected: Option<(&str, &str)>) {
        let chain = deployment_chain();
        let found = match autoscaler_for(&chain, &hpas) {
            Scaled::By {
                autoscaler,
                workload,
            } => Some((autoscaler.name.as_str(), workload.to_string())),
            Scaled::No => None,
            Scaled::Ambiguous { .. } => panic!("ambiguous"),
        };
        assert_eq!(
            found,
            expected.map(|(name, workload)| (name, workload.to_string()))
        );
    }

    #[test]
    fn two_autoscalers_of_one_workload_are_ambiguous() {
        let chain = deployment_chain();
        let hpas = [
            hpa("a", Some("apps/v1"), "Deployment", "web"),
            hpa("b", Some("apps/v1"), "Deployment", "web"),
        ];
        assert_eq!(
            autoscaler_for(&chain, &hpas),
            Scaled::Ambiguous {
                autoscalers: vec!["a", "b"],
                workload: &chain[1]
            }
        );
    }
}
