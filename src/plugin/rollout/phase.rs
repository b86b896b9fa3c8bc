//! Where each node of a rollout is, read from its maintenance, the node and the step record, and
//! what the rollout does next for it: create its maintenance, start its step, complete its
//! maintenance — or nothing, while evictord works (queued, draining, giving the node back).
//!
//! Whether a maintenance is admitted and drained is what evictord wrote in its status
//! (`status.admission`, `Admitted`, `Drained`); which budget holds a queued one is the message of
//! its `Admitted` condition, what a draining node waits for (and skips) its `drainMessage`, and
//! its drain deadline the one recorded in its node status: the plugin shows the controller's own
//! words.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::api::{CONDITION_ADMITTED, CONDITION_DRAINED, NodeMaintenance, Stage};
use crate::controller::node_maintenance::cordon::unschedulable_before;
use crate::controller::node_maintenance::gather::is_ready;
use crate::drain::holds::is_deleting;
use crate::plugin::blockers::{human, since};
use crate::plugin::deadline::NodeDeadline;

use super::step::{Found, StepRecord, StepState, found, is_back};

/// What a phase is read from, for one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The node, when it exists.
    pub object: Option<&'a Node>,
    /// The rollout's maintenance of the node, when it exists.
    pub maintenance: Option<&'a NodeMaintenance>,
    /// Its step record.
    pub record: Option<&'a StepRecord>,
    /// When this run started the step that runs now, if one does.
    pub running_here: Option<Timestamp>,
}

/// Where a node of the rollout is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its maintenance is to be created.
    Pending,
    /// Its previous maintenance is being deleted (after a failed step); it is created again once
    /// it is gone.
    Deleting,
    /// Its maintenance waits for the budgets: the controller's message.
    Queued(String),
    /// Admitted and draining.
    Draining {
        /// Targeted pods without an EvictionRequest yet.
        pending: i32,
        /// Targeted pods with one.
        evacuating: i32,
        /// The node's `drainMessage`.
        message: String,
        /// The node's drain deadline, once recorded (SPEC 6.2).
        deadline: Option<NodeDeadline>,
    },
    /// Drained: its step is to start (again, after an interruption: how it was interrupted).
    StepDue(Option<String>),
    /// Its step failed (how).
    StepFailed(String),
    /// Its step runs, started by this run at that time.
    StepRunning(Timestamp),
    /// The step of an earlier run still runs on this host.
    StepElsewhere(u32),
    /// The step is done; the node is not back yet (Ready; with `--reboot` a new boot).
    WaitingBack,
    /// The node is back: its maintenance is to move to Complete.
    CompleteDue,
    /// Complete; evictord gives the node back.
    Releasing,
    /// Stepped and given back.
    Done,
    /// Complete without a successful step (moved to Complete by someone else).
    Skipped,
    /// The node no longer exists; `held`: its maintenance is still to complete.
    Gone {
        /// Its maintenance is not in Complete yet.
        held: bool,
    },
}

/// What the rollout does for a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create its maintenance.
    Create,
    /// Record and start its step.
    StartStep,
    /// Move its maintenance to Complete.
    Complete,
}

fn condition<'a>(nm: &'a NodeMaintenance, type_: &str) -> Option<&'a str> {
    nm.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.message.as_str())
}

/// The node's boot ID, as its kubelet reports it (`status.nodeInfo.bootID`).
pub fn boot_id(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .node_info
        .as_ref()
        .map(|i| i.boot_id.as_str())
}

