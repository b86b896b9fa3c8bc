//! `kubectl evictord rollout`: sets the rollout up (its budget, or the record of a rollout to
//! resume), then drives it — when one of the rollout's maintenances or nodes changes (at least
//! every five seconds) it reads the rollout's maintenances and nodes, asks
//! `evictord::plugin::rollout::phase` where each node is and what to do, does it, and draws.
//! Step processes report through a channel; Ctrl-C and the timeout stop new work
//! (`rollout_end` says how a rollout ends).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use evictord::api::NodeMaintenance;
use evictord::drain::admission::MaxUnavailable;
use evictord::plugin::rollout::driver::{Driver, RENEW_EVERY};
use evictord::plugin::rollout::naming::{
    budget_for, is_of, label_selector, maintenance_name, node_of, validate_rollout_name,
};
use evictord::plugin::rollout::phase::{Action, Phase, action, boot_id, is_finished};
use evictord::plugin::rollout::record::{
    Recorded, Requested, RolloutOptions, max_unavailable_value, resume_check,
};
use evictord::plugin::rollout::step::{Exit, StepRecord, StepState, finish, start};
use evictord::plugin::rollout::summary::{Failure, Outcome, RolloutSummary};
use evictord::plugin::{Error, Result};

use crate::cli::Output;
use crate::preview_read::check_rollout_nodes;
use crate::read;
use crate::rollout_end::{Ending, Stop, end};
use crate::rollout_state::{RolloutArgs, Running, Snapshot, phases_of, snapshot};
use crate::rollout_step::{StepEvent, alive, host_name, spawn};
use crate::rollout_view::{View, draw};
use crate::rollout_watch::Watches;
use crate::rollout_writes as w;
use crate::show::print_object;

