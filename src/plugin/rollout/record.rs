//! What a rollout records of the command that started it, and whether the same command may
//! resume it: the options (`--exec`, `--reboot`, `--cordon-first`, `-l`, `--drain-deadline` and
//! `--deadline-policy`) are recorded on its budget (annotation `evictord.dev/rollout-options`),
//! its nodes are the budget's selector.
//!
//! Resume rules ([`resume_check`]):
//! - the nodes must be the rollout's: the same names, or the same `-l` selector (which may match
//!   other nodes by now: the rollout keeps its own and says so);
//! - `--exec`, `--reboot`, `--cordon-first` and the drain deadline must be the recorded ones: half
//!   a pool stepped (or drained) one way and half another would surprise; the refusal names the
//!   recorded values;
//! - `--max-unavailable` may change: the budget is updated, and the change is said.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

use crate::api::MaintenanceBudget;
use crate::plugin::maintenance::DrainDeadline;

use super::naming::named_nodes;

/// Annotation on a rollout's budget: the options of the command that started it (JSON).
pub const ROLLOUT_OPTIONS_ANNOTATION: &str = "evictord.dev/rollout-options";

/// The options of a rollout that a resumed run must repeat.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutOptions {
    /// `-l`: the label selector the nodes were chosen by (none: by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// `--exec`: the per-node step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<String>,
    /// `--reboot`: the step reboots the node.
    #[serde(default)]
    pub reboot: bool,
    /// `--cordon-first`: every node cordoned at the start.
    #[serde(default)]
    pub cordon_first: bool,
    /// `--drain-deadline` and `--deadline-policy` (SPEC 6.2), written into each maintenance.
    /// Absent in the records of rollouts started before the flags existed: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_deadline: Option<DrainDeadline>,
}

/// What the cluster holds of a rollout, read from its budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Its nodes (the budget's selector).
    pub nodes: Vec<String>,
    /// The recorded options; `None` when the annotation is missing or unreadable.
    pub options: Option<RolloutOptions>,
    /// The budget's `maxUnavailable`.
    pub max_unavailable: Option<IntOrString>,
}

impl Recorded {
    /// The record of a rollout's budget; `None` when its selector does not name nodes (not a
    /// budget the plugin made).
    pub fn of(budget: &MaintenanceBudget) -> Option<Recorded> {
        let nodes = named_nodes(budget.spec.node_selector.as_ref()?)?;
        let options = budget
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROLLOUT_OPTIONS_ANNOTATION))
            .and_then(|v| serde_json::from_str(v).ok());
        Some(Recorded {
            nodes,
            options,
            max_unavailable: budget.spec.max_unavailable.clone(),
        })
    }
}

/// What the command asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Requested {
    /// The nodes it names, or its selector matches now.
    pub nodes: Vec<String>,
    /// Its options.
    pub options: RolloutOptions,
    /// `--max-unavailable`.
    pub max_unavailable: IntOrString,
}

/// How the rollout resumes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resume {
    /// The rollout's nodes (the recorded ones).
    pub nodes: Vec<String>,
    /// The budget's new `maxUnavailable`, when the command changes it.
    pub new_max_unavailable: Option<IntOrString>,
    /// What to tell the person (a changed budget, a selector matching other nodes now).
    pub notes: Vec<String>,
}

/// Why the command may not resume the rollout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Other nodes.
    #[error(
        "rollout {rollout} is for the nodes {recorded}, not {requested}; give the same nodes (or the same -l selector) to resume it"
    )]
    Nodes {
        /// The rollout.
        rollout: String,
        /// Its nodes.
        recorded: String,
        /// The command's nodes.
        requested: String,
    },
    /// Other options.
    #[error(
        "rollout {rollout} was started with {recorded}, not {requested}; run it with the same options to resume it"
    )]
    Options {
        /// The rollout.
        rollout: String,
        /// The recorded options that differ, as flags.
        recorded: String,
        /// The command's, as flags.
        requested: String,
    },
    /// No readable record.
    #[error(
        "MaintenanceBudget {rollout} carries the rollout label but no readable record of its options (annotation {ROLLOUT_OPTIONS_ANNOTATION}); it was not made by kubectl evictord rollout"
    )]
    Unreadable {
        /// The rollout.
        rollout: String,
    },
}

fn list(nodes: &[String]) -> String {
    if nodes.is_empty() {
        "(none)".into()
    } else {
        nodes.join(", ")
    }
}