/// The phase of one node. `alive(host, pid)` says whether a process of this host runs (for a
/// step an earlier run left running).
pub fn phase(v: &NodeView<'_>, reboot: bool, alive: impl Fn(Option<&str>, u32) -> bool) -> Phase {
    let Some(nm) = v.maintenance else {
        return match v.object {
            None => Phase::Gone { held: false },
            Some(_) => Phase::Pending,
        };
    };
    if is_deleting(nm) {
        return Phase::Deleting;
    }
    if nm.spec.stage() == Stage::Complete {
        let given_back =
            nm.admitted().released() || v.object.is_none_or(|n| unschedulable_before(n).is_none());
        return match (given_back, v.record.map(|r| r.state), v.object) {
            (false, _, _) => Phase::Releasing,
            (true, Some(StepState::Succeeded), _) => Phase::Done,
            (true, _, None) => Phase::Gone { held: false },
            (true, _, Some(_)) => Phase::Skipped,
        };
    }
    let Some(node) = v.object else {
        return Phase::Gone { held: true };
    };
    if let Some(since) = v.running_here {
        return Phase::StepRunning(since);
    }
    let boot = boot_id(node);
    match found(v.record, reboot, boot, alive) {
        Found::Done => {
            return match v.record {
                Some(r) if is_back(r, reboot, is_ready(node), boot) => Phase::CompleteDue,
                _ => Phase::WaitingBack,
            };
        }
        Found::StillRunning { pid } => return Phase::StepElsewhere(pid),
        Found::Due | Found::Failed(_) | Found::Interrupted(_) => {}
    }
    if !nm.admitted().admits(v.node) {
        let why = condition(nm, CONDITION_ADMITTED)
            .filter(|m| !m.is_empty())
            .unwrap_or("waiting for evictord to admit it");
        return Phase::Queued(why.to_string());
    }
    let drained = nm
        .status
        .as_ref()
        .is_some_and(|s| s.is_true(CONDITION_DRAINED));
    if !drained {
        let s = nm
            .status
            .iter()
            .flat_map(|s| &s.node_statuses)
            .find(|s| s.node_ref.name == v.node);
        return Phase::Draining {
            pending: s.map_or(0, |s| s.pods_pending_evacuation),
            evacuating: s.map_or(0, |s| s.pods_evacuating),
            message: s.map(|s| s.drain_message.clone()).unwrap_or_default(),
            deadline: s.and_then(|s| NodeDeadline::of(s, &nm.spec)),
        };
    }
    match found(v.record, reboot, boot, |_, _| false) {
        Found::Failed(why) => Phase::StepFailed(why),
        Found::Interrupted(why) => Phase::StepDue(Some(why)),
        _ => Phase::StepDue(None),
    }
}

/// What to do for a node in that phase. While the rollout stops (a failed step, Ctrl-C, the
/// timeout) nothing new is done.
pub fn action(p: &Phase, stopping: bool) -> Option<Action> {
    if stopping {
        return None;
    }
    match p {
        Phase::Pending => Some(Action::Create),
        Phase::StepDue(_) | Phase::StepFailed(_) => Some(Action::StartStep),
        Phase::CompleteDue | Phase::Gone { held: true } => Some(Action::Complete),
        _ => None,
    }
}

/// True when nothing is left to do for the node.
pub fn is_finished(p: &Phase) -> bool {
    matches!(
        p,
        Phase::Done | Phase::Skipped | Phase::Gone { held: false }
    )
}

