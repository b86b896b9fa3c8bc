//! The admission of NodeMaintenances by MaintenanceBudgets (SPEC 6.1): the I/O shell of the pure
//! [`admit`]. One loop on the leader makes every decision, one pass at a time, so two decisions
//! never overlap; it runs after any change of a maintenance, a node or a budget, when a window
//! opens or closes, and at least every [`FALLBACK`].
//!
//! A pass decides on the caches first. Only when that admits something is the decision made again
//! on a consistent read of every maintenance and budget (a quorum LIST, which also covers a cache
//! that lags behind this process's own writes or a newly elected leader's first pass), and each
//! admission is then written with the resourceVersion of the object it was decided on, before
//! the maintenance touches any node: a write based on a stale read fails and the pass runs again.
//! The same pass writes the `Admitted` condition of the maintenances it queues and the status of
//! every budget, when they change.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::admitted::{
    admitted_condition, admitted_status, queued_condition, with_waiting_messages,
};
use super::gather::admission_input;
use super::writes::{self, Error};
use crate::api::{MaintenanceBudget, NodeMaintenance};
use crate::cluster::Caches;
use crate::controller::own_writes::OwnWrites;
use crate::drain::admission::status::{BudgetObject, budget_status};
use crate::drain::admission::{AdmissionOutput, Verdict, admit};
use crate::metrics::{QUEUE_REASONS, QueueReasonLabel, metrics};
use crate::recorder::{Event, EventType, Recorder};

/// The longest a pass waits for a change.
pub const FALLBACK: Duration = Duration::from_secs(30);
/// Changes arriving within this of each other make one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// The next pass after a write conflict (the object changed since it was read).
const AFTER_CONFLICT: Duration = Duration::from_millis(200);
/// The next pass after another failure.
const AFTER_ERROR: Duration = Duration::from_secs(2);

/// What the loop needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Shared caches.
    pub caches: Arc<Caches>,
    /// Event recorder.
    pub recorder: Recorder,
    /// The maintenance writes of this loop and of the reconciler that the shared cache has not
    /// shown yet (shared with the reconciler's [`Context`](super::context::Context)).
    pub own_writes: Arc<OwnWrites>,
}

