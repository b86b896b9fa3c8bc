//! How a rollout ends, in words and as one object (`-o json`): done, a failed step, the timeout,
//! Ctrl-C; each says what is left in the cluster and how to go on.

use serde::Serialize;

use super::naming::label_selector;
use super::phase::{Phase, is_finished};
use super::step::{Exit, StepRecord};

/// How the rollout ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Every node stepped and given back; the budget and the maintenances deleted.
    Done,
    /// A step failed.
    StepFailed,
    /// `--timeout` passed.
    TimedOut,
    /// Ctrl-C.
    Interrupted,
}

/// The whole rollout at its end.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSummary {
    /// The rollout (and its budget).
    pub rollout: String,
    /// `--max-unavailable`.
    pub max_unavailable: String,
    /// How it ended.
    pub outcome: Outcome,
    /// What is left and how to go on.
    pub message: String,
    /// Per node, in the rollout's order.
    pub nodes: Vec<NodeSummary>,
}

/// The failed step: which node, how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The node.
    pub node: String,
    /// Its maintenance.
    pub maintenance: String,
    /// How the step ended.
    pub exit: Exit,
}

/// The ways on from a stopped rollout, as commands.
fn ways_on(rollout: &str, command: &str) -> String {
    format!(
        "  resume: {command}\n  stop the rollout and give every node back: kubectl delete nodemaintenances,maintenancebudgets -l {}",
        label_selector(rollout)
    )
}

/// The words after a failed step. `deleted`: the maintenances not admitted yet, deleted;
/// `cordon_restored`: the nodes cordoned by `--cordon-first` whose cordon was restored.
pub fn failure_message(
    rollout: &str,
    command: &str,
    failures: &[Failure],
    deleted: &[String],
    cordon_restored: &[String],
) -> String {
    let mut out = String::new();
    for f in failures {
        out.push_str(&format!(
            "step failed on node {} ({}); the node stays cordoned (maintenance {} stays in Drain)\n",
            f.node, f.exit, f.maintenance
        ));
    }
    if deleted.is_empty() {
        out.push_str("no maintenance was waiting for admission\n");
    } else {
        out.push_str(&format!(
            "deleted the maintenances not admitted yet, so that no other node is drained: {}\n",
            deleted.join(", ")
        ));
    }
    if !cordon_restored.is_empty() {
        out.push_str(&format!(
            "gave back the nodes cordoned at the start (--cordon-first): {}\n",
            cordon_restored.join(", ")
        ));
    }
    out.push_str(&format!(
        "to go on, fix the cause and run the same command again: the failed step runs again and the rollout carries on\n{}",
        ways_on(rollout, command)
    ));
    if let Some(f) = failures.first() {
        out.push_str(&format!(
            "\n  give {} back without its step: kubectl evictord complete {}",
            f.node, f.maintenance
        ));
    }
    out
}

/// The words after Ctrl-C or the timeout: nothing was undone.
pub fn stopped_message(rollout: &str, command: &str, killed_steps: &[String]) -> String {
    let mut out = format!(
        "rollout {rollout} stopped; nothing was undone: maintenances keep draining or waiting, and nodes whose step ended wait for the rollout to complete them\n"
    );
    if !killed_steps.is_empty() {
        out.push_str(&format!(
            "the steps on {} were stopped before they ended; they run again from the start when the rollout resumes\n",
            killed_steps.join(", ")
        ));
    }
    out.push_str(&ways_on(rollout, command));
    out
}

/// The words at the end.
pub fn done_message(rollout: &str, nodes: usize) -> String {
    format!(
        "rollout {rollout} is done: {nodes} node{} stepped and given back; its MaintenanceBudget and maintenances are deleted",
        if nodes == 1 { "" } else { "s" }
    )
}

/// The command line to resume with: `kubectl evictord` and the arguments, each quoted for a
/// POSIX shell where it needs it.
pub fn command_line(args: &[String]) -> String {
    let quote = |a: &String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=%:,@+".contains(c))
        {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    let mut words = vec!["kubectl".to_string(), "evictord".to_string()];
    words.extend(args.iter().map(quote));
    words.join(" ")
}

/// One node in the summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// The node.
    pub node: String,
    /// Its maintenance.
    pub maintenance: String,
    /// [`Phase::label`].
    pub phase: &'static str,
    /// [`Phase::text`].
    pub detail: String,
    /// Its step record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<StepRecord>,
}