/// The options that differ, as the flags that set them: (recorded, requested).
fn option_flags(
    recorded: &RolloutOptions,
    requested: &RolloutOptions,
) -> (Vec<String>, Vec<String>) {
    let exec = |e: &Option<String>| match e {
        Some(c) => format!("--exec {c:?}"),
        None => "no --exec".into(),
    };
    let flag = |on: bool, name: &str| {
        if on {
            format!("--{name}")
        } else {
            format!("no --{name}")
        }
    };
    let mut was = Vec::new();
    let mut now = Vec::new();
    if recorded.exec != requested.exec {
        was.push(exec(&recorded.exec));
        now.push(exec(&requested.exec));
    }
    if recorded.reboot != requested.reboot {
        was.push(flag(recorded.reboot, "reboot"));
        now.push(flag(requested.reboot, "reboot"));
    }
    if recorded.cordon_first != requested.cordon_first {
        was.push(flag(recorded.cordon_first, "cordon-first"));
        now.push(flag(requested.cordon_first, "cordon-first"));
    }
    if recorded.drain_deadline != requested.drain_deadline {
        let deadline = |d: &Option<DrainDeadline>| match d {
            Some(d) => d.flags(),
            None => "no --drain-deadline".into(),
        };
        was.push(deadline(&recorded.drain_deadline));
        now.push(deadline(&requested.drain_deadline));
    }
    (was, now)
}

/// Whether the command may resume the recorded rollout, and how. See the module docs.
///
/// # Errors
/// Other nodes or other options than recorded, or no readable record.
pub fn resume_check(
    rollout: &str,
    recorded: &Recorded,
    requested: &Requested,
) -> Result<Resume, Mismatch> {
    let Some(options) = &recorded.options else {
        return Err(Mismatch::Unreadable {
            rollout: rollout.into(),
        });
    };
    let mut notes = Vec::new();
    let was: BTreeSet<&String> = recorded.nodes.iter().collect();
    let now: BTreeSet<&String> = requested.nodes.iter().collect();
    if was != now {
        let same_selector =
            options.selector.is_some() && options.selector == requested.options.selector;
        if !same_selector {
            return Err(Mismatch::Nodes {
                rollout: rollout.into(),
                recorded: list(&recorded.nodes),
                requested: list(&requested.nodes),
            });
        }
        let added: Vec<String> = now.difference(&was).map(|n| n.to_string()).collect();
        let gone: Vec<String> = was.difference(&now).map(|n| n.to_string()).collect();
        let mut note = format!(
            "the selector {:?} matches other nodes than when rollout {rollout} started; the rollout keeps its nodes ({})",
            requested.options.selector.as_deref().unwrap_or_default(),
            list(&recorded.nodes)
        );
        if !added.is_empty() {
            note.push_str(&format!(
                "; not part of it: {} (roll them with another rollout)",
                added.join(", ")
            ));
        }
        if !gone.is_empty() {
            note.push_str(&format!("; no longer matched: {}", gone.join(", ")));
        }
        notes.push(note);
    }
    let (was_flags, now_flags) = option_flags(options, &requested.options);
    if !was_flags.is_empty() {
        return Err(Mismatch::Options {
            rollout: rollout.into(),
            recorded: was_flags.join(", "),
            requested: now_flags.join(", "),
        });
    }
    let new_max_unavailable = (recorded.max_unavailable.as_ref()
        != Some(&requested.max_unavailable))
    .then(|| requested.max_unavailable.clone());
    if let Some(m) = &new_max_unavailable {
        notes.push(format!(
            "MaintenanceBudget {rollout}: maxUnavailable {} -> {} (as this command asks)",
            recorded
                .max_unavailable
                .as_ref()
                .map_or_else(|| "1".to_string(), int_or_string),
            int_or_string(m)
        ));
    }
    Ok(Resume {
        nodes: recorded.nodes.clone(),
        new_max_unavailable,
        notes,
    })
}

