//! The I/O shell of the node maintenance controller: a kube-runtime `Controller` on
//! NodeMaintenances, also triggered by Node, Pod and EvictionRequest changes (mapped to the
//! maintenances selecting the node concerned), which gathers its input from the shared caches,
//! asks the pure decisions ([`stages`](super::stages), [`cordon`](super::cordon),
//! [`plan_drain`], [`requests`](super::requests)) and applies them through
//! [`writes`](super::writes), then records events and metrics.
//!
//! Drain targets couple intersecting maintenances, so every reconciliation of a maintenance in
//! Drain resolves all maintenances in Drain at once and writes the status of the one being
//! reconciled; a change of any maintenance re-triggers every maintenance in Drain, so the others
//! follow. Statuses are a fixed point of the resolution, so this settles.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::{Action as Requeue, Config, Controller};
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

use super::admitted::{released, waiting_statuses, with_pending};
pub use super::context::Context;
use super::context::{Note, keep, publish};
use super::deadlines::{DeadlineStep, deadline_step, force};
use super::gather::{
    admitted_nodes, apply_pod_rules, drain_input, is_draining, mark_unregistered, selects,
    waiting_nodes,
};
use super::gauges::refresh_gauges;
use super::nodes::{cordon_nodes, daemonset_targeted_nodes, restore_nodes};
use super::pacing::{StatusWrite, status_write};
use super::requests::{RequestAction, complete_work, drain_action, requested_for_node};
use super::stages::{
    Lifecycle, drain_started, finalizers_without_ours, lifecycle, stage_statuses_with,
    with_drained_condition,
};
use super::writes::{self, Error};
use crate::api::{
    CONDITION_DRAINED, EvictionRequest, MAINTENANCE_FINALIZER, NodeMaintenance, Stage,
};
use crate::cluster::{CachedPod, Caches, PodLabels};
use crate::controller::own_writes::creation_pending;
use crate::drain::{DrainEvent, DrainInput, DrainOutput, MaintenanceOutput, plan_drain};
use crate::metrics::{ControllerLabel, metrics};

const CONTROLLER: &str = "nodemaintenance";
/// EvictionRequest writes in flight at once.
const REQUEST_WRITES: usize = 16;
/// A safety net: maintenances with work in flight are looked at again at least this often,
/// even if no watched change arrives.
const RESYNC: Duration = Duration::from_secs(60);

fn controller_label() -> ControllerLabel {
    ControllerLabel {
        controller: CONTROLLER,
    }
}

fn reference(nm: &NodeMaintenance) -> ObjectRef<NodeMaintenance> {
    ObjectRef::from_obj(nm)
}

/// The non-Idle maintenances selecting the node of that name.
fn selecting(caches: &Caches, node: &str) -> Vec<ObjectRef<NodeMaintenance>> {
    let Some(node) = caches.nodes.get(None, node) else {
        return Vec::new();
    };
    caches
        .node_maintenances
        .all()
        .iter()
        .filter(|m| m.spec.stage() != Stage::Idle && selects(m, &node))
        .map(|m| reference(m))
        .collect()
}

