//! `CachedPod`: the fields of a Pod that evictord's decisions need, and nothing else. Watched
//! and cached in this form so that a large cluster costs little memory: the rest of the pod
//! (containers, volumes, status details, managed fields) is skipped while decoding.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Deserializer, Serialize};

use super::labels::{CompactLabels, PodLabels};
use crate::api::{INTERCEPTORS_ANNOTATION, MIRROR_POD_ANNOTATION, PodType, parse_interceptor_list};
use crate::serving::SERVING_CONDITION;

/// A Pod reduced to what evictord decides on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CachedPod {
    /// Name, namespace, uid, labels, the interceptor and mirror annotations, the controller owner
    /// reference and the deletion timestamp (the rest is dropped by [`CachedPod::trim`]).
    pub metadata: ObjectMeta,
    /// Node, priority and workload membership.
    #[serde(default)]
    pub spec: CachedPodSpec,
    /// Phase.
    #[serde(default)]
    pub status: CachedPodStatus,
    /// The labels once trimmed ([`CachedPod::trim`] moves them out of `metadata.labels`).
    #[serde(skip)]
    pub compact_labels: CompactLabels,
    /// The name was generated from `metadata.generateName` (set by [`CachedPod::trim`], which
    /// drops `generateName` itself): no successor takes it again (the cache's tombstones).
    #[serde(skip)]
    pub name_generated: bool,
}

/// The parts of the pod spec decisions need.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    /// The node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Resolved priority (0 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Whether the pod belongs to a Workload/PodGroup (`spec.workloadRef`, later
    /// `spec.schedulingGroup`): such pods cannot be evicted one by one.
    #[serde(
        default,
        rename = "workloadRef",
        deserialize_with = "present",
        skip_serializing_if = "is_false"
    )]
    pub workload_ref: bool,
    /// Whether `spec.tolerations` tolerate the maintenance taint (SPEC 5.3): a DaemonSet pod that
    /// does would be recreated at once, so it is not removed. Decoded from the tolerations, which
    /// are not kept.
    #[serde(
        default,
        rename = "tolerations",
        deserialize_with = "tolerates_maintenance_taint",
        skip_serializing
    )]
    pub tolerates_maintenance_taint: bool,
    /// Successor of `workloadRef` in newer Kubernetes versions.
    #[serde(
        default,
        rename = "schedulingGroup",
        deserialize_with = "present",
        skip_serializing
    )]
    pub scheduling_group: bool,
    /// Whether a volume is an `emptyDir` (SPEC 6.2): its data is lost when the pod leaves, which
    /// `kubectl drain` refuses without `--delete-emptydir-data`. Decoded from the volumes, which
    /// are not kept.
    #[serde(
        default,
        rename = "volumes",
        deserialize_with = "has_empty_dir",
        skip_serializing_if = "is_false"
    )]
    pub empty_dir: bool,
    /// Whether `spec.readinessGates` holds the `evictord.dev/serving` gate (SPEC 6.4), which the
    /// keeper sets `True`. Decoded from the gates, which are not kept.
    #[serde(
        default,
        rename = "readinessGates",
        deserialize_with = "has_serving_gate",
        skip_serializing_if = "is_false"
    )]
    pub serving_gate: bool,
}

/// The parts of the pod status decisions need.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CachedPodStatus {
    /// Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The status of the `evictord.dev/serving` condition (SPEC 6.4): `None` when the pod has
    /// none. Decoded from the conditions, which are not kept.
    #[serde(
        default,
        rename = "conditions",
        deserialize_with = "serving_status",
        skip_serializing
    )]
    pub serving: Option<bool>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Option::<serde::de::IgnoredAny>::deserialize(d)?;
    Ok(v.is_some())
}

fn tolerates_maintenance_taint<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let tolerations = Option::<Vec<Toleration>>::deserialize(d)?.unwrap_or_default();
    Ok(crate::api::taint::tolerates_maintenance_taint(&tolerations))
}

fn has_empty_dir<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    /// A volume, of which only whether it is an `emptyDir` is read.
    #[derive(Deserialize)]
    struct Volume {
        #[serde(default, rename = "emptyDir")]
        empty_dir: Option<serde::de::IgnoredAny>,
    }
    let volumes = Option::<Vec<Volume>>::deserialize(d)?.unwrap_or_default();
    Ok(volumes.iter().any(|v| v.empty_dir.is_some()))
}

fn has_serving_gate<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let gates = Option::<Vec<PodReadinessGate>>::deserialize(d)?.unwrap_or_default();
    Ok(gates.iter().any(|g| g.condition_type == SERVING_CONDITION))
}