impl Phase {
    /// A short name for machines (`-o json`) and the live view.
    pub fn label(&self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Deleting => "Deleting",
            Phase::Queued(_) => "Queued",
            Phase::Draining { .. } => "Draining",
            Phase::StepDue(_) => "StepDue",
            Phase::StepFailed(_) => "StepFailed",
            Phase::StepRunning(_) | Phase::StepElsewhere(_) => "StepRunning",
            Phase::WaitingBack => "WaitingReady",
            Phase::CompleteDue => "Completing",
            Phase::Releasing => "Releasing",
            Phase::Done => "Done",
            Phase::Skipped => "Skipped",
            Phase::Gone { .. } => "Gone",
        }
    }

    /// The phase in words, for people; with `now`, how long the step has been running (without
    /// it the words only change with the phase, for plain lines).
    pub fn text(&self, reboot: bool, now: Option<Timestamp>) -> String {
        match self {
            Phase::Pending => "maintenance to create".into(),
            Phase::Deleting => "waiting for its previous maintenance to be deleted".into(),
            Phase::Queued(why) => {
                format!("queued: {}", why.strip_prefix("Queued: ").unwrap_or(why))
            }
            Phase::Draining {
                pending,
                evacuating,
                message,
                deadline,
            } => {
                let mut t = format!(
                    "draining: {evacuating} pod{} evacuating, {pending} pending",
                    plural(*evacuating)
                );
                // Before the message, which the live view may cut to the terminal's width.
                if let Some(d) = deadline {
                    t.push_str(&format!("; {}", d.text(now)));
                }
                if !message.is_empty() {
                    t.push_str(&format!(" ({message})"));
                }
                t
            }
            Phase::StepDue(None) => "drained".into(),
            Phase::StepDue(Some(why)) => format!("drained; its step runs again: {why}"),
            Phase::StepFailed(why) => format!("step failed: {why}"),
            Phase::StepRunning(t) => match now {
                Some(now) => format!("step running for {}", human(since(*t, now))),
                None => "step running".into(),
            },
            Phase::StepElsewhere(pid) => format!(
                "the step an earlier run started still runs (process {pid} on this host); waiting for it to end"
            ),
            Phase::WaitingBack if reboot => {
                "step done; waiting for the node to boot again and be Ready".into()
            }
            Phase::WaitingBack => "step done; waiting for the node to be Ready".into(),
            Phase::CompleteDue if reboot => "back: booted again and Ready".into(),
            Phase::CompleteDue => "back: Ready".into(),
            Phase::Releasing => "Complete; evictord gives the node back (uncordon)".into(),
            Phase::Done => "done".into(),
            Phase::Skipped => "its maintenance was completed without its step".into(),
            Phase::Gone { .. } => "the node no longer exists".into(),
        }
    }
}