/// Runs the admission loop until `shutdown` (the leader's term).
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let caches = ctx.caches.clone();
    caches.wait_synced().await;
    let mut changes = futures::stream::select_all([
        caches.node_maintenances.changes().map(drop).boxed(),
        caches.nodes.changes().map(drop).boxed(),
        caches.maintenance_budgets.changes().map(drop).boxed(),
    ]);
    info!("starting the maintenance admission");
    loop {
        let wait = match pass(&ctx, &shutdown).await {
            Ok(Some(edge)) => until(edge).min(FALLBACK),
            Ok(None) => FALLBACK,
            Err(e) if e.is_conflict() => {
                debug!(error = %e, "admission raced another write; deciding again");
                AFTER_CONFLICT
            }
            Err(e) => {
                warn!(error = %e, "admission pass failed; retrying");
                AFTER_ERROR
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            change = changes.next() => {
                if change.is_none() {
                    return;
                }
                // A burst of changes (a drain moves many pods and statuses at once) is one pass.
                tokio::time::sleep(DEBOUNCE).await;
                while futures::FutureExt::now_or_never(changes.next()).flatten().is_some() {}
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// How long until `t` (zero when past), and a second more so a window edge is behind us.
fn until(t: Timestamp) -> Duration {
    let left = t.duration_since(Timestamp::now());
    Duration::try_from(left).unwrap_or_default() + Duration::from_secs(1)
}

/// One pass; returns the next window edge of any budget.
async fn pass(ctx: &Context, term: &CancellationToken) -> Result<Option<Timestamp>, Error> {
    let now = Timestamp::now();
    let nodes = ctx.caches.nodes.all();
    let maintenances = ctx.caches.node_maintenances.all();
    let budgets = ctx.caches.maintenance_budgets();
    let input = admission_input(
        &nodes,
        budgets.as_deref().unwrap_or_default(),
        &maintenances,
    );
    let output = admit(&input, now);
    if output
        .verdicts
        .iter()
        .any(|(_, v)| matches!(v, Verdict::Admit { .. }))
    {
        return admit_confirmed(ctx, term, &nodes, now).await.map(|()| None);
    }
    // Until the budget cache has synced (or while its CRD is missing) queues are not known.
    let Some(budgets) = budgets else {
        return Ok(None);
    };
    set_queued_gauges(&output);
    ctx.own_writes
        .retain(|name| maintenances.iter().any(|m| m.name_any() == name));
    let mut first = None;
    for (name, verdict) in &output.verdicts {
        let Verdict::Queue(queued) = verdict else {
            continue;
        };
        let Some(nm) = maintenances.iter().find(|m| m.name_any() == *name) else {
            continue;
        };
        // The copy decided on is no longer the cache's (the pass's writes take a while), or the
        // cache is behind a write of the reconciler's (its first status, a finalizer): a write
        // over this copy would be refused. The change's watch event brings the next pass.
        let version = nm.resource_version();
        let cached = ctx.caches.node_maintenances.get(None, name);
        if cached.map(|c| c.resource_version()) != Some(version.clone())
            || ctx.own_writes.behind(name, version.as_deref())
        {
            continue;
        }
        let Some(condition) = queued_condition(nm, queued, now) else {
            continue;
        };
        let previous = admitted_condition(nm).map(|c| (c.status.clone(), c.reason.clone()));
        debug!(maintenance = %name, version = ?version, "writing the queue status");
        let mut status = nm.status.clone().unwrap_or_default();
        let changed_reason =
            previous.as_ref() != Some(&(condition.status.clone(), condition.reason.clone()));
        let message = condition.message.clone();
        status.conditions = crate::api::with_condition(&status.conditions, condition);
        with_waiting_messages(&mut status, &queued.waiting, &message);
        match writes::write_status(&ctx.client, &ctx.own_writes, nm, &status).await {
            Ok(_) if changed_reason => {
                publish(ctx, nm, "Queued", message, false).await;
            }
            Ok(_) => {}
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    write_budget_statuses(ctx, &input, &output, &budgets, now).await;
    if let Some(e) = first {
        return Err(e);
    }
    Ok(next_edge(&output))
}

/// Decides again on a consistent read and writes each admission, oldest first, guarded by the
/// resourceVersion it was decided on.
async fn admit_confirmed(
    ctx: &Context,
    term: &CancellationToken,
    nodes: &[Arc<k8s_openapi::api::core::v1::Node>],
    now: Timestamp,
) -> Result<(), Error> {
    let (maintenances, budgets) = writes::read_for_admission(&ctx.client).await?;
    let maintenances: Vec<Arc<NodeMaintenance>> = maintenances.into_iter().map(Arc::new).collect();
    let budgets: Vec<Arc<MaintenanceBudget>> = budgets.into_iter().map(Arc::new).collect();
    let input = admission_input(nodes, &budgets, &maintenances);
    let output = admit(&input, now);
    for (name, verdict) in &output.verdicts {
        let Verdict::Admit {
            nodes: new,
            budgets,
        } = verdict
        else {
            continue;
        };
        // A replica that stopped leading decides nothing more.
        if term.is_cancelled() {
            return Ok(());
        }
        let (Some(nm), Some(state)) = (
            maintenances.iter().find(|m| m.name_any() == *name),
            input.maintenances.iter().find(|m| m.name == *name),
        ) else {
            continue;
        };
        let admitted: Vec<String> = state.admitted.iter().cloned().collect();
        let status = admitted_status(nm, &admitted, new, budgets, now);
        writes::write_status(&ctx.client, &ctx.own_writes, nm, &status).await?;
        metrics().admissions.inc();
        let message = admitted_condition_message(&status);
        info!(maintenance = %name, nodes = ?new, budgets = ?budgets, "admitted");
        publish(ctx, nm, "Admitted", message, false).await;
    }
    Ok(())
}

fn admitted_condition_message(status: &crate::api::NodeMaintenanceStatus) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == crate::api::CONDITION_ADMITTED)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Writes each budget's status when it changed.
async fn write_budget_statuses(
    ctx: &Context,
    input: &crate::drain::admission::AdmissionInput,
    output: &AdmissionOutput,
    budgets: &[Arc<MaintenanceBudget>],
    now: Timestamp,
) {
    for (b, budget) in budgets.iter().enumerate() {
        let object = BudgetObject {
            generation: budget.metadata.generation,
            status: budget.status.as_ref(),
        };
        let status = budget_status(input, output, b, &object, now);
        if budget.status.as_ref() == Some(&status) {
            continue;
        }
        let name = budget.name_any();
        if let Err(e) = writes::write_budget_status(&ctx.client, &name, &status).await {
            warn!(budget = %name, error = %e, "could not write the budget's status");
        }
    }
}

fn set_queued_gauges(output: &AdmissionOutput) {
    for &reason in QUEUE_REASONS {
        let count = output
            .verdicts
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Queue(q) if q.reason() == reason))
            .count();
        metrics()
            .queued_maintenances
            .get_or_create(&QueueReasonLabel { reason })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// The next time a budget's window opens or closes.
fn next_edge(output: &AdmissionOutput) -> Option<Timestamp> {
    output
        .windows
        .iter()
        .flat_map(|w| [w.closes, w.next_open])
        .flatten()
        .min()
}

async fn publish(
    ctx: &Context,
    nm: &NodeMaintenance,
    reason: &str,
    message: String,
    warning: bool,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(message.chars().take(1000).collect()),
        action: "Admit".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &nm.object_ref(&())).await {
        warn!(error = %e, reason, "could not record event");
    }
}

#[cfg(test)]
mod tests {
    /// One name per event in code and the book.
    #[rstest::rstest]
    fn admission_events_are_listed_in_the_book(#[values("Admitted", "Queued")] reason: &str) {
        let book = include_str!("../../../docs/src/introduction.md");
        assert!(
            book.contains(&format!("`{reason}`")),
            "docs/src/introduction.md lists {reason}"
        );
    }
}