fn serving_status<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let conditions = Option::<Vec<PodCondition>>::deserialize(d)?.unwrap_or_default();
    let serving = conditions.iter().find(|c| c.type_ == SERVING_CONDITION);
    Ok(serving.map(|c| c.status == "True"))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `kube::Resource` for a type standing for core/v1 Pod with a `metadata: ObjectMeta` field (the
/// cached pod, the admission webhook's partial pod).
macro_rules! pod_resource {
    ($t:ty) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                "Pod".into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "".into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                "pods".into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use pod_resource;

pod_resource!(CachedPod);

impl CachedPod {
    /// Drops every metadata field that no decision reads, before the pod enters a cache.
    pub fn trim(mut self) -> Self {
        self.trim_in_place();
        self
    }

    /// [`CachedPod::trim`] in place (for watch stream modifiers).
    pub fn trim_in_place(&mut self) {
        let m = &mut self.metadata;
        m.managed_fields = None;
        m.finalizers = None;
        let generated = m.generate_name.take().map(|prefix| {
            let name = m.name.as_deref().unwrap_or_default();
            !prefix.is_empty() && name.len() > prefix.len() && name.starts_with(&prefix)
        });
        m.self_link = None;
        m.generation = None;
        if let Some(annotations) = m.annotations.take() {
            let kept: BTreeMap<String, String> = annotations
                .into_iter()
                .filter(|(k, _)| k == INTERCEPTORS_ANNOTATION || k == MIRROR_POD_ANNOTATION)
                .collect();
            m.annotations = (!kept.is_empty()).then_some(kept);
        }
        if let Some(owners) = m.owner_references.take() {
            // The controller's kind and name are read (DaemonSet pods, the plugin's table).
            let kept: Vec<_> = owners
                .into_iter()
                .filter(|o| o.controller == Some(true))
                .map(|o| OwnerReference {
                    kind: o.kind,
                    name: o.name,
                    controller: o.controller,
                    ..Default::default()
                })
                .collect();
            m.owner_references = (!kept.is_empty()).then_some(kept);
        }
        if let Some(labels) = m.labels.take() {
            self.compact_labels = CompactLabels::from_map(labels);
        }
        self.spec.workload_ref |= self.spec.scheduling_group;
        if let Some(generated) = generated {
            self.name_generated = generated;
        }
    }

    /// Name of the pod.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Namespace of the pod.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// UID of the pod.
    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    /// Labels of the pod: `metadata.labels` until trimmed, then the compact copy.
    pub fn labels(&self) -> PodLabels<'_> {
        match &self.metadata.labels {
            Some(map) => PodLabels::Map(map),
            None => PodLabels::Compact(&self.compact_labels),
        }
    }

    /// The raw interceptor annotation, if any.
    pub fn interceptor_annotation(&self) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(INTERCEPTORS_ANNOTATION)
            .map(String::as_str)
    }

    /// The interceptors the pod declares, in order.
    pub fn interceptors(&self) -> Vec<String> {
        self.interceptor_annotation()
            .map(parse_interceptor_list)
            .unwrap_or_default()
    }

    /// Priority (0 when unset).
    pub fn priority(&self) -> i32 {
        self.spec.priority.unwrap_or(0)
    }

    /// True when the pod is a mirror (static) pod.
    pub fn is_mirror(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
    }

    /// True when the pod's controller is a DaemonSet.
    pub fn is_daemonset_pod(&self) -> bool {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
    }

    /// True when the pod has terminated (Succeeded or Failed).
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.phase.as_deref(), Some("Succeeded" | "Failed"))
    }

    /// True when deletion has started.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// True when no controller will recreate the pod once it is gone (SPEC 6.2): no controller
    /// owner reference, and not a mirror pod (the kubelet runs those). `kubectl drain` refuses
    /// such pods without `--force`.
    pub fn is_unmanaged(&self) -> bool {
        !self.is_mirror()
            && !self
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true))
    }

    /// True when the pod belongs to a Workload/PodGroup.
    pub fn in_workload(&self) -> bool {
        self.spec.workload_ref || self.spec.scheduling_group
    }
}

