//! What `kubelet.k8s.io` does for an EvictionRequest of a mirror pod on its node (pure): from the
//! pod, the NodeMaintenances and the static pod directory as read ([`Snapshot`]), [`on_request`]
//! says whether to hold the pod's manifest, to wait for the kubelet, or to complete and why.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

use super::held::{HELD_DIR, HeldPod, Intent, Record, Snapshot};
use super::manifest::mirror_pod_name;
use crate::api::{MIRROR_POD_ANNOTATION, NodeMaintenance, PodType};
use crate::drain::holds::targeting;

/// The grace period of a pod that sets none (the API's default).
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Everything [`on_request`] decides on.
#[derive(Clone, Copy, Debug)]
pub struct RequestInput<'a> {
    /// The agent's node.
    pub node: &'a str,
    /// The static pod directory, for messages.
    pub dir: &'a str,
    /// The target pod (`None`: gone, or another UID).
    pub pod: Option<&'a Pod>,
    /// Every NodeMaintenance.
    pub maintenances: &'a [NodeMaintenance],
    /// The static pod directory and its held directory.
    pub snapshot: &'a Snapshot,
    /// The request names the node maintenance controller among its requesters.
    pub requested_by_maintenance: bool,
    /// Now.
    pub now: Timestamp,
}

/// The step for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Done (the next interceptor decides), with why.
    Complete(String),
    /// The manifest is held; the kubelet is stopping the pod.
    Wait {
        /// Progress message.
        message: String,
        /// The hold time plus the pod's grace period.
        expected_finish: Option<Timestamp>,
    },
    /// Hold these manifests (write each record, then move the file), then wait.
    Hold(Vec<Record>),
}

/// The manifest's own name: the mirror pod's name without the `-<node>` suffix.
fn static_name<'a>(mirror: &'a str, node: &str) -> &'a str {
    let suffix = format!("-{}", node.to_lowercase());
    mirror.strip_suffix(suffix.as_str()).unwrap_or(mirror)
}

/// The progress message while `record`'s manifest is held (seed 001, "kubelet: Static Pods").
pub fn holding_message(record: &Record, dir: &str) -> String {
    let reason = if record.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", record.reason)
    };
    format!(
        "{} is terminating the pod due to node maintenance {}{reason}: its manifest {} is held in {dir}/{HELD_DIR} \
         until no maintenance holds node {}",
        static_name(&record.pod.name, &record.node),
        record.maintenance,
        record.file,
        record.node,
    )
}

fn expected_finish(record: &Record) -> Option<Timestamp> {
    record
        .held_at
        .checked_add(SignedDuration::from_secs(
            record.grace_period_seconds.max(0),
        ))
        .ok()
}

fn waiting(records: &[&Record], dir: &str) -> Step {
    let message = records
        .iter()
        .map(|r| holding_message(r, dir))
        .collect::<Vec<_>>()
        .join("; ");
    Step::Wait {
        message,
        expected_finish: records.iter().filter_map(|r| expected_finish(r)).max(),
    }
}

/// The step after holding `records` (what [`on_request`] says once they are held).
pub fn after_hold(records: &[Record], dir: &str) -> Step {
    waiting(&records.iter().collect::<Vec<_>>(), dir)
}

/// What to do for a request whose active interceptor is `kubelet.k8s.io` (SPEC 5.3):
///
/// - the pod is gone: complete (the kubelet stopped it and removed its mirror pod);
/// - not a mirror pod: complete, there is nothing for the kubelet to do;
/// - its manifest is already held: wait for the kubelet;
/// - no maintenance in Drain targets it (type Static, its priority, its labels, on this node):
///   complete with a message saying so (the static pod keeps running) — unless the node
///   maintenance controller asked for the eviction: it requests only pods a maintenance targets,
///   but the agent's watch of the maintenances may show the request before the status that
///   records those targets, so it waits for that status;
/// - no manifest in the directory defines it, or an earlier held copy of the same file is in
///   the way: complete with a message saying so;
/// - otherwise hold every manifest that defines it.
pub fn on_request(input: &RequestInput<'_>) -> Step {
    let RequestInput {
        node,
        dir,
        snapshot,
        ..
    } = *input;
    let Some(pod) = input.pod else {
        return Step::Complete(
            "the mirror pod is gone: the kubelet stopped the static pod".to_string(),
        );
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let annotations = pod.metadata.annotations.as_ref();
    if !annotations.is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)) {
        return Step::Complete(format!(
            "pod {namespace}/{name} is not a static pod (no {MIRROR_POD_ANNOTATION} annotation): the kubelet has nothing to do"
        ));
    }
    if let Some((entry, record)) = snapshot.entry_of_pod(namespace, name)
        && entry.held.is_some()
        && entry.original.is_none()
    {
        return waiting(&[record], dir);
    }
    let spec = pod.spec.as_ref();
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let Some(maintenance) = targeting(input.maintenances, node, PodType::Static, priority, &labels)
    else {
        if input.requested_by_maintenance {
            return Step::Wait {
                message: format!(
                    "waiting for a NodeMaintenance in stage Drain to record static pod {namespace}/{name} on node {node} \
                     (type Static, priority {priority}) in its drain targets"
                ),
                expected_finish: None,
            };
        }
        return Step::Complete(format!(
            "no NodeMaintenance in stage Drain targets static pod {namespace}/{name} on node {node} \
             (type Static, priority {priority}) yet: the kubelet keeps it running"
        ));
    };
    let files: Vec<_> = snapshot
        .manifests
        .iter()
        .filter(|m| {
            m.id.as_ref().is_some_and(|id| {
                id.namespace == namespace && mirror_pod_name(&id.name, node) == name
            })
        })
        .collect();
    if files.is_empty() {
        return Step::Complete(format!(
            "no manifest in the static pod directory {dir} defines pod {namespace}/{name}: the node agent cannot stop it"
        ));
    }
    if let Some(blocked) = files
        .iter()
        .find(|m| snapshot.entry(&m.file).is_some_and(|e| e.held.is_some()))
    {
        return Step::Complete(format!(
            "cannot hold {dir}/{}: {dir}/{HELD_DIR} already holds an earlier copy of it (a conflict left for the \
             administrator, see the node's events)",
            blocked.file
        ));
    }
    let grace = spec
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    let held_pod = HeldPod {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    };
    Step::Hold(
        files
            .into_iter()
            .map(|m| Record {
                file: m.file.clone(),
                sha256: m.hash.clone(),
                node: node.to_string(),
                maintenance: maintenance.metadata.name.clone().unwrap_or_default(),
                reason: maintenance.spec.reason.clone().unwrap_or_default(),
                pod: held_pod.clone(),
                grace_period_seconds: grace,
                held_at: input.now,
                intent: Intent::Hold,
            })
            .collect(),
    )
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