fn plural(n: i32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::api::{
        AdmittedNode, NodeMaintenanceAdmission, NodeMaintenanceNodeStatus, NodeMaintenanceStatus,
        NodeReference, UNSCHEDULABLE_BEFORE_ANNOTATION,
    };
    use crate::plugin::rollout::naming::maintenance_of;
    use crate::plugin::rollout::step::{Exit, finish, start};
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, NodeSystemInfo};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use rstest::rstest;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// Node `n1`: Ready or not, on boot `boot`, cordoned by a maintenance or not.
    pub(in crate::plugin::rollout) fn node(ready: bool, boot: &str, held: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            node_info: Some(NodeSystemInfo {
                boot_id: boot.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        if held {
            n.metadata.annotations =
                Some([(UNSCHEDULABLE_BEFORE_ANNOTATION.to_string(), "false".into())].into());
        }
        n
    }

    fn cond(type_: &str, status: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            observed_generation: None,
            last_transition_time: Time(t(0)),
        }
    }

    #[derive(Clone, Copy, Debug)]
    pub(in crate::plugin::rollout) enum M {
        Queued,
        Draining,
        Drained,
        Complete,
        Released,
        Deleting,
    }

    pub(in crate::plugin::rollout) fn maintenance(m: M) -> NodeMaintenance {
        let mut nm = maintenance_of("up", "n1", None);
        let admission = NodeMaintenanceAdmission {
            nodes: vec![AdmittedNode {
                name: "n1".into(),
                admitted_time: Some(Time(t(0))),
            }],
            released_time: matches!(m, M::Released).then(|| Time(t(9))),
        };
        let mut status = NodeMaintenanceStatus {
            admission: Some(admission),
            node_statuses: vec![NodeMaintenanceNodeStatus {
                node_ref: NodeReference { name: "n1".into() },
                drain_message: "Evacuating".into(),
                pods_pending_evacuation: 2,
                pods_evacuating: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        match m {
            M::Queued => {
                status.admission = None;
                status.conditions = vec![cond("Admitted", "False", "Queued: budget up is full")];
            }
            M::Draining => {}
            M::Drained | M::Deleting => status.conditions = vec![cond("Drained", "True", "")],
            M::Complete | M::Released => nm.spec.stage = Some(Stage::Complete),
        }
        if matches!(m, M::Deleting) {
            nm.metadata.deletion_timestamp = Some(Time(t(5)));
        }
        nm.status = Some(status);
        nm
    }

    fn record(state: StepState) -> StepRecord {
        let r = start(None, Some("boot-1"), Some("here"), t(1)).unwrap();
        match state {
            StepState::Running => StepRecord { pid: Some(7), ..r },
            StepState::Succeeded => finish(
                &r,
                Exit {
                    code: Some(0),
                    signal: None,
                },
                t(2),
            ),
            StepState::Failed => finish(
                &r,
                Exit {
                    code: Some(4),
                    signal: None,
                },
                t(2),
            ),
        }
    }

    #[rstest]
    #[case::no_maintenance(None, Some(node(true, "boot-1", false)), None, None, Phase::Pending)]
    #[case::node_gone_before(None, None, None, None, Phase::Gone { held: false })]
    #[case::queued(Some(M::Queued), Some(node(true, "boot-1", false)), None, None, Phase::Queued("Queued: budget up is full".into()))]
    #[case::draining(Some(M::Draining), Some(node(true, "boot-1", true)), None, None, Phase::Draining { pending: 2, evacuating: 1, message: "Evacuating".into(), deadline: None })]
    #[case::drained(
        Some(M::Drained),
        Some(node(true, "boot-1", true)),
        None,
        None,
        Phase::StepDue(None)
    )]
    #[case::running_here(
        Some(M::Drained),
        Some(node(true, "boot-1", true)),
        Some(record(StepState::Running)),
        Some(t(1)),
        Phase::StepRunning(t(1))
    )]
    #[case::interrupted(Some(M::Drained), Some(node(true, "boot-1", true)), Some(record(StepState::Running)), None, Phase::StepDue(Some("attempt 1 was interrupted (started 2027-01-15T08:00:01Z)".into())))]
    #[case::failed(Some(M::Drained), Some(node(true, "boot-1", true)), Some(record(StepState::Failed)), None, Phase::StepFailed("attempt 1 failed (exit code 4)".into()))]
    #[case::stepped_not_ready(
        Some(M::Drained),
        Some(node(false, "boot-1", true)),
        Some(record(StepState::Succeeded)),
        None,
        Phase::WaitingBack
    )]
    #[case::stepped_ready(
        Some(M::Drained),
        Some(node(true, "boot-1", true)),
        Some(record(StepState::Succeeded)),
        None,
        Phase::CompleteDue
    )]
    #[case::complete_not_given_back(
        Some(M::Complete),
        Some(node(true, "boot-1", true)),
        Some(record(StepState::Succeeded)),
        None,
        Phase::Releasing
    )]
    #[case::complete_uncordoned(
        Some(M::Complete),
        Some(node(true, "boot-1", false)),
        Some(record(StepState::Succeeded)),
        None,
        Phase::Done
    )]
    #[case::complete_released(
        Some(M::Released),
        Some(node(true, "boot-1", true)),
        Some(record(StepState::Succeeded)),
        None,
        Phase::Done
    )]
    #[case::completed_by_hand(
        Some(M::Released),
        Some(node(true, "boot-1", false)),
        Some(record(StepState::Failed)),
        None,
        Phase::Skipped
    )]
    #[case::deleting(
        Some(M::Deleting),
        Some(node(true, "boot-1", true)),
        Some(record(StepState::Failed)),
        None,
        Phase::Deleting
    )]
    #[case::node_gone_in_drain(Some(M::Drained), None, None, None, Phase::Gone { held: true })]
    fn phases(
        #[case] m: Option<M>,
        #[case] n: Option<Node>,
        #[case] r: Option<StepRecord>,
        #[case] running_here: Option<Timestamp>,
        #[case] want: Phase,
    ) {
        let nm = m.map(maintenance);
        let v = NodeView {
            node: "n1",
            object: n.as_ref(),
            maintenance: nm.as_ref(),
            record: r.as_ref(),
            running_here,
        };
        assert_eq!(phase(&v, false, |_, _| false), want);
    }

    /// With `--reboot`, a stepped node is back only on a new boot; an interrupted step whose
    /// node booted again counts as done; one whose process still runs here is waited for.
    #[rstest]
    #[case::same_boot(
        Some(record(StepState::Succeeded)),
        "boot-1",
        false,
        Phase::WaitingBack
    )]
    #[case::new_boot(
        Some(record(StepState::Succeeded)),
        "boot-2",
        false,
        Phase::CompleteDue
    )]
    #[case::interrupted_then_rebooted(
        Some(record(StepState::Running)),
        "boot-2",
        false,
        Phase::CompleteDue
    )]
    #[case::still_running(
        Some(record(StepState::Running)),
        "boot-1",
        true,
        Phase::StepElsewhere(7)
    )]
    fn reboot_phases(
        #[case] r: Option<StepRecord>,
        #[case] boot: &str,
        #[case] alive: bool,
        #[case] want: Phase,
    ) {
        let nm = maintenance(M::Drained);
        let n = node(true, boot, true);
        let v = NodeView {
            node: "n1",
            object: Some(&n),
            maintenance: Some(&nm),
            record: r.as_ref(),
            running_here: None,
        };
        assert_eq!(phase(&v, true, |_, _| alive), want);
    }

    #[rstest]
    #[case::create(Phase::Pending, false, Some(Action::Create))]
    #[case::step(Phase::StepDue(None), false, Some(Action::StartStep))]
    #[case::retry_a_failure(Phase::StepFailed("x".into()), false, Some(Action::StartStep))]
    #[case::complete(Phase::CompleteDue, false, Some(Action::Complete))]
    #[case::complete_a_gone_node(Phase::Gone { held: true }, false, Some(Action::Complete))]
    #[case::queued(Phase::Queued("x".into()), false, None)]
    #[case::waiting(Phase::WaitingBack, false, None)]
    #[case::stopping_creates_nothing(Phase::Pending, true, None)]
    #[case::stopping_starts_nothing(Phase::StepDue(None), true, None)]
    #[case::stopping_completes_nothing(Phase::CompleteDue, true, None)]
    fn actions(#[case] p: Phase, #[case] stopping: bool, #[case] want: Option<Action>) {
        assert_eq!(action(&p, stopping), want);
    }

    /// SPEC 6.2: a draining node's deadline, as recorded: the time left on a terminal, words that
    /// change only when it passes in plain lines; the controller's message says what is skipped
    /// or waited for.
    #[test]
    fn a_draining_node_shows_its_deadline() {
        let mut nm = maintenance(M::Draining);
        nm.spec.drain_deadline_seconds = Some(600);
        let st = &mut nm.status.as_mut().unwrap().node_statuses[0];
        st.deadline_time = Some(Time(t(240)));
        st.drain_message = "Evacuating; 1 pod skipped: ns/kept".into();
        let n = node(true, "boot-1", true);
        let v = NodeView {
            node: "n1",
            object: Some(&n),
            maintenance: Some(&nm),
            record: None,
            running_here: None,
        };
        let p = phase(&v, false, |_, _| false);
        assert_eq!(
            p.text(false, Some(t(0))),
            "draining: 1 pod evacuating, 2 pending; drain deadline in 4 m, then reported (Evacuating; 1 pod skipped: ns/kept)"
        );
        assert_eq!(
            p.text(false, None),
            "draining: 1 pod evacuating, 2 pending; drain deadline 2027-01-15T08:04:00Z, then reported (Evacuating; 1 pod skipped: ns/kept)"
        );
        let mut passed = nm.clone();
        passed.status.as_mut().unwrap().node_statuses[0].deadline_exceeded = true;
        let v = NodeView {
            maintenance: Some(&passed),
            ..v
        };
        assert!(
            phase(&v, false, |_, _| false)
                .text(false, Some(t(300)))
                .contains("drain deadline exceeded 1 m ago: reported, nothing forced"),
        );
    }
}