/// The drain-plan type of a pod: mirror → Static, DaemonSet controller → DaemonSet, else Default.
pub fn pod_type(pod: &CachedPod) -> PodType {
    if pod.is_mirror() {
        PodType::Static
    } else if pod.is_daemonset_pod() {
        PodType::DaemonSet
    } else {
        PodType::Default
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_only_what_it_needs_and_trims() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1",
                "annotations": {"evictord.dev/eviction-interceptors": "a.b, c.d", "other": "x"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "c"}
                ]
            },
            "spec": {"nodeName": "n1", "priority": 7, "containers": [{"name": "c", "image": "i"}], "workloadRef": {"name": "w"},
                     "volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "scratch", "emptyDir": {}}],
                     "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
                                     {"key": "evictord.dev/maintenance", "operator": "Exists"}]},
            "status": {"phase": "Running", "conditions": []}
        }))
        .unwrap();
        let pod = pod.trim();
        assert_eq!(pod.interceptors(), vec!["a.b", "c.d"]);
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.metadata.annotations.as_ref().unwrap().len(), 1);
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap().len(), 1);
        assert!(pod.is_daemonset_pod() && pod.in_workload() && !pod.is_terminal());
        assert_eq!(pod_type(&pod), PodType::DaemonSet);
        assert_eq!(pod.priority(), 7);
        assert!(pod.spec.tolerates_maintenance_taint);
        assert!(pod.spec.empty_dir && !pod.is_unmanaged());
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("DaemonSet", "ds")
        );
    }

    #[test]
    fn labels_read_the_same_before_and_after_trimming() {
        let mut pod = CachedPod::default();
        pod.metadata.labels = Some(
            [("tier", "web"), ("app", "shop"), ("b", "")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        );
        let before = pod.labels().to_map();
        let trimmed = pod.clone().trim();
        assert!(trimmed.metadata.labels.is_none(), "moved out of metadata");
        let after = trimmed.labels();
        assert_eq!(after.to_map(), before);
        assert_eq!(
            after.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["app", "b", "tier"]
        );
        for key in ["app", "b", "tier", "zzz", "", "a"] {
            assert_eq!(after.get(key), pod.labels().get(key), "{key}");
        }
        assert!(CachedPod::default().trim().labels().is_empty());
        // Empty keys and values, one label, many labels.
        for n in [1usize, 2, 7, 40] {
            let map: BTreeMap<String, String> = (0..n)
                .map(|i| {
                    (
                        format!("k{i:02}"),
                        if i % 3 == 0 {
                            String::new()
                        } else {
                            format!("v{i}")
                        },
                    )
                })
                .collect();
            let c = CompactLabels::from_map(map.clone());
            assert_eq!(c.len(), n);
            let back: BTreeMap<String, String> = c
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(back, map);
            for (k, v) in &map {
                assert_eq!(c.get(k), Some(v.as_str()));
            }
            assert_eq!(c.get("k"), None);
            assert_eq!(c.get("zz"), None);
        }
    }

    /// SPEC 6.4: the gate and its condition are read from the lists, which are not kept.
    #[test]
    fn the_serving_gate_and_its_condition_are_decoded() {
        let (x, serving) = ("x.example.com/ready", SERVING_CONDITION);
        for (gates, conditions, expected) in [
            (vec![], vec![], (false, None)),
            (vec![x], vec![("Ready", "True")], (false, None)),
            (vec![x, serving], vec![("Ready", "False")], (true, None)),
            (
                vec![serving],
                vec![("Ready", "True"), (serving, "True")],
                (true, Some(true)),
            ),
            (vec![serving], vec![(serving, "False")], (true, Some(false))),
        ] {
            let gates: Vec<_> = gates
                .iter()
                .map(|g| serde_json::json!({"conditionType": g}))
                .collect();
            let conditions: Vec<_> = (conditions.iter())
                .map(|(t, s)| serde_json::json!({"type": t, "status": s, "lastProbeTime": null}))
                .collect();
            let pod: CachedPod =
                serde_json::from_value(serde_json::json!({"metadata": {"name": "p"},
                "spec": {"readinessGates": gates}, "status": {"conditions": conditions}}))
                .unwrap();
            let pod = pod.trim();
            assert_eq!((pod.spec.serving_gate, pod.status.serving), expected);
        }
    }

    /// SPEC 6.2: what `kubectl drain` checks before it deletes a pod.
    #[rstest::rstest]
    #[case::bare(serde_json::json!({"metadata": {"name": "p"}}), true, false)]
    #[case::replicaset(serde_json::json!({"metadata": {"name": "p", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]}}), false, false)]
    #[case::owner_not_controller(serde_json::json!({"metadata": {"name": "p", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"}]}}), true, false)]
    #[case::mirror(serde_json::json!({"metadata": {"name": "p", "annotations": {"kubernetes.io/config.mirror": "x"}}}), false, false)]
    #[case::empty_dir(serde_json::json!({"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}]}}), true, true)]
    #[case::host_path(serde_json::json!({"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "h", "hostPath": {"path": "/x"}}]}}), true, false)]
    fn unmanaged_and_local_data_rows(
        #[case] pod: serde_json::Value,
        #[case] unmanaged: bool,
        #[case] empty_dir: bool,
    ) {
        let pod: CachedPod = serde_json::from_value(pod).unwrap();
        let pod = pod.trim();
        assert_eq!(pod.is_unmanaged(), unmanaged);
        assert_eq!(pod.spec.empty_dir, empty_dir);
    }

    #[test]
    fn pod_types() {
        let mut p = CachedPod::default();
        assert_eq!(pod_type(&p), PodType::Default);
        p.metadata.annotations =
            Some([(MIRROR_POD_ANNOTATION.to_string(), "x".to_string())].into());
        assert_eq!(pod_type(&p), PodType::Static);
    }
}
