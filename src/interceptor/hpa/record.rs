//! What the HPA interceptor knows about a HorizontalPodAutoscaler: the surge it recorded in the
//! annotation `evictord.dev/hpa-surge` ([`HpaSurgeRecord`]), the floor and ceiling it reads and
//! writes ([`Limits`]) and its target ([`AutoscalerFacts`]), read from the object in any
//! `autoscaling` version (the fields are the same in `v1`, `v2beta2` and `v2`).

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::RECORD_ANNOTATION;
use super::target::{Autoscaler, Workload};
use crate::interceptor::deployment::surge::SurgedPod;

/// `spec.minReplicas` and `spec.maxReplicas` of an autoscaler.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `spec.minReplicas` (the API defaults it to 1).
    pub min: i32,
    /// `spec.maxReplicas`.
    pub max: i32,
}

/// The surge recorded on an autoscaler. While it covers pods, `spec.minReplicas` is
/// [`HpaSurgeRecord::expected`]`.min`: the workload's replicas when the first pod joined (`base`)
/// plus one per covered pod, and `spec.maxReplicas` is raised to it where it was lower. Written in
/// the same patch as the limits, so that a restarted evictord finishes or undoes it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HpaSurgeRecord {
    /// The limits before the surge: written back when it ends. A user's change replaces them
    /// (their value is the one to keep).
    pub before: Limits,
    /// The workload's replicas when the first covered pod joined, within the limits.
    pub base: i32,
    /// The pods being replaced, one replica each.
    pub pods: Vec<SurgedPod>,
    /// Pods whose surge was abandoned because someone else changed `spec.minReplicas`: not
    /// surged again (their requests complete saying so), forgotten once gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<SurgedPod>,
}

impl HpaSurgeRecord {
    /// A record of no surge yet over `limits`, for a workload of `replicas`.
    pub fn start(limits: Limits, replicas: i32) -> Self {
        Self {
            before: limits,
            base: replicas.clamp(limits.min, limits.max.max(limits.min)),
            pods: Vec::new(),
            abandoned: Vec::new(),
        }
    }

    /// The replicas the workload must have available while the covered pods leave.
    pub fn want(&self) -> i32 {
        self.base
            .saturating_add(i32::try_from(self.pods.len()).unwrap_or(i32::MAX))
    }

    /// The limits this record expects on the autoscaler; any other value was set by someone else.
    pub fn expected(&self) -> Limits {
        if self.pods.is_empty() {
            return self.before;
        }
        let min = self.before.min.max(self.want());
        Limits {
            min,
            max: self.before.max.max(min),
        }
    }

    /// True when the surge covers the pod with this UID.
    pub fn covers(&self, uid: &str) -> bool {
        self.pods.iter().any(|p| p.uid == uid)
    }

    /// True when the pod with this UID was covered by a surge someone else overrode.
    pub fn abandoned(&self, uid: &str) -> bool {
        self.abandoned.iter().any(|p| p.uid == uid)
    }

    /// True when the record holds no pod at all (it can be removed).
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.abandoned.is_empty()
    }
}

/// The fields of an autoscaler the decisions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoscalerFacts {
    /// Name and target.
    pub autoscaler: Autoscaler,
    /// Its limits now.
    pub limits: Limits,
    /// The recorded surge; `Err` holds an unreadable annotation.
    pub record: Result<Option<HpaSurgeRecord>, String>,
}

fn int(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_i64()
}

impl AutoscalerFacts {
    /// Reads the facts of `hpa` (any `autoscaling` version).
    pub fn read(hpa: &DynamicObject) -> Self {
        let spec = hpa.data.get("spec").cloned().unwrap_or(Value::Null);
        let target = spec.get("scaleTargetRef").cloned().unwrap_or(Value::Null);
        let text = |k: &str| target.get(k).and_then(Value::as_str).map(str::to_string);
        let clamp = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
        let record = match hpa
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RECORD_ANNOTATION))
        {
            None => Ok(None),
            Some(text) => serde_json::from_str::<HpaSurgeRecord>(text)
                .map(Some)
                .map_err(|e| format!("{text:?}: {e}")),
        };
        Self {
            autoscaler: Autoscaler {
                name: hpa.metadata.name.clone().unwrap_or_default(),
                target: Workload {
                    api_version: text("apiVersion"),
                    kind: text("kind").unwrap_or_default(),
                    name: text("name").unwrap_or_default(),
                },
            },
            limits: Limits {
                min: int(&spec, &["minReplicas"]).map_or(1, clamp),
                max: int(&spec, &["maxReplicas"]).map_or(0, clamp),
            },
            record,
        }
    }
}

