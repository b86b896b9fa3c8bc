//! What the HPA interceptor knows about the workload an autoscaler scales ([`WorkloadFacts`]),
//! pure: its replicas from the scale subresource (what the autoscaler itself reads and writes),
//! its available replicas from the object's status, and for a Deployment the facts the
//! Deployment interceptor reads ([`DeploymentFacts`]) and its rolling update settings, resolved
//! with the Deployment interceptor's own [`resolve_max_surge`].

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::target::Workload;
use crate::interceptor::deployment::surge::{DeploymentFacts, resolve_max_surge};

/// A Deployment's part of the facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentPart {
    /// The facts the Deployment interceptor reads (paused, strategy, rollout, availability).
    pub facts: DeploymentFacts,
    /// `spec.strategy.rollingUpdate.maxSurge`, unresolved.
    pub max_surge: Option<IntOrString>,
    /// `spec.strategy.rollingUpdate.maxUnavailable`, unresolved.
    pub max_unavailable: Option<IntOrString>,
}

impl DeploymentPart {
    /// `(maxSurge, maxUnavailable)` against `replicas`, as the Deployment interceptor resolves them.
    pub fn surge_at(&self, replicas: i32) -> (i32, i32) {
        resolve_max_surge(
            self.max_surge.as_ref(),
            self.max_unavailable.as_ref(),
            replicas,
        )
    }
}

/// The fields of a scaled workload the decisions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadFacts {
    /// The workload.
    pub workload: Workload,
    /// `spec.replicas` of its scale subresource.
    pub replicas: i32,
    /// `status.availableReplicas`, else `status.readyReplicas`.
    pub available: i32,
    /// The workload's controller has seen its latest spec (`status.observedGeneration` ≥
    /// `metadata.generation`, where it reports one).
    pub caught_up: bool,
    /// For a Deployment: its facts and surge settings.
    pub deployment: Option<DeploymentPart>,
}

fn int(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_i64()
}

fn to_i32(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(if n < 0 { 0 } else { i32::MAX })
}

/// Kinds whose status leaves out a zero count (`omitempty`): an absent count is 0.
fn counts_omit_zero(w: &Workload) -> bool {
    match w.group() {
        Some("apps") => matches!(w.kind.as_str(), "StatefulSet" | "ReplicaSet"),
        Some("") => w.kind == "ReplicationController",
        _ => false,
    }
}

