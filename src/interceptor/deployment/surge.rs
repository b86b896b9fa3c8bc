//! What the Deployment interceptor knows about a Deployment: the surge it recorded in the
//! annotation `evictord.dev/surge` ([`SurgeRecord`]) and the few spec and status fields its
//! decisions read ([`DeploymentFacts`]).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

use super::SURGE_ANNOTATION;

/// A pod whose eviction a surge covers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SurgedPod {
    /// Pod name.
    pub name: String,
    /// Pod UID (also the name of its EvictionRequest).
    pub uid: String,
}

/// The surge recorded on a Deployment: `spec.replicas` is `base + pods.len()` while it lasts.
/// Recorded before anything else happens, so that a restarted evictord finishes or undoes it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct SurgeRecord {
    /// `spec.replicas` before the surge.
    pub base: i32,
    /// The pods being replaced, one extra replica each.
    pub pods: Vec<SurgedPod>,
    /// Pods whose surge was abandoned because someone else changed `spec.replicas`: they are
    /// not surged again (their requests complete saying so) and are forgotten once gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<SurgedPod>,
}

impl SurgeRecord {
    /// The `spec.replicas` this record expects; any other value was set by someone else.
    pub fn expected_replicas(&self) -> i32 {
        self.base
            .saturating_add(i32::try_from(self.pods.len()).unwrap_or(i32::MAX))
    }

    /// True when the surge covers the pod with this UID.
    pub fn covers(&self, uid: &str) -> bool {
        self.pods.iter().any(|p| p.uid == uid)
    }

    /// The record after someone else set `spec.replicas` to `replicas`: that is the new base,
    /// and every covered pod is abandoned.
    pub fn abandon(&self, replicas: i32) -> SurgeRecord {
        let mut abandoned = self.abandoned.clone();
        abandoned.extend(self.pods.iter().cloned());
        SurgeRecord {
            base: replicas,
            pods: Vec::new(),
            abandoned,
        }
    }
}

/// `spec.strategy.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// RollingUpdate (the default).
    RollingUpdate,
    /// Recreate: every pod is stopped before new ones start; no surge.
    Recreate,
}

/// The fields of a Deployment the decisions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentFacts {
    /// `spec.replicas` (default 1).
    pub replicas: i32,
    /// `spec.paused`.
    pub paused: bool,
    /// `spec.strategy.type`.
    pub strategy: Strategy,
    /// `maxSurge` resolved against `replicas`, raised to 1 when `maxSurge` and
    /// `maxUnavailable` both resolve to 0 (see [`resolve_max_surge`]).
    pub max_surge: i32,
    /// `maxUnavailable` resolved against `replicas`.
    pub max_unavailable: i32,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `status.replicas` (pods of every ReplicaSet).
    pub status_replicas: i32,
    /// `status.updatedReplicas` (pods of the current template).
    pub updated_replicas: i32,
    /// `status.availableReplicas`.
    pub available_replicas: i32,
    /// The HorizontalPodAutoscaler targeting the Deployment, if any.
    pub hpa: Option<String>,
    /// The recorded surge; `Err` holds an unreadable annotation.
    pub record: Result<Option<SurgeRecord>, String>,
}

/// An int-or-percent value against `total`; percentages round up (`up`) or down.
fn scaled(value: Option<&IntOrString>, default_percent: i32, total: i32, up: bool) -> i32 {
    match value {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct = s.trim_end_matches('%').parse::<i64>().unwrap_or(0);
            percent(pct, total, up)
        }
        None => percent(i64::from(default_percent), total, up),
    }
}

fn percent(pct: i64, total: i32, up: bool) -> i32 {
    let product = pct * i64::from(total);
    let v = if up {
        (product + 99).div_euclid(100)
    } else {
        product.div_euclid(100)
    };
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// `(maxSurge, maxUnavailable)` resolved as the deployment controller resolves them (surge
/// rounds up, unavailability down, 25 % each by default). When both are 0 the deployment
/// controller would take one pod down; this interceptor surges by one instead, since the user
/// asked for no unavailability at all.
pub fn resolve_max_surge(
    surge: Option<&IntOrString>,
    unavailable: Option<&IntOrString>,
    replicas: i32,
) -> (i32, i32) {
    let s = scaled(surge, 25, replicas, true).max(0);
    let u = scaled(unavailable, 25, replicas, false).max(0);
    if s == 0 && u == 0 { (1, 0) } else { (s, u) }
}

impl DeploymentFacts {
    /// Reads the facts of `d`; `hpa` is the autoscaler targeting it, if any.
    pub fn read(d: &Deployment, hpa: Option<String>) -> Self {
        let spec = d.spec.clone();
        let status = d.status.clone().unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let strategy = spec.strategy.unwrap_or_default();
        let rolling = strategy.rolling_update.unwrap_or_default();
        let (max_surge, max_unavailable) = resolve_max_surge(
            rolling.max_surge.as_ref(),
            rolling.max_unavailable.as_ref(),
            replicas,
        );
        let record = match d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SURGE_ANNOTATION))
        {
            None => Ok(None),
            Some(text) => serde_json::from_str::<SurgeRecord>(text)
                .map(Some)
                .map_err(|e| format!("{text:?}: {e}")),
        };
        Self {
            replicas,
            paused: spec.paused.unwrap_or(false),
            strategy: match strategy.type_.as_deref() {
                Some("Recreate") => Strategy::Recreate,
                _ => Strategy::RollingUpdate,
            },
            max_surge,
            max_unavailable,
            generation: d.metadata.generation.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
            status_replicas: status.replicas.unwrap_or(0),
            updated_replicas: status.updated_replicas.unwrap_or(0),
            available_replicas: status.available_replicas.unwrap_or(0),
            hpa,
            record,
        }
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn int(n: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(n))
    }
    fn pct(s: &str) -> Option<IntOrString> {
        Some(IntOrString::String(s.into()))
    }

    #[rstest]
    #[case::defaults_25_percent_of_4(None, None, 4, (1, 1))]
    #[case::defaults_round_surge_up(None, None, 1, (1, 0))]
    #[case::absolute(int(2), int(0), 3, (2, 0))]
    #[case::percent_up(pct("10%"), int(0), 3, (1, 0))]
    #[case::surge_zero_unavailable_allowed(int(0), int(1), 3, (0, 1))]
    #[case::both_zero_surge_one(pct("0%"), pct("10%"), 1, (1, 0))]
    fn resolve_rows(
        #[case] surge: Option<IntOrString>,
        #[case] unavailable: Option<IntOrString>,
        #[case] replicas: i32,
        #[case] expected: (i32, i32),
    ) {
        assert_eq!(
            resolve_max_surge(surge.as_ref(), unavailable.as_ref(), replicas),
            expected
        );
    }

    #[test]
    fn record_round_trip_and_expectation() {
        let r: SurgeRecord =
            serde_json::from_str(r#"{"base":3,"pods":[{"name":"p","uid":"u"}]}"#).unwrap();
        assert_eq!(r.expected_replicas(), 4);
        assert!(r.covers("u") && !r.covers("v"));
    }

    #[test]
    fn facts_read_defaults_and_a_bad_annotation() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "generation": 2, "annotations": {SURGE_ANNOTATION: "nope"}},
            "spec": {"selector": {}, "template": {}, "strategy": {"type": "Recreate"}, "paused": true},
        }))
        .unwrap();
        let f = DeploymentFacts::read(&d, None);
        assert_eq!(f.replicas, 1);
        assert_eq!(f.strategy, Strategy::Recreate);
        assert!(f.paused && f.record.is_err());
        assert_eq!(f.generation, 2);
    }
}
