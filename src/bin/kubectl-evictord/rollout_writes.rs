//! A rollout's reads and writes of the cluster: its budget and maintenances (found by the
//! rollout label), the driver and step records (written with a resourceVersion precondition, so
//! that two processes never both start a step), the cordon of `--cordon-first` (as evictord
//! cordons: `cordon()` and `restore()` of the node maintenance controller), and the deletions
//! at the end or after a failed step.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;

use evictord::api::{MaintenanceBudget, NodeMaintenance, ROLLOUT_STEP_ANNOTATION, Stage};
use evictord::controller::node_maintenance::cordon::{cordon, restore};
use evictord::controller::own_writes::OwnWrites;
use evictord::drain::holds::holders;
use evictord::plugin::errors::{Access, api_error};
use evictord::plugin::maintenance::{DrainDeadline, with_deadline};
use evictord::plugin::rollout::driver::{Driver, ROLLOUT_DRIVER_ANNOTATION, may_drive};
use evictord::plugin::rollout::naming::{is_of, label_selector, maintenance_of};
use evictord::plugin::rollout::step::StepRecord;
use evictord::plugin::{Error, Result};

const BUDGETS: &str = "maintenancebudgets.evictord.dev";
const MAINTENANCES: &str = "nodemaintenances.evictord.dev";
/// At most this many tries of a write that lost a race (409 Conflict).
const TRIES: usize = 5;

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn budgets(client: &Client) -> Api<MaintenanceBudget> {
    Api::all(client.clone())
}

fn maintenances(client: &Client) -> Api<NodeMaintenance> {
    Api::all(client.clone())
}

/// The rollout's budget, if it exists.
pub async fn budget(client: &Client, name: &str) -> Result<Option<MaintenanceBudget>> {
    budgets(client)
        .get_opt(name)
        .await
        .map_err(|e| api_error(Access::new("get", BUDGETS).named(name), e))
}

/// The rollout's maintenances (by its label).
pub async fn rollout_maintenances(client: &Client, rollout: &str) -> Result<Vec<NodeMaintenance>> {
    Ok(maintenances(client)
        .list(&ListParams::default().labels(&label_selector(rollout)))
        .await
        .map_err(|e| api_error(Access::new("list", MAINTENANCES), e))?
        .items)
}

/// Creates the budget.
pub async fn create_budget(client: &Client, b: &MaintenanceBudget) -> Result<()> {
    let name = b.metadata.name.clone().unwrap_or_default();
    match budgets(client).create(&PostParams::default(), b).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Err(Error::Rollout(format!(
            "MaintenanceBudget {name} was created by someone else meanwhile; run the command again to resume that rollout"
        ))),
        Err(e) => Err(api_error(Access::new("create", BUDGETS).named(&name), e)),
    }
}

/// Sets the budget's `maxUnavailable`.
pub async fn set_max_unavailable(client: &Client, name: &str, max: &IntOrString) -> Result<()> {
    budgets(client)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": max}})),
        )
        .await
        .map_err(|e| api_error(Access::new("patch", BUDGETS).named(name), e))?;
    Ok(())
}

/// Records `me` as the rollout's driver, unless another live process drives it.
pub async fn claim(
    client: &Client,
    name: &str,
    me: &Driver,
    alive: impl Fn(u32) -> bool,
) -> Result<()> {
    for _ in 0..TRIES {
        let Some(b) = budget(client, name).await? else {
            return Ok(());
        };
        may_drive(name, Driver::of(&b).as_ref(), me, me.renewed, &alive)
            .map_err(|busy| Error::Rollout(busy.to_string()))?;
        let patch = json!({"metadata": {
            "resourceVersion": b.metadata.resource_version,
            "annotations": {ROLLOUT_DRIVER_ANNOTATION: me.to_annotation()},
        }});
        match budgets(client)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(api_error(Access::new("patch", BUDGETS).named(name), e)),
        }
    }
    Err(Error::Rollout(format!(
        "MaintenanceBudget {name} kept changing while the plugin recorded itself on it; run the command again"
    )))
}

