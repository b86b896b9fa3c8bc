//! How a rollout ends: done (its budget and maintenances deleted), a failed step (the
//! maintenances not admitted yet deleted and, with `--cordon-first`, their nodes' cordon given
//! back; the failed node stays cordoned), the timeout or Ctrl-C (nothing undone). Each prints what
//! is left and how to go on, and with `-o` the summary object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;

use evictord::api::Admitted;
use evictord::drain::holds::is_deleting;
use evictord::plugin::Result;
use evictord::plugin::errors::{EXIT_INTERRUPTED, EXIT_TIMEOUT};
use evictord::plugin::rollout::naming::node_of;
use evictord::plugin::rollout::phase::Phase;
use evictord::plugin::rollout::summary::{
    Failure, NodeSummary, Outcome, RolloutSummary, done_message, failure_message, stopped_message,
};

use crate::cli::Output;
use crate::read;
use crate::rollout_state::{RolloutArgs, Snapshot, shown, summaries};
use crate::rollout_view::View;
use crate::rollout_writes as w;
use crate::show::print_object;

/// Why the rollout stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Every node is done.
    Done,
    /// A step failed (or the cluster refused a write).
    Failed,
    /// `--timeout` passed.
    TimedOut,
    /// Ctrl-C.
    Interrupted,
}

impl Stop {
    /// The exit code: 0 done, 1 a failed step, 3 timed out, 130 Ctrl-C.
    pub fn code(self) -> i32 {
        match self {
            Stop::Done => 0,
            Stop::Failed => 1,
            Stop::TimedOut => EXIT_TIMEOUT,
            Stop::Interrupted => EXIT_INTERRUPTED,
        }
    }
}

/// What the end is made of: the rollout and its last state.
pub struct Ending {
    rollout: String,
    command: String,
    max_unavailable: String,
    cordon_first: bool,
    summaries: Vec<NodeSummary>,
    /// The rollout's maintenances by name.
    maintenances: Vec<String>,
    /// Nodes without a maintenance.
    without: Vec<String>,
}

impl Ending {
    /// The end of the rollout `a` in the state `s`.
    pub fn new(
        a: &RolloutArgs,
        max: &IntOrString,
        nodes: &[String],
        s: &Snapshot,
        phases: &BTreeMap<String, Phase>,
    ) -> Self {
        Ending {
            rollout: a.name.clone(),
            command: a.command.clone(),
            max_unavailable: shown(max),
            cordon_first: a.cordon_first,
            summaries: summaries(&a.name, nodes, s, phases, a.reboot),
            maintenances: s
                .maintenances
                .values()
                .filter_map(|m| m.metadata.name.clone())
                .collect(),
            without: nodes
                .iter()
                .filter(|n| !s.maintenances.contains_key(*n) && s.nodes.contains_key(*n))
                .cloned()
                .collect(),
        }
    }
}

/// After a failed step: deletes the rollout's maintenances that are not admitted (unless evictord
/// admitted one meanwhile: the delete's precondition), and with `--cordon-first` gives back the
/// cordon of their nodes and of nodes without a maintenance. Returns both lists.
async fn stop_the_rest(client: &Client, e: &Ending) -> Result<(Vec<String>, Vec<String>)> {
    let mut deleted = Vec::new();
    let mut freed = e.without.clone();
    for nm in w::rollout_maintenances(client, &e.rollout).await? {
        let waiting =
            !is_deleting(&nm) && !w::is_complete(&nm) && matches!(nm.admitted(), Admitted::Nothing);
        if waiting && w::delete_unchanged(client, &nm).await? {
            deleted.push(nm.metadata.name.clone().unwrap_or_default());
            freed.extend(node_of(&nm));
        }
    }
    let mut restored = Vec::new();
    if e.cordon_first {
        let others: Vec<_> = read::maintenances(client)
            .await?
            .into_iter()
            .filter(|m| {
                m.metadata
                    .name
                    .as_ref()
                    .is_none_or(|n| !deleted.contains(n))
            })
            .collect();
        freed.sort();
        freed.dedup();
        for n in freed {
            if w::restore_cordon(client, &n, &others).await? {
                restored.push(n);
            }
        }
    }
    Ok((deleted, restored))
}

/// Ends the rollout: cleans up as `stop` says, prints what is left and how to go on (and with
/// `-o` the summary), and returns the exit code.
pub async fn end(
    client: &Client,
    e: Ending,
    stop: Stop,
    failures: &[Failure],
    killed: &[String],
    output: Option<Output>,
    view: &mut View,
) -> Result<i32> {
    let (outcome, message) = match stop {
        Stop::Done => {
            w::delete_rollout(client, &e.rollout, &e.maintenances).await?;
            (Outcome::Done, done_message(&e.rollout, e.summaries.len()))
        }
        Stop::Failed => {
            let (deleted, restored) = stop_the_rest(client, &e).await?;
            (
                Outcome::StepFailed,
                failure_message(&e.rollout, &e.command, failures, &deleted, &restored),
            )
        }
        Stop::TimedOut | Stop::Interrupted => {
            let mut text = String::new();
            if stop == Stop::TimedOut {
                text.push_str("timed out\n");
            }
            for f in failures {
                text.push_str(&format!(
                    "step failed on node {} ({}); the node stays cordoned (maintenance {} stays in Drain)\n",
                    f.node, f.exit, f.maintenance
                ));
            }
            text.push_str(&stopped_message(&e.rollout, &e.command, killed));
            let outcome = if stop == Stop::TimedOut {
                Outcome::TimedOut
            } else {
                Outcome::Interrupted
            };
            (outcome, text)
        }
    };
    view.finish();
    view.say(&message);
    if let Some(o) = output {
        let summary = RolloutSummary {
            rollout: e.rollout.clone(),
            max_unavailable: e.max_unavailable.clone(),
            outcome,
            message,
            nodes: e.summaries,
        };
        print_object(&summary, o)?;
    }
    Ok(stop.code())
}