/// How often the cluster is read when nothing woke the driver before: a change of the rollout's
/// maintenances or nodes wakes it at once (`rollout_watch`).
const TICK: Duration = Duration::from_secs(5);
/// After a change wakes the driver, how long it waits for the changes that come with it.
const SETTLE: Duration = Duration::from_millis(100);
/// The least time between two looks that a change wakes (a step's end, and a change that turns a
/// phase, are looked at at once).
const MIN_GAP: Duration = Duration::from_secs(1);
/// How long evictord may take to report on the rollout's budget.
const OBSERVE_WITHIN: Duration = Duration::from_secs(60);
/// After a second Ctrl-C, how long the stopped steps may take to end.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The nodes the command names or selects, by name; for a new rollout each must exist and a
/// selector must match one.
async fn requested_nodes(client: &Client, a: &RolloutArgs, resuming: bool) -> Result<Vec<String>> {
    let mut nodes = match (&a.selector, a.nodes.is_empty()) {
        (Some(_), false) => {
            return Err(Error::Usage(
                "name nodes or give a selector (-l), not both".into(),
            ));
        }
        (None, true) => {
            return Err(Error::Usage(
                "which nodes? name them or give a selector (-l)".into(),
            ));
        }
        (Some(s), true) => match read::selected_nodes(client, s).await {
            Err(Error::NoNodeMatches(_)) if resuming => Vec::new(),
            other => other?,
        },
        (None, false) if resuming => a.nodes.clone(),
        (None, false) => read::named_nodes(client, &a.nodes).await?,
    };
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

/// Sets the rollout up: a new one gets its budget; an existing one is checked against the
/// command. Returns its nodes and what to tell the person, or `None` when it had finished.
async fn set_up(
    client: &Client,
    a: &RolloutArgs,
    max: &IntOrString,
    options: &RolloutOptions,
) -> Result<Option<(Vec<String>, Vec<String>)>> {
    let name = &a.name;
    let stop_hint = format!(
        "stop it and give its nodes back: kubectl delete nodemaintenances,maintenancebudgets -l {}",
        label_selector(name)
    );
    let mine = w::rollout_maintenances(client, name).await?;
    match w::budget(client, name).await? {
        Some(b) => {
            if !is_of(b.metadata.labels.as_ref(), name) {
                return Err(Error::Rollout(format!(
                    "a MaintenanceBudget named {name} exists and is not rollout {name}'s (no label {}); choose another rollout name",
                    label_selector(name)
                )));
            }
            let recorded = Recorded::of(&b).ok_or_else(|| {
                Error::Rollout(format!(
                    "MaintenanceBudget {name} does not select nodes by name: it was not made by kubectl evictord rollout; {stop_hint}"
                ))
            })?;
            let requested = Requested {
                nodes: requested_nodes(client, a, true).await?,
                options: options.clone(),
                max_unavailable: max.clone(),
            };
            let r = resume_check(name, &recorded, &requested)
                .map_err(|e| Error::Rollout(format!("{e}\n  {stop_hint}")))?;
            check_unstarted(client, a, &r.nodes, &mine).await?;
            if let Some(m) = &r.new_max_unavailable {
                w::set_max_unavailable(client, name, m).await?;
            }
            let mut notes = vec![format!(
                "resuming rollout {name}: {} nodes, {} of them with a maintenance",
                r.nodes.len(),
                mine.len()
            )];
            notes.extend(r.notes);
            Ok(Some((r.nodes, notes)))
        }
        None if !mine.is_empty() => {
            let names: Vec<String> = mine
                .iter()
                .filter_map(|m| m.metadata.name.clone())
                .collect();
            if mine.iter().all(w::is_complete) {
                w::delete_rollout(client, name, &names).await?;
                return Ok(None);
            }
            let nodes = requested_nodes(client, a, true).await?;
            let missing: Vec<String> = mine
                .iter()
                .filter_map(node_of)
                .filter(|n| !nodes.contains(n))
                .collect();
            if !missing.is_empty() {
                return Err(Error::Rollout(format!(
                    "rollout {name} has maintenances for {} as well, and no MaintenanceBudget; name those nodes too to resume it, or {stop_hint}",
                    missing.join(", ")
                )));
            }
            check_unstarted(client, a, &nodes, &mine).await?;
            w::create_budget(client, &budget_for(name, &nodes, max, options)).await?;
            let notes = vec![format!(
                "MaintenanceBudget {name} was missing (deleted?); created it again from this command, whose options could not be compared with the earlier run's"
            )];
            Ok(Some((nodes, notes)))
        }
        None => {
            let nodes = requested_nodes(client, a, false).await?;
            check_unstarted(client, a, &nodes, &mine).await?;
            w::create_budget(client, &budget_for(name, &nodes, max, options)).await?;
            let allowed = MaxUnavailable::parse(Some(max))
                .map(|m| m.allowed(nodes.len()))
                .unwrap_or(1);
            let notes = vec![format!(
                "MaintenanceBudget {name} created: at most {allowed} of these {} nodes drained at once",
                nodes.len()
            )];
            Ok(Some((nodes, notes)))
        }
    }
}

/// kubectl drain's checks (SPEC 6.2) of the rollout's nodes whose maintenance is still to be
/// created, before anything is written.
async fn check_unstarted(
    client: &Client,
    a: &RolloutArgs,
    nodes: &[String],
    mine: &[NodeMaintenance],
) -> Result<()> {
    let started: Vec<String> = mine.iter().filter_map(node_of).collect();
    let to_create: Vec<String> = nodes
        .iter()
        .filter(|n| !started.contains(n))
        .cloned()
        .collect();
    check_rollout_nodes(client, &to_create, a.deadline, a.overrides).await
}

/// Runs the command; returns the exit code.
pub async fn rollout(client: &Client, a: RolloutArgs, output: Option<Output>) -> Result<i32> {
    validate_rollout_name(&a.name).map_err(Error::Usage)?;
    let max = max_unavailable_value(&a.max_unavailable);
    MaxUnavailable::parse(Some(&max))
        .map_err(|e| Error::Usage(e.replacen("spec.maxUnavailable", "--max-unavailable", 1)))?;
    let options = RolloutOptions {
        selector: a.selector.clone(),
        exec: a.exec.clone(),
        reboot: a.reboot,
        cordon_first: a.cordon_first,
        drain_deadline: a.deadline,
    };
    let Some((nodes, notes)) = set_up(client, &a, &max, &options).await? else {
        let message = format!(
            "rollout {} had finished; deleted its remaining maintenances",
            a.name
        );
        View::new(output.is_some(), &[]).say(&message);
        if let Some(o) = output {
            let summary = RolloutSummary {
                rollout: a.name.clone(),
                max_unavailable: a.max_unavailable.clone(),
                outcome: Outcome::Done,
                message,
                nodes: Vec::new(),
            };
            print_object(&summary, o)?;
        }
        return Ok(0);
    };
    let me = Driver {
        host: host_name(),
        pid: std::process::id(),
        renewed: Timestamp::now(),
    };
    w::claim(client, &a.name, &me, |pid| {
        alive(&me.host, Some(&me.host), pid)
    })
    .await?;
    let mut view = View::new(output.is_some(), &nodes);
    for n in &notes {
        view.say(n);
    }
    let result = drive(client, &a, &max, &nodes, &me, &mut view, output).await;
    view.finish();
    w::release(client, &a.name, &me).await;
    result
}

/// Drives the rollout until it is done or stops.
async fn drive(
    client: &Client,
    a: &RolloutArgs,
    max: &IntOrString,
    nodes: &[String],
    me: &Driver,
    view: &mut View,
    output: Option<Output>,
) -> Result<i32> {
    let name = a.name.as_str();
    if w::wait_observed(client, name, Duration::ZERO)
        .await
        .is_err()
    {
        view.say(&format!(
            "waiting for evictord to take MaintenanceBudget {name} into account"
        ));
        w::wait_observed(client, name, OBSERVE_WITHIN).await?;
    }
    let watches = Watches::start(client, name, nodes).await?;
    if a.cordon_first {
        let s = snapshot(client, name, nodes, &watches).await?;
        for n in nodes {
            let done = s.maintenances.get(n).is_some_and(w::is_complete);
            if !done && s.nodes.contains_key(n) && w::cordon_first(client, n).await? {
                view.say(&format!(
                    "node {n}: cordoned (--cordon-first); Complete uncordons it"
                ));
            }
        }
    }
    let (events, mut step_events) = mpsc::unbounded_channel::<StepEvent>();
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| Error::Usage(format!("cannot watch for Ctrl-C: {e}")))?;
    let deadline = a.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut running: Running = BTreeMap::new();
    let mut stop: Option<Stop> = None;
    let mut failures: Vec<Failure> = Vec::new();
    let mut killed: Vec<String> = Vec::new();
    let mut fatal: Option<Error> = None;
    let mut force_until: Option<tokio::time::Instant> = None;
    let mut renew_at = tokio::time::Instant::now() + RENEW_EVERY;
    let mut last: Option<Snapshot> = None;
    loop {
        let looked = tokio::time::Instant::now();
        match snapshot(client, name, nodes, &watches).await {
            Ok(s) => {
                let phases = phases_of(&s, nodes, &running, a.reboot, &me.host);
                draw(view, name, &s, &phases, a.reboot);
                if stop.is_none() && nodes.iter().all(|n| phases.get(n).is_some_and(is_finished)) {
                    let ending = Ending::new(a, max, nodes, &s, &phases);
                    return end(client, ending, Stop::Done, &[], &[], output, view).await;
                }
                if stop.is_none() {
                    for n in nodes {
                        let Some(act) = phases.get(n).and_then(|p| action(p, false)) else {
                            continue;
                        };
                        let done =
                            act_on(client, &watches, a, n, act, &s, &events, &mut running, view)
                                .await;
                        match done {
                            Ok(Some(f)) => {
                                failures.push(f);
                                stop = Some(Stop::Failed);
                            }
                            Ok(None) => {}
                            Err(e) if running.is_empty() => return Err(e),
                            Err(e) => {
                                view.say(&format!(
                                    "error: {e}; waiting for the running steps to end"
                                ));
                                fatal = Some(e);
                                stop = Some(Stop::Failed);
                                break;
                            }
                        }
                        if stop.is_some() {
                            break;
                        }
                    }
                }
                // A step started now shows as running at once, not a tick later.
                if running
                    .keys()
                    .any(|n| !matches!(phases.get(n), Some(Phase::StepRunning(_))))
                {
                    let now = phases_of(&s, nodes, &running, a.reboot, &me.host);
                    draw(view, name, &s, &now, a.reboot);
                }
                last = Some(s);
            }
            Err(e) if running.is_empty() => return Err(e),
            Err(e) => view.say(&format!("error: {e}; trying again")),
        }
        if stop.is_none() && deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            stop = Some(Stop::TimedOut);
            if !running.is_empty() {
                view.say(&format!(
                    "timed out: no new step starts; waiting for the steps on {} to end (Ctrl-C stops them)",
                    keys(&running)
                ));
            }
        }
        if stop.is_some() && running.is_empty() {
            break;
        }
        if force_until.is_some_and(|t| tokio::time::Instant::now() >= t) {
            break;
        }
        if tokio::time::Instant::now() >= renew_at {
            w::renew(
                client,
                name,
                &Driver {
                    renewed: Timestamp::now(),
                    ..me.clone()
                },
            )
            .await;
            renew_at = tokio::time::Instant::now() + RENEW_EVERY;
        }
        let tick = tokio::time::sleep(TICK);
        tokio::pin!(tick);
        loop {
            tokio::select! {
                _ = interrupt.recv() => {
                    if stop != Some(Stop::Interrupted) {
                        stop = Some(Stop::Interrupted);
                        if running.is_empty() {
                            break;
                        }
                        view.say(&format!(
                            "Ctrl-C: no new step starts; waiting for the steps on {} to end (Ctrl-C again stops them now)",
                            keys(&running)
                        ));
                    } else if force_until.is_none() {
                        view.say(&format!("stopping the steps on {}", keys(&running)));
                        for (n, (_, p)) in running.iter_mut() {
                            p.stop();
                            killed.push(n.clone());
                        }
                        force_until = Some(tokio::time::Instant::now() + STOP_GRACE);
                    }
                }
                event = step_events.recv() => match event {
                    Some(StepEvent::Output { node, line }) => view.step_output(&node, &line),
                    Some(StepEvent::Exited { node, exit }) => {
                        running.remove(&node);
                        if killed.contains(&node) {
                            view.say(&format!("node {node}: step stopped ({exit})"));
                        } else {
                            match step_ended(client, &watches, name, &node, exit, view).await {
                                Ok(Some(failure)) => {
                                    failures.push(failure);
                                    if stop.is_none() {
                                        stop = Some(Stop::Failed);
                                        if !running.is_empty() {
                                            view.say(&format!(
                                                "no new step starts; waiting for the steps on {} to end",
                                                keys(&running)
                                            ));
                                        }
                                    }
                                }
                                Ok(None) => {}
                                Err(e) => {
                                    view.say(&format!("error: {e}"));
                                    fatal.get_or_insert(e);
                                    stop.get_or_insert(Stop::Failed);
                                }
                            }
                        }
                        break;
                    }
                    None => {}
                },
                _ = &mut tick => break,
                _ = watches.changed() => {
                    // Let the writes that come together (a status and its node's cordon) land,
                    // and look at most once a second while the changes keep coming — at once
                    // when one turned a phase (a node drained: its step waits for this look).
                    let now = tokio::time::Instant::now();
                    let until = if watches.take_turn() {
                        now + SETTLE
                    } else {
                        (now + SETTLE).max(looked + MIN_GAP)
                    };
                    tokio::time::sleep_until(until).await;
                    break;
                }
            }
        }
        if stop == Some(Stop::Interrupted) && running.is_empty() {
            break;
        }
    }
    let stop = stop.unwrap_or(Stop::Interrupted);
    if let Some(e) = fatal.filter(|_| stop != Stop::Interrupted) {
        return Err(e);
    }
    let Some(s) = last else {
        return Ok(stop.code());
    };
    let phases = phases_of(&s, nodes, &running, a.reboot, &me.host);
    let ending = Ending::new(a, max, nodes, &s, &phases);
    end(client, ending, stop, &failures, &killed, output, view).await
}

