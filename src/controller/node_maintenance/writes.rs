//! The API writes of the node maintenance controller, one function per kind of write: the
//! finalizer and the stage on the maintenance, its status, node cordon patches, and the
//! EvictionRequest actions. Every write that replaces a list or a whole status is guarded by the
//! `resourceVersion` it was computed from, so a concurrent writer makes it fail (and the
//! maintenance is reconciled again) instead of being overwritten.

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::cordon::NodePatch;
use super::requests::{RequestAction, new_request};
use crate::api::{
    EvictionRequest, MaintenanceBudget, MaintenanceBudgetStatus, NodeMaintenance,
    NodeMaintenanceStatus, Stage,
};
use crate::controller::own_writes::OwnWrites;

/// A failed write (retried by the controller's error policy).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Adding or removing the finalizer failed.
    #[error("updating the finalizers of {0}: {1}")]
    Finalizer(String, #[source] kube::Error),
    /// Moving a deleted maintenance to Complete failed.
    #[error("moving {0} to stage Complete: {1}")]
    Stage(String, #[source] kube::Error),
    /// The status patch failed.
    #[error("patching the status of {0}: {1}")]
    Status(String, #[source] kube::Error),
    /// Cordoning or restoring a node failed.
    #[error("patching node {0}: {1}")]
    Node(String, #[source] kube::Error),
    /// Creating, joining, withdrawing from or deleting an EvictionRequest failed.
    #[error("{0} EvictionRequest {1}: {2}")]
    Request(&'static str, String, #[source] kube::Error),
    /// The consistent read an admission is confirmed with failed (SPEC 6.1).
    #[error("reading the {0} for an admission: {1}")]
    AdmissionRead(&'static str, #[source] kube::Error),
    /// Writing a MaintenanceBudget's status failed.
    #[error("patching the status of MaintenanceBudget {0}: {1}")]
    BudgetStatus(String, #[source] kube::Error),
}

impl Error {
    /// A concurrent write (409 Conflict, or 422 from a failed JSON patch `test`).
    pub fn is_conflict(&self) -> bool {
        let e = match self {
            Error::Finalizer(_, e)
            | Error::Stage(_, e)
            | Error::Status(_, e)
            | Error::Node(_, e)
            | Error::Request(_, _, e)
            | Error::BudgetStatus(_, e)
            | Error::AdmissionRead(_, e) => e,
        };
        crate::controller::is_conflict(e)
    }
}

fn json_patch(ops: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).unwrap_or_default())
}

/// Runs `write` of `nm` recorded in `written` as replacing `nm`'s version: recorded before it is
/// sent, so that a copy at that version is behind while the write is in flight (the server may
/// have applied it before its answer arrives), forgotten again when it fails.
async fn recorded<T, E>(
    written: &OwnWrites,
    nm: &NodeMaintenance,
    write: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let (name, from) = (nm.name_any(), nm.resource_version());
    written.record(&name, from.as_deref());
    let result = write.await;
    if result.is_err() {
        written.forget(&name, from.as_deref());
    }
    result
}

/// Writes the finalizer list of the maintenance (to add or remove ours), recorded in `written`.
pub async fn set_finalizers(
    client: &Client,
    written: &OwnWrites,
    nm: &NodeMaintenance,
    finalizers: Vec<String>,
) -> Result<NodeMaintenance, Error> {
    let name = nm.name_any();
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let patch = json_patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": nm.resource_version()},
        {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
    ]));
    let params = PatchParams::default();
    recorded(written, nm, api.patch(&name, &params, &patch))
        .await
        .map_err(|e| Error::Finalizer(name, e))
}

/// Sets `spec.stage: Complete` on a maintenance being deleted, recorded in `written`.
pub async fn move_to_complete(
    client: &Client,
    written: &OwnWrites,
    nm: &NodeMaintenance,
) -> Result<(), Error> {
    let name = nm.name_any();
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let patch = json!({
        "metadata": {"resourceVersion": nm.resource_version()},
        "spec": {"stage": Stage::Complete},
    });
    let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
    recorded(written, nm, api.patch(&name, &params, &patch))
        .await
        .map(drop)
        .map_err(|e| Error::Stage(name, e))
}

/// Writes the status fields that differ from `nm`'s in one JSON patch guarded by
/// `resourceVersion`. Fields this build does not know (written by a newer evictord: they were
/// dropped when `nm` was decoded, so they are in neither status) are left as they are, so a
/// rolled-back evictord does not erase them. Recorded in `written`.
pub async fn write_status(
    client: &Client,
    written: &OwnWrites,
    nm: &NodeMaintenance,
    status: &NodeMaintenanceStatus,
) -> Result<NodeMaintenance, Error> {
    let name = nm.name_any();
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": nm.resource_version()}),
    ];
    ops.extend(status_ops(nm.status.as_ref(), status));
    let patch = json_patch(Value::Array(ops));
    let params = PatchParams::default();
    recorded(written, nm, api.patch_status(&name, &params, &patch))
        .await
        .map_err(|e| Error::Status(name, e))
}

/// The JSON patch operations from the status `old` to `new`, field by field (the whole status
/// when there was none).
pub fn status_ops(old: Option<&NodeMaintenanceStatus>, new: &NodeMaintenanceStatus) -> Vec<Value> {
    let new_value = serde_json::to_value(new).unwrap_or_else(|_| json!({}));
    let Some(old) = old else {
        return vec![json!({"op": "add", "path": "/status", "value": new_value})];
    };
    let old_value = serde_json::to_value(old).unwrap_or_else(|_| json!({}));
    let (Some(old_fields), Some(new_fields)) = (old_value.as_object(), new_value.as_object())
    else {
        return vec![json!({"op": "add", "path": "/status", "value": new_value})];
    };
    let mut ops = Vec::new();
    for (key, value) in new_fields {
        if old_fields.get(key) != Some(value) {
            ops.push(json!({"op": "add", "path": format!("/status/{key}"), "value": value}));
        }
    }
    for key in old_fields.keys().filter(|k| !new_fields.contains_key(*k)) {
        ops.push(json!({"op": "remove", "path": format!("/status/{key}")}));
    }
    ops
}

/// Replaces the status of a MaintenanceBudget (the node maintenance controller is its only
/// writer).
pub async fn write_budget_status(
    client: &Client,
    name: &str,
    status: &MaintenanceBudgetStatus,
) -> Result<(), Error> {
    let api: Api<MaintenanceBudget> = Api::all(client.clone());
    let patch = json!({"status": status});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| Error::BudgetStatus(name.to_string(), e))
}

