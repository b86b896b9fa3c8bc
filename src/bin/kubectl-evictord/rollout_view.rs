//! Drawing a rollout: on a terminal a spinner line for the rollout and one per node (its phase,
//! with a draining node's drain deadline and the controller's message, cut to the terminal's
//! width), with the steps' output and the rollout's messages printed above
//! them; otherwise plain lines, one per change. With `-o json|yaml` the lines go to standard error, so that standard output
//! carries only the summary.

use std::collections::BTreeMap;
use std::time::Duration;

use console::style;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use jiff::Timestamp;

use evictord::api::MaintenanceBudget;
use evictord::plugin::rollout::phase::Phase;
use evictord::plugin::rollout::summary::headline;

use crate::rollout_state::Snapshot;
use crate::show::is_terminal;

/// How the rollout is drawn.
pub enum View {
    /// Spinners on a terminal.
    Live {
        /// The lines.
        multi: MultiProgress,
        /// The rollout's line.
        header: ProgressBar,
        /// One line per node.
        nodes: BTreeMap<String, ProgressBar>,
        /// The widest node name, to align the lines.
        width: usize,
    },
    /// Plain lines.
    Plain {
        /// The last line printed per key (the rollout, each node).
        last: BTreeMap<String, String>,
        /// Print to standard error (standard output carries an object).
        to_stderr: bool,
    },
}

fn spinner_style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl View {
    /// Spinners on a terminal unless an object is printed at the end; plain lines otherwise.
    pub fn new(machine: bool, nodes: &[String]) -> Self {
        if machine || !is_terminal() {
            return View::Plain {
                last: BTreeMap::new(),
                to_stderr: machine,
            };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let header = multi.add(ProgressBar::new_spinner());
        header.set_style(spinner_style("{spinner:.cyan} {wide_msg}"));
        header.enable_steady_tick(Duration::from_millis(120));
        let width = nodes.iter().map(|n| n.len()).max().unwrap_or(0);
        let nodes = nodes
            .iter()
            .map(|n| {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(spinner_style(
                    "  {spinner:.green} {prefix:.bold} {wide_msg}",
                ));
                bar.set_prefix(format!("{n:width$}"));
                bar.enable_steady_tick(Duration::from_millis(120));
                (n.clone(), bar)
            })
            .collect();
        View::Live {
            multi,
            header,
            nodes,
            width,
        }
    }

    /// Prints a message (above the spinners on a terminal).
    pub fn say(&self, line: &str) {
        match self {
            View::Live { multi, .. } => {
                if multi.println(line).is_err() {
                    println!("{line}");
                }
            }
            View::Plain { to_stderr, .. } => {
                if *to_stderr {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            }
        }
    }

    /// A line of a step's output.
    pub fn step_output(&self, node: &str, line: &str) {
        match self {
            View::Live { width, .. } => self.say(&format!(
                "{} {line}",
                style(format!("[{node:width$}]")).dim()
            )),
            View::Plain { .. } => self.say(&format!("[{node}] {line}")),
        }
    }

    /// Shows the rollout's state: its headline, and each node's phase. `plain` are the same
    /// phases in words that change only with the phase.
    pub fn frame(&mut self, headline: &str, live: &[(String, String)], plain: &[(String, String)]) {
        match self {
            View::Live { header, nodes, .. } => {
                header.set_message(headline.to_string());
                for (node, text) in live {
                    if let Some(bar) = nodes.get(node) {
                        bar.set_message(text.clone());
                    }
                }
            }
            View::Plain { last, .. } => {
                let mut lines = Vec::new();
                let rows = std::iter::once((String::new(), headline.to_string()))
                    .chain(plain.iter().map(|(n, t)| (n.clone(), t.clone())));
                for (key, text) in rows {
                    if last.get(&key) != Some(&text) {
                        lines.push(if key.is_empty() {
                            text.clone()
                        } else {
                            format!("node {key}: {text}")
                        });
                        last.insert(key, text);
                    }
                }
                for l in lines {
                    self.say(&l);
                }
            }
        }
    }

    /// Leaves the last state on screen; what is said afterwards goes under it, as plain lines
    /// (the spinners are not drawn again).
    pub fn finish(&mut self) {
        if let View::Live { header, nodes, .. } = self {
            header.finish();
            for bar in nodes.values() {
                bar.finish();
            }
            *self = View::Plain {
                last: BTreeMap::new(),
                to_stderr: false,
            };
        }
    }
}

/// The budget's line for the headline.
fn budget_line(name: &str, b: Option<&MaintenanceBudget>) -> String {
    match b.and_then(|b| b.status.as_ref()) {
        Some(st) => format!(
            "MaintenanceBudget {name}: {}/{} unavailable{}",
            st.current_unavailable,
            st.allowed_unavailable,
            if st.queued_count > 0 {
                format!(", {} queued", st.queued_count)
            } else {
                String::new()
            }
        ),
        None => format!("MaintenanceBudget {name}: no status from evictord yet"),
    }
}

/// Draws the rollout's state: its headline (with its budget's count) and each node's phase.
pub fn draw(
    view: &mut View,
    name: &str,
    s: &Snapshot,
    phases: &BTreeMap<String, Phase>,
    reboot: bool,
) {
    let refs: Vec<&Phase> = phases.values().collect();
    let line = format!(
        "{}; {}",
        headline(name, &refs),
        budget_line(name, s.budget.as_ref())
    );
    let now = Timestamp::now();
    let live: Vec<(String, String)> = phases
        .iter()
        .map(|(n, p)| (n.clone(), p.text(reboot, Some(now))))
        .collect();
    let plain: Vec<(String, String)> = phases
        .iter()
        .map(|(n, p)| (n.clone(), p.text(reboot, None)))
        .collect();
    view.frame(&line, &live, &plain);
}
