//! The keeper: on every NodeMaintenance change and every check interval, reads the node and the
//! held directory, decides each held entry ([`decide_entry`]) from whether a maintenance still
//! holds the node ([`holders`]), and carries it out ([`Store::apply`]): finishes or undoes a
//! move cut short, puts manifests back when no maintenance holds the node, and reports the
//! entries someone else changed. It also keeps the node's `evictord.dev/node-agent`
//! annotation in place.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Error;
use super::held::{Conflict, EntryAction, HeldEntry, decide_entry};
use super::report::{
    Context, HELD_MANIFEST_CONFLICT, MANIFEST_HELD, MANIFEST_RESTORED, count_move, set_gauges,
};
use super::store::Applied;
use crate::api::NODE_AGENT_ANNOTATION;
use crate::drain::holds::holders;
use crate::recorder::EventType;

/// What one look at the held directory did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Each entry, the action decided and what it changed.
    pub entries: Vec<(HeldEntry, EntryAction, Applied)>,
    /// Manifests held after the look.
    pub held: usize,
}

/// Reads the agent's Node.
///
/// # Errors
/// When the Node cannot be read.
pub async fn read_node(ctx: &Context) -> Result<Node, Error> {
    Api::<Node>::all(ctx.client.clone())
        .get(&ctx.node)
        .await
        .map_err(|e| Error::Api(format!("reading node {}", ctx.node), e))
}

/// Sets the Node's `evictord.dev/node-agent` annotation to the agent's name when it is missing
/// or names another agent.
///
/// # Errors
/// When the Node cannot be patched.
pub async fn announce(ctx: &Context, node: &Node) -> Result<(), Error> {
    let current = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_AGENT_ANNOTATION));
    if current == Some(&ctx.agent) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {NODE_AGENT_ANNOTATION: ctx.agent}}});
    Api::<Node>::all(ctx.client.clone())
        .patch(&ctx.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::Api(format!("annotating node {}", ctx.node), e))?;
    info!(node = %ctx.node, agent = %ctx.agent, "announced the node agent on the node ({NODE_AGENT_ANNOTATION})");
    Ok(())
}

/// One look: the node (announced again if someone removed the annotation), whether a
/// maintenance holds it, then every held entry under the lock.
///
/// # Errors
/// When the Node cannot be read (nothing is restored without knowing) or a filesystem step
/// fails. A failed announcement is logged only: it does not keep manifests from coming back.
pub async fn check(ctx: &Arc<Context>) -> Result<Outcome, Error> {
    let node = read_node(ctx).await?;
    if let Err(e) = announce(ctx, &node).await {
        warn!(error = %e, "announcing the node agent on the node failed; retrying at the next check");
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let maintenances = ctx.maintenances();
    let holding = !holders(&maintenances, &ctx.node, &labels).is_empty();
    let c = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let store = &c.store;
        let _lock = store.lock()?;
        store.remove_partial_records()?;
        let snapshot = store.scan()?;
        let mut entries = Vec::with_capacity(snapshot.entries.len());
        for entry in snapshot.entries {
            let action = decide_entry(&entry, &c.node, holding);
            let applied = store.apply(&entry, &action)?;
            entries.push((entry, action, applied));
        }
        let held = store.scan()?.held_count();
        Ok(Outcome { entries, held })
    })
    .await?
}

/// Runs the keeper until `shutdown`: a look at once, after every wake-up and every `interval`.
/// `reported` remembers the conflicts already told (each is told once per process).
pub async fn run(ctx: Arc<Context>, interval: Duration, shutdown: CancellationToken) {
    let mut reported: BTreeSet<(String, &'static str)> = BTreeSet::new();
    loop {
        match check(&ctx).await {
            Ok(outcome) => report(&ctx, &outcome, &mut reported).await,
            Err(e) => warn!(error = %e, "checking the held static pod manifests failed; retrying"),
        }
        tokio::select! {
            () = ctx.wake.notified() => {}
            () = tokio::time::sleep(interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// The conflicts of a look: the entries decided as conflicts, and the restores that found a
/// file at the original path.
fn conflicts(outcome: &Outcome) -> Vec<(String, Conflict)> {
    outcome
        .entries
        .iter()
        .filter_map(|(entry, action, applied)| match (action, applied) {
            (EntryAction::Conflict(c), _) => Some((entry.file.clone(), c.clone())),
            (EntryAction::Restore, Applied::Nothing) => {
                Some((entry.file.clone(), Conflict::FileAtOriginalPath))
            }
            _ => None,
        })
        .collect()
}

async fn report(ctx: &Context, outcome: &Outcome, reported: &mut BTreeSet<(String, &'static str)>) {
    for (entry, _, applied) in &outcome.entries {
        let file = &entry.file;
        let maintenance = match &entry.record {
            Some(Ok(r)) => r.maintenance.as_str(),
            _ => "",
        };
        let (result, reason, note) = match applied {
            Applied::Restored => (
                "restored",
                MANIFEST_RESTORED,
                format!(
                    "Put static pod manifest {file} back into the kubelet's directory: no NodeMaintenance holds the node any more (held for {maintenance})"
                ),
            ),
            Applied::Held => (
                "held",
                MANIFEST_HELD,
                format!(
                    "Finished moving static pod manifest {file} out of the kubelet's directory for node maintenance {maintenance}"
                ),
            ),
            Applied::Nothing | Applied::Forgotten => continue,
        };
        count_move(result);
        info!(%file, "{note}");
        ctx.event(EventType::Normal, reason, note).await;
    }
    let now = conflicts(outcome);
    for (file, conflict) in &now {
        if !reported.insert((file.clone(), conflict.label())) {
            continue;
        }
        let note = format!("{}: {}", ctx.store.dir().display(), conflict.describe(file));
        warn!(%file, conflict = conflict.label(), "{note}");
        ctx.event(EventType::Warning, HELD_MANIFEST_CONFLICT, note)
            .await;
    }
    // A conflict the administrator resolved is told again if it comes back.
    reported.retain(|(file, label)| now.iter().any(|(f, c)| f == file && c.label() == *label));
    set_gauges(outcome.held, now.len());
}