/// A consistent read (quorum, not a cache) of every NodeMaintenance and MaintenanceBudget, which
/// every admission is decided on again before it is written (SPEC 6.1). The budgets' CRD missing
/// (an upgrade that did not apply it) reads as no budget.
pub async fn read_for_admission(
    client: &Client,
) -> Result<(Vec<NodeMaintenance>, Vec<MaintenanceBudget>), Error> {
    let params = kube::api::ListParams::default();
    let maintenances = Api::<NodeMaintenance>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| Error::AdmissionRead("NodeMaintenances", e))?
        .items;
    let budgets = match Api::<MaintenanceBudget>::all(client.clone())
        .list(&params)
        .await
    {
        Ok(list) => list.items,
        Err(e) if crate::controller::is_not_found(&e) => Vec::new(),
        Err(e) => return Err(Error::AdmissionRead("MaintenanceBudgets", e)),
    };
    Ok((maintenances, budgets))
}

/// Applies a cordon or restore decision to a node.
pub async fn patch_node(client: &Client, node: &Node, change: &NodePatch) -> Result<(), Error> {
    let name = node.name_any();
    let api: Api<Node> = Api::all(client.clone());
    let patch = change.merge_patch(node.metadata.resource_version.as_deref());
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| Error::Node(name, e))
}

/// Applies one EvictionRequest action. A request created meanwhile by someone else, or
/// deleted meanwhile, is not an error: the next reconciliation sees it in the cache.
pub async fn apply_request_action(client: &Client, action: &RequestAction) -> Result<(), Error> {
    match action {
        RequestAction::Create { pod, node, labels } => {
            let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &pod.namespace);
            let request = new_request(pod, node, labels);
            match api.create(&PostParams::default(), &request).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(Error::Request("creating", key(&pod.namespace, &pod.uid), e)),
            }
        }
        RequestAction::Join {
            namespace,
            name,
            resource_version,
            requesters,
        }
        | RequestAction::Withdraw {
            namespace,
            name,
            resource_version,
            requesters,
        } => {
            let verb = if matches!(action, RequestAction::Join { .. }) {
                "joining"
            } else {
                "withdrawing from"
            };
            let api: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
            let patch = json_patch(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
                {"op": "add", "path": "/spec/requesters", "value": requesters},
            ]));
            match api.patch(name, &PatchParams::default(), &patch).await {
                Ok(_) => Ok(()),
                Err(e) if crate::controller::is_not_found(&e) => Ok(()),
                Err(e) => Err(Error::Request(verb, key(namespace, name), e)),
            }
        }
        RequestAction::Delete { namespace, name } => {
            let api: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if crate::controller::is_not_found(&e) => Ok(()),
                Err(e) => Err(Error::Request("deleting", key(namespace, name), e)),
            }
        }
    }
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Stage, StageStatus};

    #[test]
    fn status_writes_touch_only_the_fields_that_changed() {
        // No status yet: the whole status.
        let new = NodeMaintenanceStatus {
            drain_plan_position: Some(1),
            ..Default::default()
        };
        assert_eq!(
            status_ops(None, &new),
            vec![json!({"op": "add", "path": "/status", "value": {"drainPlanPosition": 1}})]
        );
        // A changed field is added, one that went is removed, the others are not written (nor
        // those this build does not know, which neither side holds).
        let old = NodeMaintenanceStatus {
            drain_plan_position: Some(1),
            stage_statuses: vec![StageStatus {
                name: Stage::Drain,
                start_timestamp: None,
            }],
            ..Default::default()
        };
        let mut next = old.clone();
        next.drain_plan_position = None;
        next.stage_statuses.push(StageStatus {
            name: Stage::Complete,
            start_timestamp: None,
        });
        assert_eq!(
            status_ops(Some(&old), &next),
            vec![
                json!({"op": "add", "path": "/status/stageStatuses", "value": [{"name": "Drain"}, {"name": "Complete"}]}),
                json!({"op": "remove", "path": "/status/drainPlanPosition"}),
            ]
        );
        assert!(status_ops(Some(&old), &old).is_empty());
    }
}