fn keys(running: &Running) -> String {
    running.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// Does `act` for node `n`; a step that could not start is returned as a failure.
#[allow(clippy::too_many_arguments)]
async fn act_on(
    client: &Client,
    watches: &Watches,
    a: &RolloutArgs,
    n: &str,
    act: Action,
    s: &Snapshot,
    events: &mpsc::UnboundedSender<StepEvent>,
    running: &mut Running,
    view: &View,
) -> Result<Option<Failure>> {
    let name = &a.name;
    match act {
        Action::Create => {
            let m = w::create_maintenance(
                client,
                &watches.written,
                name,
                n,
                a.reason.as_deref(),
                a.deadline,
            )
            .await?;
            view.say(&format!("node {n}: maintenance {m} created (stage Drain)"));
        }
        Action::Complete => {
            let Some(nm) = s.maintenances.get(n) else {
                return Ok(None);
            };
            let m = nm.metadata.name.clone().unwrap_or_default();
            w::complete(client, &watches.written, nm).await?;
            view.say(&format!(
                "node {n}: maintenance {m} moved to Complete{}",
                if s.nodes.contains_key(n) {
                    ": evictord gives the node back"
                } else {
                    " (the node is gone)"
                }
            ));
        }
        Action::StartStep => {
            let Some(nm) = s.maintenances.get(n) else {
                return Ok(None);
            };
            let m = nm.metadata.name.clone().unwrap_or_default();
            let previous = s.records.get(n);
            let now = Timestamp::now();
            let boot = s.nodes.get(n).and_then(boot_id);
            let host = host_name();
            let record = start(previous, boot, Some(&host), now)
                .map_err(|e| Error::Rollout(format!("node {n}: {e}")))?;
            let Some(command) = &a.exec else {
                let done = finish(
                    &record,
                    Exit {
                        code: Some(0),
                        signal: None,
                    },
                    now,
                );
                if w::write_record(client, &watches.written, nm, &done)
                    .await?
                    .is_some()
                {
                    view.say(&format!("node {n}: drained (no --exec step)"));
                }
                return Ok(None);
            };
            let Some(written) = w::write_record(client, &watches.written, nm, &record).await?
            else {
                return Ok(None);
            };
            match previous.map(|p| p.state) {
                Some(StepState::Failed) | Some(StepState::Running) => view.say(&format!(
                    "node {n}: running the step again (attempt {})",
                    record.attempt
                )),
                _ => view.say(&format!("node {n}: running the step")),
            }
            match spawn(n, command, events.clone()) {
                Ok(p) => {
                    let with_pid = StepRecord {
                        pid: Some(p.pid),
                        ..record
                    };
                    running.insert(n.to_string(), (now, p));
                    // Best effort: without it a resumed run cannot tell the process still runs.
                    let _ = w::write_record(client, &watches.written, &written, &with_pid).await;
                }
                Err(e) => {
                    let exit = Exit {
                        code: Some(127),
                        signal: None,
                    };
                    view.say(&format!("node {n}: cannot start the step: {e}"));
                    // Over the maintenance as just written: the watch has not shown it yet.
                    let failed =
                        |_: Option<&StepRecord>| Some(finish(&record, exit, Timestamp::now()));
                    w::update_record(client, &watches.written, &m, Some(written), failed).await?;
                    return Ok(Some(Failure {
                        node: n.to_string(),
                        maintenance: m,
                        exit,
                    }));
                }
            }
        }
    }
    Ok(None)
}

/// Records how a step ended; a failure is returned.
async fn step_ended(
    client: &Client,
    watches: &Watches,
    rollout: &str,
    node: &str,
    exit: Exit,
    view: &View,
) -> Result<Option<Failure>> {
    let m = maintenance_name(rollout, node);
    let ended = |current: Option<&StepRecord>| {
        current
            .filter(|r| r.state == StepState::Running)
            .map(|r| finish(r, exit, Timestamp::now()))
    };
    w::update_record(client, &watches.written, &m, watches.maintenance(&m), ended).await?;
    if exit.success() {
        view.say(&format!("node {node}: step succeeded"));
        Ok(None)
    } else {
        view.say(&format!("node {node}: step failed ({exit})"));
        Ok(Some(Failure {
            node: node.to_string(),
            maintenance: m,
            exit,
        }))
    }
}