/// The maintenances an EvictionRequest change concerns: those selecting its pod's node, or the
/// node it was created for when the pod is gone.
fn for_request(caches: &Caches, r: &EvictionRequest) -> Vec<ObjectRef<NodeMaintenance>> {
    let pod = caches
        .pods
        .get(r.namespace().as_deref(), &r.spec.target.pod.name)
        .filter(|p| p.uid() == r.spec.target.pod.uid);
    match pod.as_ref().and_then(|p| p.spec.node_name.as_deref()) {
        Some(node) => selecting(caches, node),
        None => requested_for_node(r).map_or_else(Vec::new, |n| selecting(caches, n)),
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let caches = ctx.caches.clone();
    caches.wait_synced().await;
    // Every stage's series exists (0) before the first maintenance is reconciled, so
    // `*_over_time` of the alerts sees the zeros before a drain starts.
    refresh_gauges(&caches);
    let store = caches.node_maintenances.store().clone();
    let (c1, c2, c3, c4) = (
        caches.clone(),
        caches.clone(),
        caches.clone(),
        caches.clone(),
    );
    Controller::for_shared_stream(caches.node_maintenances.changes(), store)
        // Changes arrive in bursts (a drain moves many pods at once): batch them.
        .with_config(Config::default().debounce(Duration::from_millis(100)))
        // Intersecting maintenances limit each other: any change may move the others.
        .watches_shared_stream(caches.node_maintenances.changes(), move |_| {
            c1.node_maintenances
                .all()
                .iter()
                .filter(|m| is_draining(m))
                .map(|m| reference(m))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(caches.nodes.changes(), move |node: Arc<Node>| {
            selecting(&c2, &node.name_any())
        })
        .watches_shared_stream(caches.pods.changes(), move |pod: Arc<CachedPod>| {
            pod.spec
                .node_name
                .as_deref()
                .map_or_else(Vec::new, |n| selecting(&c3, n))
        })
        .watches_shared_stream(
            caches.eviction_requests.changes(),
            move |r: Arc<EvictionRequest>| for_request(&c4, &r),
        )
        .reconcile_all_on(crate::controller::resync_ticks())
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "reconcile did not complete");
            }
        })
        .await;
}

fn error_policy(_nm: Arc<NodeMaintenance>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    crate::controller::requeue_after_error(CONTROLLER, error.is_conflict(), error)
}

async fn reconcile(nm: Arc<NodeMaintenance>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = std::time::Instant::now();
    let span = info_span!("reconcile", controller = CONTROLLER, maintenance = %nm.name_any());
    let result = reconcile_inner(nm, &ctx).instrument(span).await;
    metrics()
        .reconcile_duration
        .get_or_create(&controller_label())
        .observe(started.elapsed().as_secs_f64());
    refresh_gauges(&ctx.caches);
    result
}

