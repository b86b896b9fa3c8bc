//! A drain preview from the cluster: reads what it is computed from (the nodes, the pods on the
//! selected nodes, the maintenances, the requests, and the namespaces' labels when a pod rule
//! needs them), computes it, and refuses the pods `kubectl drain` would refuse (`drain` and
//! `rollout`, before they create anything).

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Client;

use evictord::api::{NodeMaintenance, Stage};
use evictord::cluster::CachedPod;
use evictord::plugin::maintenance::{DrainDeadline, maintenance_for, with_deadline};
use evictord::plugin::planned::Preview;
use evictord::plugin::preview::preview;
use evictord::plugin::safety::{Overrides, refusal};
use evictord::plugin::{Error, Result};

use crate::read;

/// What a preview was computed from.
pub struct Context {
    /// Every node.
    pub nodes: Vec<Arc<Node>>,
    /// The pods on the selected nodes.
    pub pods: Vec<CachedPod>,
    /// Every maintenance.
    pub maintenances: Vec<NodeMaintenance>,
}

/// The preview of `planned` over `selected`, with what it was computed from.
pub async fn preview_of(
    client: &Client,
    planned: &NodeMaintenance,
    selected: &[String],
) -> Result<(Preview, Context)> {
    let nodes = read::all_nodes(client).await?;
    let pods = read::pods_on(client, selected).await?;
    let maintenances = read::maintenances(client).await?;
    let requests = read::requests(client).await?;
    let namespaces =
        read::namespace_labels(client, maintenances.iter().chain(std::iter::once(planned))).await?;
    let p = preview(
        planned,
        &maintenances,
        &nodes,
        &pods,
        &requests,
        &namespaces,
        Timestamp::now(),
    );
    Ok((
        p,
        Context {
            nodes,
            pods,
            maintenances,
        },
    ))
}

/// Fails with the pods `kubectl drain` would refuse, unless `overrides` let them through.
/// `deadline` is the maintenance's (a `Force` deadline deletes the pods waited for too).
pub fn refuse_unsafe(
    p: &Preview,
    deadline: Option<DrainDeadline>,
    overrides: Overrides,
) -> Result<()> {
    match refusal(&p.pods, deadline, overrides) {
        Some(u) => Err(Error::Unsafe(u)),
        None => Ok(()),
    }
}

/// The check of a rollout's `nodes` whose maintenances are still to be created: previewed as one
/// maintenance of them (each has no rules of its own, so the same pods are skipped or waited for).
pub async fn check_rollout_nodes(
    client: &Client,
    nodes: &[String],
    deadline: Option<DrainDeadline>,
    overrides: Overrides,
) -> Result<()> {
    if nodes.is_empty() || (overrides.force && overrides.delete_emptydir_data) {
        return Ok(());
    }
    let planned = with_deadline(
        maintenance_for("(rollout)", nodes, &[], None, Stage::Drain),
        deadline,
    );
    let (p, _) = preview_of(client, &planned, nodes).await?;
    refuse_unsafe(&p, deadline, overrides)
}