/// The JSON patch of an autoscaler at `resource_version` with `annotations` that moves its limits
/// `from` → `to` (only the ones that differ, each tested first) and writes `record` into
/// [`RECORD_ANNOTATION`] (removes it for `None`). It fails unless the autoscaler is still the
/// version read, so a concurrent change (a user's) is never overwritten.
pub fn autoscaler_patch(
    resource_version: &str,
    annotations: Option<&BTreeMap<String, String>>,
    from: Limits,
    to: Limits,
    record: Option<&HpaSurgeRecord>,
) -> Vec<Value> {
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})];
    for (field, was, now) in [
        ("minReplicas", from.min, to.min),
        ("maxReplicas", from.max, to.max),
    ] {
        if was != now {
            let path = format!("/spec/{field}");
            ops.push(json!({"op": "test", "path": path, "value": was}));
            ops.push(json!({"op": "replace", "path": path, "value": now}));
        }
    }
    let key = format!(
        "/metadata/annotations/{}",
        RECORD_ANNOTATION.replace('/', "~1")
    );
    let text = |r: &HpaSurgeRecord| serde_json::to_string(r).unwrap_or_default();
    match (record, annotations) {
        (Some(r), Some(_)) => ops.push(json!({"op": "add", "path": key, "value": text(r)})),
        (Some(r), None) => ops.push(
            json!({"op": "add", "path": "/metadata/annotations", "value": {RECORD_ANNOTATION: text(r)}}),
        ),
        (None, Some(a)) if a.contains_key(RECORD_ANNOTATION) => {
            ops.push(json!({"op": "remove", "path": key}))
        }
        (None, _) => {}
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> SurgedPod {
        SurgedPod {
            name: format!("pod-{uid}"),
            uid: uid.into(),
        }
    }

    fn limits(min: i32, max: i32) -> Limits {
        Limits { min, max }
    }

    #[test]
    fn expectations_follow_the_covered_pods() {
        let mut r = HpaSurgeRecord::start(limits(1, 3), 1);
        assert_eq!(
            r.expected(),
            limits(1, 3),
            "nothing covered: the limits before"
        );
        r.pods.push(pod("a"));
        assert_eq!(r.expected(), limits(2, 3));
        r.pods.push(pod("b"));
        r.pods.push(pod("c"));
        assert_eq!(r.expected(), limits(4, 4), "the ceiling follows the floor");
        // The workload scaled above the floor by load: the floor goes above it.
        let mut r = HpaSurgeRecord::start(limits(2, 10), 5);
        r.pods.push(pod("a"));
        assert_eq!((r.want(), r.expected()), (6, limits(6, 10)));
    }

    #[test]
    fn base_is_where_the_autoscaler_will_hold_the_workload() {
        assert_eq!(HpaSurgeRecord::start(limits(2, 5), 7).base, 5, "above max");
        assert_eq!(HpaSurgeRecord::start(limits(2, 5), 1).base, 2, "below min");
        assert_eq!(HpaSurgeRecord::start(limits(2, 5), 3).base, 3);
    }

    #[test]
    fn record_round_trip() {
        let r: HpaSurgeRecord = serde_json::from_str(
            r#"{"before":{"min":1,"max":3},"base":1,"pods":[{"name":"p","uid":"u"}]}"#,
        )
        .unwrap();
        assert!(r.covers("u") && !r.covers("v") && !r.abandoned("u"));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"before":{"min":1,"max":3},"base":1,"pods":[{"name":"p","uid":"u"}]}"#
        );
    }

    #[test]
    fn facts_read_any_version_and_a_bad_annotation() {
        let hpa: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {RECORD_ANNOTATION: "nope"}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "maxReplicas": 3,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]},
        }))
        .unwrap();
        let f = AutoscalerFacts::read(&hpa);
        assert_eq!(f.limits, limits(1, 3), "minReplicas defaults to 1");
        assert_eq!(f.autoscaler.name, "h");
        assert_eq!(f.autoscaler.target.kind, "Deployment");
        assert_eq!(f.autoscaler.target.api_version.as_deref(), Some("apps/v1"));
        assert!(f.record.is_err());
    }

    #[rstest::rstest]
    // Raising the floor only: the ceiling is not in the patch.
    #[case::floor(None, limits(1, 3), limits(2, 3), Some(true), 4)]
    // Both: two tests and two replaces, and the annotation map created.
    #[case::both(None, limits(1, 1), limits(2, 2), Some(true), 6)]
    // Putting back and dropping the record.
    #[case::restore(Some(true), limits(2, 3), limits(1, 3), None, 4)]
    // Only the record (a user's ceiling adopted).
    #[case::record_only(Some(true), limits(2, 5), limits(2, 5), Some(true), 2)]
    // No record to remove: the resourceVersion test alone.
    #[case::nothing(Some(false), limits(1, 3), limits(1, 3), None, 1)]
    fn patches(
        #[case] annotated: Option<bool>,
        #[case] from: Limits,
        #[case] to: Limits,
        #[case] record: Option<bool>,
        #[case] ops: usize,
    ) {
        let annotations: Option<BTreeMap<String, String>> = annotated.map(|with| {
            let mut a = BTreeMap::from([("x".to_string(), "y".to_string())]);
            if with {
                a.insert(RECORD_ANNOTATION.into(), "{}".into());
            }
            a
        });
        let r = record.map(|_| HpaSurgeRecord::start(from, 1));
        let patch = autoscaler_patch("42", annotations.as_ref(), from, to, r.as_ref());
        assert_eq!(patch.len(), ops, "{patch:?}");
        assert_eq!(patch[0]["path"], "/metadata/resourceVersion");
        // Every replace is preceded by a test of the value it replaces.
        for (i, op) in patch.iter().enumerate() {
            if op["op"] == "replace" {
                assert_eq!(patch[i - 1]["op"], "test");
                assert_eq!(patch[i - 1]["path"], op["path"]);
            }
        }
        // The patch applies to such an object.
        let mut object = json!({"metadata": {"resourceVersion": "42"},
            "spec": {"minReplicas": from.min, "maxReplicas": from.max}});
        if let Some(a) = &annotations {
            object["metadata"]["annotations"] = json!(a);
        }
        let p: json_patch::Patch = serde_json::from_value(Value::Array(patch)).unwrap();
        json_patch::patch(&mut object, &p).unwrap();
        assert_eq!(object["spec"]["minReplicas"], to.min);
        assert_eq!(object["spec"]["maxReplicas"], to.max);
        let recorded = object["metadata"]["annotations"].get(RECORD_ANNOTATION);
        assert_eq!(recorded.is_some(), record.is_some());
    }
}