impl WorkloadFacts {
    /// The facts of Deployment `workload`, read from the Deployment `d` itself (a watch cache's):
    /// the replicas of its scale subresource are its `spec.replicas` (1 when unset, as the API
    /// defaults it).
    pub fn of_deployment(workload: &Workload, d: &Deployment) -> Self {
        let facts = DeploymentFacts::read(d, None);
        let rolling = d
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.clone())
            .unwrap_or_default();
        Self {
            workload: workload.clone(),
            replicas: d.spec.replicas.unwrap_or(1),
            available: facts.available_replicas,
            caught_up: facts.observed_generation >= facts.generation,
            deployment: Some(DeploymentPart {
                facts,
                max_surge: rolling.max_surge,
                max_unavailable: rolling.max_unavailable,
            }),
        }
    }

    /// The facts of `workload`, whose scale subresource says `scale_replicas` and whose object is
    /// `object`; `Err` says why its available replicas cannot be read.
    ///
    /// # Errors
    /// A Deployment that does not parse, or another kind whose status reports neither
    /// `availableReplicas` nor `readyReplicas`.
    pub fn read(workload: &Workload, scale_replicas: i32, object: &Value) -> Result<Self, String> {
        if workload.is_deployment() {
            let d: Deployment = serde_json::from_value(object.clone())
                .map_err(|e| format!("{workload} does not parse: {e}"))?;
            return Ok(Self {
                replicas: scale_replicas,
                ..Self::of_deployment(workload, &d)
            });
        }
        let available = int(object, &["status", "availableReplicas"])
            .or_else(|| int(object, &["status", "readyReplicas"]))
            .or_else(|| counts_omit_zero(workload).then_some(0))
            .ok_or_else(|| {
                format!(
                    "the ready replicas of {workload} cannot be read (its status has neither availableReplicas nor readyReplicas)"
                )
            })?;
        let caught_up = match (
            int(object, &["metadata", "generation"]),
            int(object, &["status", "observedGeneration"]),
        ) {
            (Some(generation), Some(observed)) => observed >= generation,
            _ => true,
        };
        Ok(Self {
            workload: workload.clone(),
            replicas: scale_replicas,
            available: to_i32(available),
            caught_up,
            deployment: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn workload(api_version: &str, kind: &str) -> Workload {
        Workload {
            api_version: Some(api_version.into()),
            kind: kind.into(),
            name: "w".into(),
        }
    }

    #[test]
    fn a_deployment_reads_like_the_deployment_interceptor() {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "generation": 3},
            "spec": {"replicas": 4, "selector": {}, "template": {},
                     "strategy": {"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}}},
            "status": {"observedGeneration": 2, "availableReplicas": 4, "replicas": 4, "updatedReplicas": 4},
        });
        let f = WorkloadFacts::read(&workload("apps/v1", "Deployment"), 4, &d).unwrap();
        assert_eq!((f.replicas, f.available, f.caught_up), (4, 4, false));
        let part = f.deployment.unwrap();
        assert_eq!(part.surge_at(4), (2, 0));
        assert_eq!(part.surge_at(1), (1, 0), "percentages round up");
        assert!(!part.facts.paused);
    }

    /// A Deployment from a watch cache reads as through its scale subresource and object: the
    /// scale's replicas are `spec.replicas` (1 when unset).
    #[rstest::rstest]
    #[case::replicas(json!(4), 4)]
    #[case::unset(serde_json::Value::Null, 1)]
    fn a_cached_deployment_reads_as_its_scale(#[case] replicas: Value, #[case] scale: i32) {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "generation": 3},
            "spec": {"replicas": replicas, "selector": {}, "template": {},
                     "strategy": {"rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}}},
            "status": {"observedGeneration": 3, "availableReplicas": 3, "replicas": 4, "updatedReplicas": 4},
        });
        let w = workload("apps/v1", "Deployment");
        let typed: Deployment = serde_json::from_value(d.clone()).unwrap();
        let cached = WorkloadFacts::of_deployment(&w, &typed);
        assert_eq!(cached, WorkloadFacts::read(&w, scale, &d).unwrap());
        assert_eq!(
            (cached.replicas, cached.available, cached.caught_up),
            (scale, 3, true)
        );
    }

    #[rstest::rstest]
    // A StatefulSet on servers before 1.22 reports ready, not available, replicas.
    #[case::statefulset_ready(workload("apps/v1", "StatefulSet"), json!({"status": {"readyReplicas": 2}}), Ok(2))]
    #[case::statefulset_available(workload("apps/v1", "StatefulSet"), json!({"status": {"readyReplicas": 3, "availableReplicas": 2}}), Ok(2))]
    // Zero counts are left out of a StatefulSet's status.
    #[case::statefulset_none_ready(workload("apps/v1", "StatefulSet"), json!({"status": {"replicas": 1}}), Ok(0))]
    #[case::replication_controller_none_ready(workload("v1", "ReplicationController"), json!({"status": {"replicas": 1}}), Ok(0))]
    #[case::custom_resource(workload("example.com/v1", "Widget"), json!({"status": {"readyReplicas": 1}}), Ok(1))]
    #[case::custom_resource_without_counts(workload("example.com/v1", "Widget"), json!({"status": {"phase": "Running"}}), Err("cannot be read"))]
    fn available_replicas(
        #[case] w: Workload,
        #[case] object: Value,
        #[case] expected: Result<i32, &str>,
    ) {
        match (WorkloadFacts::read(&w, 1, &object), expected) {
            (Ok(f), Ok(n)) => assert_eq!(f.available, n),
            (Err(e), Err(text)) => assert!(e.contains(text), "{e}"),
            (got, want) => panic!("{got:?}, want {want:?}"),
        }
    }

    #[test]
    fn generation_observed() {
        let w = workload("apps/v1", "StatefulSet");
        let behind = json!({"metadata": {"generation": 5}, "status": {"observedGeneration": 4}});
        assert!(!WorkloadFacts::read(&w, 1, &behind).unwrap().caught_up);
        let unknown = json!({"metadata": {"generation": 5}, "status": {}});
        assert!(WorkloadFacts::read(&w, 1, &unknown).unwrap().caught_up);
    }
}
