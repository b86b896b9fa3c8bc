//! What a rollout works from: the command's arguments, what it reads of the cluster each time it
//! looks (its budget, maintenances and step records, and its nodes, from the watches' stores), each
//! node's phase from them, and the per-node summary.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;

use evictord::api::{MaintenanceBudget, NodeMaintenance};
use evictord::plugin::maintenance::DrainDeadline;
use evictord::plugin::rollout::naming::{maintenance_name, node_of};
use evictord::plugin::rollout::phase::{NodeView, Phase, phase};
use evictord::plugin::rollout::record::int_or_string;
use evictord::plugin::rollout::step::StepRecord;
use evictord::plugin::rollout::summary::NodeSummary;
use evictord::plugin::{Error, Result};

use crate::rollout_step::{StepProcess, alive};
use crate::rollout_watch::Watches;
use crate::rollout_writes as w;

/// The running steps, by node: when they started and their process.
pub type Running = BTreeMap<String, (Timestamp, StepProcess)>;

/// The command's arguments.
pub struct RolloutArgs {
    /// The rollout's name.
    pub name: String,
    /// Node names.
    pub nodes: Vec<String>,
    /// Or a label selector.
    pub selector: Option<String>,
    /// `--max-unavailable`.
    pub max_unavailable: String,
    /// `--exec`.
    pub exec: Option<String>,
    /// `--reboot`.
    pub reboot: bool,
    /// `--cordon-first`.
    pub cordon_first: bool,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    /// `--reason`.
    pub reason: Option<String>,
    /// `--drain-deadline` and `--deadline-policy`.
    pub deadline: Option<DrainDeadline>,
    /// `--force` and `--delete-emptydir-data`.
    pub overrides: evictord::plugin::safety::Overrides,
    /// The command line, to say how to resume.
    pub command: String,
}

/// What the rollout reads each time it looks.
pub struct Snapshot {
    /// Its budget.
    pub budget: Option<MaintenanceBudget>,
    /// Its maintenances by node.
    pub maintenances: BTreeMap<String, NodeMaintenance>,
    /// Its nodes that exist.
    pub nodes: BTreeMap<String, Node>,
    /// The step records by node.
    pub records: BTreeMap<String, StepRecord>,
}

pub async fn snapshot(
    client: &Client,
    rollout: &str,
    nodes: &[String],
    watches: &Watches,
) -> Result<Snapshot> {
    let wanted: BTreeSet<&String> = nodes.iter().collect();
    let mut maintenances = BTreeMap::new();
    let mut records = BTreeMap::new();
    let listed = match watches.maintenances(rollout, nodes).await {
        Some(cached) => cached,
        None => w::rollout_maintenances(client, rollout).await?,
    };
    for nm in listed {
        let Some(node) = node_of(&nm).filter(|n| wanted.contains(n)) else {
            continue;
        };
        if let Some(r) = StepRecord::read(&nm).map_err(Error::StepRecord)? {
            records.insert(node.clone(), r);
        }
        maintenances.insert(node, nm);
    }
    let nodes = watches
        .nodes()?
        .into_iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            wanted.contains(&name).then(|| (name, (*n).clone()))
        })
        .collect();
    Ok(Snapshot {
        budget: match watches.budget() {
            Some(b) => b,
            None => w::budget(client, rollout).await?,
        },
        maintenances,
        nodes,
        records,
    })
}

/// Each node's phase.
pub fn phases_of(
    s: &Snapshot,
    nodes: &[String],
    running: &Running,
    reboot: bool,
    host: &str,
) -> BTreeMap<String, Phase> {
    nodes
        .iter()
        .map(|n| {
            let v = NodeView {
                node: n,
                object: s.nodes.get(n),
                maintenance: s.maintenances.get(n),
                record: s.records.get(n),
                running_here: running.get(n).map(|(t, _)| *t),
            };
            (n.clone(), phase(&v, reboot, |h, pid| alive(host, h, pid)))
        })
        .collect()
}

/// The summary of each node.
pub fn summaries(
    rollout: &str,
    nodes: &[String],
    s: &Snapshot,
    phases: &BTreeMap<String, Phase>,
    reboot: bool,
) -> Vec<NodeSummary> {
    nodes
        .iter()
        .filter_map(|n| {
            let p = phases.get(n)?;
            Some(NodeSummary {
                node: n.clone(),
                maintenance: s
                    .maintenances
                    .get(n)
                    .and_then(|m| m.metadata.name.clone())
                    .unwrap_or_else(|| maintenance_name(rollout, n)),
                phase: p.label(),
                detail: p.text(reboot, None),
                step: s.records.get(n).cloned(),
            })
        })
        .collect()
}

/// `--max-unavailable` as the summary shows it.
pub fn shown(max: &IntOrString) -> String {
    int_or_string(max)
}