async fn reconcile_inner(nm: Arc<NodeMaintenance>, ctx: &Context) -> Result<Requeue, Error> {
    // The latest cached copy: the trigger may be older than the store.
    let nm = ctx
        .caches
        .node_maintenances
        .get(None, &nm.name_any())
        .unwrap_or(nm);
    // The cache is behind a write of ours (this reconciler's or the admission's): a decision on
    // this copy would write over a version the server no longer has. The write's watch event
    // brings the maintenance back.
    if ctx
        .own_writes
        .behind(&nm.name_any(), nm.resource_version().as_deref())
    {
        return Ok(Requeue::await_change());
    }
    let (stage, add_finalizer, remove_finalizer) = match lifecycle(&nm) {
        Lifecycle::Nothing => return Ok(Requeue::await_change()),
        Lifecycle::MoveToComplete => {
            writes::move_to_complete(&ctx.client, &ctx.own_writes, &nm).await?;
            return Ok(Requeue::await_change());
        }
        Lifecycle::Run {
            stage,
            add_finalizer,
            remove_finalizer_when_done,
        } => (stage, add_finalizer, remove_finalizer_when_done),
    };
    let mut current = (*nm).clone();
    if add_finalizer {
        let mut finalizers = current.finalizers().to_vec();
        finalizers.push(MAINTENANCE_FINALIZER.to_string());
        current =
            writes::set_finalizers(&ctx.client, &ctx.own_writes, &current, finalizers).await?;
    }
    let now = Time(Timestamp::now());
    let old_status = current.status.clone().unwrap_or_default();
    let mut status = old_status.clone();
    let mut notes = Vec::new();
    if let Some(stages) = stage_statuses_with(&status.stage_statuses, stage, now.clone()) {
        status.stage_statuses = stages;
        notes.push(Note::normal(
            "StageStarted",
            format!("Stage {stage} started"),
        ));
    }

    let nodes = ctx.caches.nodes.all();
    // Only the nodes it was admitted to act on (SPEC 6.1); the others wait, untouched.
    let selected = admitted_nodes(&current, &nodes);
    let waiting = waiting_nodes(&current, &nodes);
    with_pending(&current, &mut status, now.0);
    let mut first_error: Option<Error> = None;
    let mut done = true;
    // Drain: every maintenance in Drain resolved at once (drain targets couple them).
    let mut drain_pods = BTreeMap::new();
    let drain = (stage == Stage::Drain).then(|| {
        let name = current.name_any();
        let (output, input, pods) = resolve_drain(ctx, &nodes);
        drain_pods = input.pods;
        let mine = output.maintenances.into_iter().find(|o| o.name == name);
        (mine, pods)
    });
    let mut deadlines = DeadlineStep::default();
    let mut to_request = None;
    match stage {
        Stage::Idle => {}
        Stage::Cordon | Stage::Drain => {
            // A node whose targets reach its DaemonSet pods gets the maintenance taint first,
            // before the status says so and before any request for such a pod exists.
            let tainted: BTreeSet<&str> = drain
                .as_ref()
                .and_then(|(mine, _)| mine.as_ref())
                .map(|m| daemonset_targeted_nodes(m).collect())
                .unwrap_or_default();
            keep(
                &mut first_error,
                cordon_nodes(ctx, &current, &selected, &nodes, &tainted).await,
            );
        }
        Stage::Complete => {
            let restored = restore_nodes(ctx, &current, &selected, &nodes).await;
            // The nodes are given back: no budget counts them any more.
            if restored.is_ok()
                && let Some(record) = released(&current, &selected, now.0)
            {
                status.admission = Some(record);
            }
            keep(&mut first_error, restored);
            match complete_requests(ctx, &selected, &nodes).await {
                Ok(finished) => done = finished,
                Err(e) => {
                    done = false;
                    keep(&mut first_error, Err(e));
                }
            }
        }
    }
    if matches!(stage, Stage::Cordon | Stage::Drain) && !waiting.is_empty() {
        // Nodes queued by a budget say which budget holds them; those admitted follow.
        let mut lines = drain
            .as_ref()
            .and_then(|(mine, _)| mine.as_ref())
            .map(|m| m.node_statuses.clone())
            .unwrap_or_default();
        lines.extend(waiting_statuses(&current, &waiting));
        status.node_statuses = lines;
    }
    if let Some((Some(mine), pods)) = &drain {
        // Drained only once every selected node was admitted and drained.
        let drained = mine.drained && waiting.is_empty();
        status.drain_plan_position = Some(mine.drain_plan_position);
        if waiting.is_empty() {
            status.node_statuses = mine.node_statuses.clone();
        }
        status.conditions = with_drained_condition(
            &status.conditions,
            drained,
            current.metadata.generation,
            now.clone(),
        );
        notes.extend(mine.events.iter().map(drain_note));
        // SPEC 6.2: each admitted node's deadline, DeadlineExceeded, and what Force deletes.
        deadlines = deadline_step(&current, &mut status, &old_status, &drain_pods, now.0);
        for node in &deadlines.newly {
            metrics().deadlines_exceeded.inc();
            notes.push(Note {
                reason: "DeadlineExceeded",
                message: format!(
                    "The drain deadline of node {node} passed with targeted pods left"
                ),
                warning: true,
            });
        }
        if drained && !old_status.is_true(CONDITION_DRAINED) {
            if let Some(start) = drain_started(&status.stage_statuses) {
                let secs = now.0.duration_since(start.0).as_secs_f64();
                metrics().drain_duration.observe(secs.max(0.0));
            }
            notes.push(Note::normal(
                "Drained",
                "Every targeted pod is gone from the selected nodes".to_string(),
            ));
        }
        to_request = Some((mine, pods));
    }
    let name = current.name_any();
    let mut progress_later = None;
    match status_write(&old_status, &status, ctx.status_writes.since(&name)) {
        StatusWrite::Unchanged => {}
        StatusWrite::Now => {
            debug!(ops = ?writes::status_ops(Some(&old_status), &status), "writing the status");
            current = writes::write_status(&ctx.client, &ctx.own_writes, &current, &status).await?;
            ctx.status_writes.wrote(&name);
        }
        StatusWrite::Later(after) => progress_later = Some(after),
    }
    // Requests only once the status records the targets they follow from: an implicit
    // interceptor (DaemonSet, static pods) acts only for pods a recorded target covers.
    if let Some((mine, pods)) = to_request {
        keep(&mut first_error, request_pods(ctx, mine, pods).await);
    }
    force(
        &ctx.client,
        &ctx.recorder,
        &current.name_any(),
        &deadlines.force,
    )
    .await;
    publish(ctx, &current, &notes).await;
    if let Some(e) = first_error {
        return Err(e);
    }
    if remove_finalizer && done {
        writes::set_finalizers(
            &ctx.client,
            &ctx.own_writes,
            &current,
            finalizers_without_ours(&current),
        )
        .await?;
        return Ok(Requeue::await_change());
    }
    let next = match stage {
        // Looked at again when the next deadline passes, at the latest.
        Stage::Drain => Some(
            deadlines
                .next
                .and_then(|t| std::time::Duration::try_from(t.duration_since(now.0)).ok())
                .map_or(RESYNC, |d| d.min(RESYNC) + Duration::from_millis(100)),
        ),
        Stage::Complete if !done => Some(RESYNC),
        _ => None,
    };
    // A progress change held back is written at the next look, at the latest after the interval.
    Ok(match next.into_iter().chain(progress_later).min() {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

/// Resolves every maintenance in Drain over the caches: the decision, its input and the pods.
fn resolve_drain(
    ctx: &Context,
    nodes: &[Arc<Node>],
) -> (DrainOutput, DrainInput, Vec<Arc<CachedPod>>) {
    let maintenances = ctx.caches.node_maintenances.all();
    let pods = ctx.caches.pods.all();
    let requests = &ctx.caches.eviction_requests;
    let mut input = drain_input(
        &maintenances,
        nodes,
        &pods,
        |ns, uid| requests.get(Some(ns), uid),
        ctx.daemonset_interceptor,
    );
    apply_pod_rules(&mut input, &maintenances, nodes, &pods, |ns| {
        ctx.caches.namespace_labels(ns)
    });
    if ctx.interceptor_registration.reports() {
        let caches = &ctx.caches;
        mark_unregistered(
            &mut input,
            &pods,
            |ns, uid| requests.get(Some(ns), uid),
            |name| caches.registration(name),
        );
    }
    (plan_drain(&input), input, pods)
}

fn drain_note(e: &DrainEvent) -> Note {
    Note::normal(e.reason(), e.message())
}

/// Drain: creates or joins a request for every pod the maintenance targets.
async fn request_pods(
    ctx: &Context,
    mine: &MaintenanceOutput,
    pods: &[Arc<CachedPod>],
) -> Result<(), Error> {
    let by_uid: BTreeMap<&str, &CachedPod> = pods.iter().map(|p| (p.uid(), &**p)).collect();
    let no_labels = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let actions: Vec<RequestAction> = mine
        .pods_to_request
        .iter()
        .filter(|p| seen.insert(p.uid.as_str()))
        .filter_map(|p| {
            let cached = by_uid.get(p.uid.as_str());
            let node = cached
                .and_then(|c| c.spec.node_name.as_deref())
                .unwrap_or_default();
            let labels = cached.map_or(PodLabels::Map(&no_labels), |c| c.labels());
            let existing = ctx.caches.eviction_requests.get(Some(&p.namespace), &p.uid);
            drain_action(p, node, labels, existing.as_deref())
        })
        .collect();
    apply_requests(ctx, &actions).await
}

/// Complete: withdraws and deletes requests; true when nothing is left to wait for.
async fn complete_requests(
    ctx: &Context,
    selected: &[String],
    nodes: &[Arc<Node>],
) -> Result<bool, Error> {
    let nodes_here: BTreeSet<String> = selected.iter().cloned().collect();
    // Pods another maintenance in Drain still targets keep their requests.
    let (output, _, _) = resolve_drain(ctx, nodes);
    let wanted: BTreeSet<String> = output
        .maintenances
        .iter()
        .flat_map(|m| m.pods_to_request.iter().map(|p| p.uid.clone()))
        .collect();
    let requests = ctx.caches.eviction_requests.all();
    let pods = &ctx.caches.pods;
    let work = complete_work(
        &nodes_here,
        requests.iter().map(|r| r.as_ref()),
        |r| {
            pods.get(r.namespace().as_deref(), &r.spec.target.pod.name)
                .filter(|p| p.uid() == r.spec.target.pod.uid)
                .and_then(|p| p.spec.node_name.clone())
        },
        &wanted,
    );
    if work.kept_forbidden > 0 {
        debug!(
            count = work.kept_forbidden,
            "requests with cancellation policy Forbid keep this maintenance's requester"
        );
    }
    apply_requests(ctx, &work.actions).await?;
    Ok(work.done())
}

async fn apply_requests(ctx: &Context, actions: &[RequestAction]) -> Result<(), Error> {
    let now = Timestamp::now();
    let created = &ctx.created_requests;
    // A creation is done with once the cache shows it, or when it is too old to wait for.
    created.retain_since(|key, at| {
        let shown = key
            .split_once('/')
            .is_some_and(|(ns, name)| ctx.caches.eviction_requests.get(Some(ns), name).is_some());
        !shown && creation_pending(Some(at), now)
    });
    let actions: Vec<RequestAction> = actions
        .iter()
        .filter(|a| a.created().is_none_or(|key| !created.contains(&key)))
        .cloned()
        .collect();
    // Owned actions and clients: borrowed ones make the future not provably `Send`.
    let results: Vec<Result<(), Error>> = futures::stream::iter(actions)
        .map(|a| {
            let client = ctx.client.clone();
            let created = ctx.created_requests.clone();
            async move {
                let key = a.created();
                if let Some(key) = &key {
                    created.insert(key, now);
                }
                let result = writes::apply_request_action(&client, &a).await;
                if let (Err(_), Some(key)) = (&result, &key) {
                    created.forget(key);
                }
                result
            }
        })
        .buffer_unordered(REQUEST_WRITES)
        .collect()
        .await;
    let mut first = None;
    for r in results {
        keep(&mut first, r);
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_label_is_one_of_the_zeroed_ones() {
        assert!(crate::metrics::CONTROLLERS.contains(&CONTROLLER));
    }

    /// One name per event in code and the book (the recorder once said `FastForwarded`).
    #[rstest::rstest]
    #[case(DrainEvent::PlanAdvanced { from: 0, to: 1 }, "DrainPlanAdvanced")]
    #[case(DrainEvent::FastForwarded { node: "n".into(), by: None, older: false }, "DrainFastForwarded")]
    #[case(DrainEvent::DeadlockResolved { node: "n".into(), winner: "a".into() }, "DrainDeadlockResolved")]
    fn drain_events_are_recorded_under_the_readme_reason(
        #[case] e: DrainEvent,
        #[case] reason: &str,
    ) {
        assert_eq!(drain_note(&e).reason, reason);
        let readme = include_str!("../../../docs/src/introduction.md");
        assert!(
            readme.contains(&format!("`{reason}`")),
            "docs/src/introduction.md lists {reason}"
        );
    }

    #[rstest::rstest]
    fn node_events_are_listed_in_the_readme(
        #[values(
            crate::controller::node_maintenance::cordon::NodeEvent::Cordoned,
            crate::controller::node_maintenance::cordon::NodeEvent::Recordoned,
            crate::controller::node_maintenance::cordon::NodeEvent::Uncordoned,
            crate::controller::node_maintenance::cordon::NodeEvent::Tainted,
            crate::controller::node_maintenance::cordon::NodeEvent::Retainted,
            crate::controller::node_maintenance::cordon::NodeEvent::Untainted,
            crate::controller::node_maintenance::cordon::NodeEvent::Excluded,
            crate::controller::node_maintenance::cordon::NodeEvent::Included
        )]
        e: crate::controller::node_maintenance::cordon::NodeEvent,
    ) {
        let readme = include_str!("../../../docs/src/introduction.md");
        let reason = e.reason();
        assert!(
            readme.contains(&format!("`{reason}`")),
            "docs/src/introduction.md lists {reason}"
        );
    }
}