/// Renews `me`'s driver record (best effort: the next renewal tries again).
pub async fn renew(client: &Client, name: &str, me: &Driver) {
    let patch =
        json!({"metadata": {"annotations": {ROLLOUT_DRIVER_ANNOTATION: me.to_annotation()}}});
    let _ = budgets(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

/// Removes `me`'s driver record, if it is still the one there (best effort).
pub async fn release(client: &Client, name: &str, me: &Driver) {
    let Ok(Some(b)) = budget(client, name).await else {
        return;
    };
    if Driver::of(&b).is_some_and(|d| d.host == me.host && d.pid == me.pid) {
        let patch = json!({"metadata": {
            "resourceVersion": b.metadata.resource_version,
            "annotations": {ROLLOUT_DRIVER_ANNOTATION: null},
        }});
        let _ = budgets(client)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
}

/// Waits until evictord has reported on the budget's current spec (`status.observedGeneration`):
/// from then on its admissions count the budget.
pub async fn wait_observed(client: &Client, name: &str, within: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(b) = budget(client, name).await? {
            let observed = b.status.as_ref().and_then(|s| s.observed_generation);
            if observed.is_some() && observed >= b.metadata.generation {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::BudgetNotObserved {
                budget: name.to_string(),
                seconds: within.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates the rollout's maintenance of `node`, with the drain deadline if one is given. A
/// maintenance of that name that is not the rollout's is an error. The creation is recorded in
/// `written` (the rollout's next look waits for its watch to show it).
pub async fn create_maintenance(
    client: &Client,
    written: &OwnWrites,
    rollout: &str,
    node: &str,
    reason: Option<&str>,
    deadline: Option<DrainDeadline>,
) -> Result<String> {
    let nm = with_deadline(maintenance_of(rollout, node, reason), deadline);
    let name = nm.metadata.name.clone().unwrap_or_default();
    match maintenances(client)
        .create(&PostParams::default(), &nm)
        .await
    {
        Ok(_) => {
            written.record_created(&name);
            Ok(name)
        }
        Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 409) => {
            let existing = maintenances(client).get_opt(&name).await.ok().flatten();
            if existing.is_some_and(|m| is_of(m.metadata.labels.as_ref(), rollout)) {
                written.record_created(&name);
                Ok(name)
            } else {
                Err(Error::Rollout(format!(
                    "a NodeMaintenance named {name} exists and is not rollout {rollout}'s (no label {}); delete it or choose another rollout name",
                    label_selector(rollout)
                )))
            }
        }
        Err(e) => Err(api_error(
            Access::new("create", MAINTENANCES).named(&name),
            e,
        )),
    }
}

/// Writes the step record on the maintenance as read (its resourceVersion is the precondition),
/// recorded in `written`. `Ok(None)` when the maintenance changed meanwhile (read it again and
/// decide again).
pub async fn write_record(
    client: &Client,
    written: &OwnWrites,
    nm: &NodeMaintenance,
    record: &StepRecord,
) -> Result<Option<NodeMaintenance>> {
    let name = nm.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {
        "resourceVersion": nm.metadata.resource_version,
        "annotations": {ROLLOUT_STEP_ANNOTATION: record.to_annotation()},
    }});
    match maintenances(client)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(answer) => {
            written.record(&name, nm.metadata.resource_version.as_deref());
            Ok(Some(answer))
        }
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(api_error(
            Access::new("patch", MAINTENANCES).named(&name),
            e,
        )),
    }
}

/// Writes a record computed from the maintenance's current one by `next`: first over `cached`
/// (a copy that shows the rollout's own writes: the watch's, or the one just written), read
/// again live after a lost race or without one. `next` returns `None` when there is nothing to write.
pub async fn update_record(
    client: &Client,
    written: &OwnWrites,
    name: &str,
    mut cached: Option<NodeMaintenance>,
    next: impl Fn(Option<&StepRecord>) -> Option<StepRecord>,
) -> Result<()> {
    for _ in 0..TRIES {
        let nm = match cached.take() {
            Some(nm) => nm,
            None => maintenances(client)
                .get(name)
                .await
                .map_err(|e| api_error(Access::new("get", MAINTENANCES).named(name), e))?,
        };
        let current = StepRecord::read(&nm).map_err(Error::StepRecord)?;
        let Some(record) = next(current.as_ref()) else {
            return Ok(());
        };
        if write_record(client, written, &nm, &record).await?.is_some() {
            return Ok(());
        }
    }
    Err(Error::Rollout(format!(
        "NodeMaintenance {name} kept changing while its step record was written"
    )))
}

/// Moves the maintenance (as read) to Complete: evictord gives its node back. Recorded in
/// `written` as a write over the version read.
pub async fn complete(client: &Client, written: &OwnWrites, nm: &NodeMaintenance) -> Result<()> {
    let name = nm.metadata.name.as_deref().unwrap_or_default();
    maintenances(client)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stage": Stage::Complete}})),
        )
        .await
        .map_err(|e| api_error(Access::new("patch", MAINTENANCES).named(name), e))?;
    written.record(name, nm.metadata.resource_version.as_deref());
    Ok(())
}

/// Applies `change` to the node (read again after a lost race); true when it wrote something.
async fn change_node(
    client: &Client,
    node: &str,
    change: impl Fn(&Node) -> Option<serde_json::Value>,
) -> Result<bool> {
    let api: Api<Node> = Api::all(client.clone());
    for _ in 0..TRIES {
        let Some(n) = api
            .get_opt(node)
            .await
            .map_err(|e| api_error(Access::new("get", "nodes").named(node), e))?
        else {
            return Ok(false);
        };
        let Some(patch) = change(&n) else {
            return Ok(false);
        };
        match api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(api_error(Access::new("patch", "nodes").named(node), e)),
        }
    }
    Err(Error::Rollout(format!(
        "node {node} kept changing while the plugin wrote its cordon; run the command again"
    )))
}

/// `--cordon-first`: cordons the node as a maintenance does, recording its previous
/// `unschedulable` so that its maintenance's Complete gives it back; true when it was cordoned
/// now.
pub async fn cordon_first(client: &Client, node: &str) -> Result<bool> {
    change_node(client, node, |n| {
        let p = cordon(n, false)?;
        Some(p.merge_patch(n.metadata.resource_version.as_deref()))
    })
    .await
}

/// Gives back the cordon `--cordon-first` placed, unless a maintenance holds the node now.
pub async fn restore_cordon(
    client: &Client,
    node: &str,
    maintenances: &[NodeMaintenance],
) -> Result<bool> {
    change_node(client, node, |n| {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let held = !holders(maintenances, name, &labels).is_empty();
        let p = restore(n, held)?;
        Some(p.merge_patch(n.metadata.resource_version.as_deref()))
    })
    .await
}

/// Deletes the maintenance as read, unless it changed since (e.g. evictord admitted it): true
/// when it was deleted.
pub async fn delete_unchanged(client: &Client, nm: &NodeMaintenance) -> Result<bool> {
    let name = nm.metadata.name.clone().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: nm.metadata.resource_version.clone(),
            uid: nm.metadata.uid.clone(),
        }),
        ..Default::default()
    };
    match maintenances(client).delete(&name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(false),
        Err(e) => Err(api_error(
            Access::new("delete", MAINTENANCES).named(&name),
            e,
        )),
    }
}

/// Deletes the rollout's budget, then its maintenances (in that order: a rollout whose budget is
/// gone and whose maintenances are all Complete is a finished one).
pub async fn delete_rollout(client: &Client, rollout: &str, names: &[String]) -> Result<()> {
    match budgets(client)
        .delete(rollout, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(api_error(Access::new("delete", BUDGETS).named(rollout), e)),
    }
    for name in names {
        match maintenances(client)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(api_error(
                    Access::new("delete", MAINTENANCES).named(name),
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// Whether the maintenance is in Complete.
pub fn is_complete(nm: &NodeMaintenance) -> bool {
    nm.spec.stage() == Stage::Complete
}