/// `2` or `25%`.
pub fn int_or_string(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// `--max-unavailable` as the budget field: an integer, else the text (a percentage).
pub fn max_unavailable_value(flag: &str) -> IntOrString {
    match flag.trim().parse::<i32>() {
        Ok(n) => IntOrString::Int(n),
        Err(_) => IntOrString::String(flag.trim().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    fn options(selector: Option<&str>, exec: Option<&str>, reboot: bool) -> RolloutOptions {
        RolloutOptions {
            selector: selector.map(str::to_string),
            exec: exec.map(str::to_string),
            reboot,
            cordon_first: false,
            drain_deadline: None,
        }
    }

    fn deadline(o: RolloutOptions, seconds: Option<i64>) -> RolloutOptions {
        RolloutOptions {
            drain_deadline: seconds.map(|seconds| DrainDeadline {
                seconds,
                policy: crate::api::DeadlinePolicy::Report,
            }),
            ..o
        }
    }

    fn recorded(nodes: &[&str], o: RolloutOptions, max: i32) -> Recorded {
        Recorded {
            nodes: names(nodes),
            options: Some(o),
            max_unavailable: Some(IntOrString::Int(max)),
        }
    }

    fn requested(nodes: &[&str], o: RolloutOptions, max: IntOrString) -> Requested {
        Requested {
            nodes: names(nodes),
            options: o,
            max_unavailable: max,
        }
    }

    #[rstest]
    #[case::same_nodes_any_order(
        recorded(&["a", "b"], options(None, Some("x"), false), 2),
        requested(&["b", "a"], options(None, Some("x"), false), IntOrString::Int(2)),
        Ok(0)
    )]
    #[case::same_selector_other_matches(
        recorded(&["a", "b"], options(Some("pool=a"), None, false), 2),
        requested(&["a", "b", "c"], options(Some("pool=a"), None, false), IntOrString::Int(2)),
        Ok(1)
    )]
    #[case::names_for_a_selector_rollout(
        recorded(&["a", "b"], options(Some("pool=a"), None, false), 2),
        requested(&["a", "b"], options(None, None, false), IntOrString::Int(2)),
        Ok(0)
    )]
    #[case::max_unavailable_changes(
        recorded(&["a"], options(None, None, false), 2),
        requested(&["a"], options(None, None, false), IntOrString::String("50%".into())),
        Ok(1)
    )]
    #[case::other_nodes(
        recorded(&["a", "b"], options(None, None, false), 2),
        requested(&["a", "c"], options(None, None, false), IntOrString::Int(2)),
        Err("is for the nodes a, b, not a, c")
    )]
    #[case::other_selector(
        recorded(&["a", "b"], options(Some("pool=a"), None, false), 2),
        requested(&["a"], options(Some("pool=b"), None, false), IntOrString::Int(2)),
        Err("is for the nodes a, b, not a")
    )]
    #[case::other_exec(
        recorded(&["a"], options(None, Some("upgrade.sh"), false), 2),
        requested(&["a"], options(None, Some("other.sh"), false), IntOrString::Int(2)),
        Err("started with --exec \"upgrade.sh\", not --exec \"other.sh\"")
    )]
    #[case::no_exec_now(
        recorded(&["a"], options(None, Some("upgrade.sh"), true), 2),
        requested(&["a"], options(None, None, false), IntOrString::Int(2)),
        Err("started with --exec \"upgrade.sh\", --reboot, not no --exec, no --reboot")
    )]
    #[case::same_deadline(
        recorded(&["a"], deadline(options(None, None, false), Some(600)), 1),
        requested(&["a"], deadline(options(None, None, false), Some(600)), IntOrString::Int(1)),
        Ok(0)
    )]
    #[case::other_deadline(
        recorded(&["a"], deadline(options(None, None, false), Some(600)), 1),
        requested(&["a"], deadline(options(None, None, false), Some(1200)), IntOrString::Int(1)),
        Err("started with --drain-deadline 10m --deadline-policy report, not --drain-deadline 20m --deadline-policy report")
    )]
    #[case::deadline_dropped(
        recorded(&["a"], deadline(options(None, None, false), Some(600)), 1),
        requested(&["a"], options(None, None, false), IntOrString::Int(1)),
        Err("not no --drain-deadline")
    )]
    fn resume_rules(
        #[case] recorded: Recorded,
        #[case] requested: Requested,
        #[case] want: Result<usize, &str>,
    ) {
        match (resume_check("up", &recorded, &requested), want) {
            (Ok(r), Ok(notes)) => {
                assert_eq!(r.notes.len(), notes, "{:?}", r.notes);
                assert_eq!(r.nodes, recorded.nodes);
            }
            (Err(e), Err(part)) => assert!(e.to_string().contains(part), "{e}"),
            (got, want) => panic!("{got:?} != {want:?}"),
        }
    }

    #[test]
    fn notes_say_what_changes() {
        let r = resume_check(
            "up",
            &recorded(&["a", "b"], options(Some("pool=a"), None, false), 2),
            &requested(
                &["b", "c"],
                options(Some("pool=a"), None, false),
                IntOrString::Int(3),
            ),
        )
        .unwrap();
        assert_eq!(r.new_max_unavailable, Some(IntOrString::Int(3)));
        assert_eq!(
            r.notes,
            [
                "the selector \"pool=a\" matches other nodes than when rollout up started; the rollout keeps its nodes (a, b); not part of it: c (roll them with another rollout); no longer matched: a",
                "MaintenanceBudget up: maxUnavailable 2 -> 3 (as this command asks)"
            ]
        );
    }

    /// A record written before the deadline flags existed reads as no deadline.
    #[test]
    fn an_older_record_has_no_deadline() {
        let old: RolloutOptions =
            serde_json::from_str(r#"{"exec":"x","reboot":false,"cordonFirst":false}"#).unwrap();
        assert_eq!(old.drain_deadline, None);
        let new = deadline(options(None, None, false), Some(600));
        assert_eq!(
            serde_json::to_string(&new).unwrap(),
            r#"{"reboot":false,"cordonFirst":false,"drainDeadline":{"seconds":600,"policy":"Report"}}"#
        );
    }

    #[test]
    fn a_budget_without_a_record_is_refused() {
        let mut rec = recorded(&["a"], options(None, None, false), 1);
        rec.options = None;
        let err = resume_check(
            "up",
            &rec,
            &requested(&["a"], options(None, None, false), IntOrString::Int(1)),
        )
        .unwrap_err();
        assert!(matches!(err, Mismatch::Unreadable { .. }), "{err}");
    }

    #[rstest]
    #[case("2", IntOrString::Int(2))]
    #[case(" 3 ", IntOrString::Int(3))]
    #[case("25%", IntOrString::String("25%".into()))]
    #[case("two", IntOrString::String("two".into()))]
    fn max_unavailable_flag(#[case] flag: &str, #[case] want: IntOrString) {
        assert_eq!(max_unavailable_value(flag), want);
    }
}
