//! `CachedPod`: the fields of a Pod that evictord's decisions need, and nothing else. Watched
//! and cached in this form so that a large cluster costs little memory: the rest of the pod
//! (containers, volumes, status details, managed fields) is skipped while decoding.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Deserializer, Serialize};

use crate::api::{INTERCEPTORS_ANNOTATION, MIRROR_POD_ANNOTATION, PodType, parse_interceptor_list};

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
    /// Successor of `workloadRef` in newer Kubernetes versions.
    #[serde(
        default,
        rename = "schedulingGroup",
        deserialize_with = "present",
        skip_serializing
    )]
    pub scheduling_group: bool,
}

/// The parts of the pod status decisions need.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CachedPodStatus {
    /// Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Option::<serde::de::IgnoredAny>::deserialize(d)?;
    Ok(v.is_some())
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

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
        m.generate_name = None;
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
            let kept: Vec<_> = owners
                .into_iter()
                .filter(|o| o.controller == Some(true))
                .collect();
            m.owner_references = (!kept.is_empty()).then_some(kept);
        }
        self.spec.workload_ref |= self.spec.scheduling_group;
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

    /// Labels of the pod.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
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
            "spec": {"nodeName": "n1", "priority": 7, "containers": [{"name": "c", "image": "i"}], "workloadRef": {"name": "w"}},
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