/// How many nodes are in each group, for the headline.
pub fn headline(rollout: &str, phases: &[&Phase]) -> String {
    let count = |f: fn(&Phase) -> bool| phases.iter().filter(|p| f(p)).count();
    let done = count(is_finished);
    let parts = [
        (
            count(|p| matches!(p, Phase::Queued(_) | Phase::Pending | Phase::Deleting)),
            "queued",
        ),
        (count(|p| matches!(p, Phase::Draining { .. })), "draining"),
        (
            count(|p| {
                matches!(
                    p,
                    Phase::StepDue(_) | Phase::StepRunning(_) | Phase::StepElsewhere(_)
                )
            }),
            "in their step",
        ),
        (count(|p| matches!(p, Phase::StepFailed(_))), "failed"),
        (
            count(|p| {
                matches!(
                    p,
                    Phase::WaitingBack | Phase::CompleteDue | Phase::Releasing
                )
            }),
            "coming back",
        ),
    ];
    let mut t = format!("rollout {rollout}: {done}/{} nodes done", phases.len());
    for (n, what) in parts.into_iter().filter(|(n, _)| *n > 0) {
        t.push_str(&format!(", {n} {what}"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_node_the_code_and_the_ways_on() {
        let text = failure_message(
            "up",
            "kubectl evictord rollout up -l pool=a --max-unavailable 2 --exec ./upgrade.sh",
            &[Failure {
                node: "n2".into(),
                maintenance: "up-n2".into(),
                exit: Exit {
                    code: Some(3),
                    signal: None,
                },
            }],
            &["up-n3".into(), "up-n4".into()],
            &["n3".into(), "n4".into()],
        );
        assert_eq!(
            text,
            "step failed on node n2 (exit code 3); the node stays cordoned (maintenance up-n2 stays in Drain)\n\
             deleted the maintenances not admitted yet, so that no other node is drained: up-n3, up-n4\n\
             gave back the nodes cordoned at the start (--cordon-first): n3, n4\n\
             to go on, fix the cause and run the same command again: the failed step runs again and the rollout carries on\n\
             \x20 resume: kubectl evictord rollout up -l pool=a --max-unavailable 2 --exec ./upgrade.sh\n\
             \x20 stop the rollout and give every node back: kubectl delete nodemaintenances,maintenancebudgets -l evictord.dev/rollout=up\n\
             \x20 give n2 back without its step: kubectl evictord complete up-n2"
        );
    }

    #[test]
    fn stopping_says_nothing_was_undone() {
        let text = stopped_message("up", "kubectl evictord rollout up n1", &["n1".into()]);
        assert!(
            text.starts_with("rollout up stopped; nothing was undone"),
            "{text}"
        );
        assert!(
            text.contains("the steps on n1 were stopped before they ended"),
            "{text}"
        );
        assert!(
            text.contains("  resume: kubectl evictord rollout up n1"),
            "{text}"
        );
    }

    #[test]
    fn command_lines_quote_what_needs_it() {
        let args: Vec<String> = [
            "rollout",
            "up",
            "-l",
            "pool=a",
            "--exec",
            "echo $EVICTORD_NODE; it's",
            "--max-unavailable",
            "50%",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            command_line(&args),
            r#"kubectl evictord rollout up -l pool=a --exec 'echo $EVICTORD_NODE; it'\''s' --max-unavailable 50%"#
        );
    }

    #[test]
    fn the_headline_counts_the_groups() {
        let phases = [
            Phase::Done,
            Phase::Queued("x".into()),
            Phase::Draining {
                pending: 0,
                evacuating: 1,
                message: String::new(),
                deadline: None,
            },
            Phase::StepRunning(jiff::Timestamp::UNIX_EPOCH),
            Phase::WaitingBack,
        ];
        let refs: Vec<&Phase> = phases.iter().collect();
        assert_eq!(
            headline("up", &refs),
            "rollout up: 1/5 nodes done, 1 queued, 1 draining, 1 in their step, 1 coming back"
        );
        assert_eq!(phases.iter().filter(|p| is_finished(p)).count(), 1);
    }
}
