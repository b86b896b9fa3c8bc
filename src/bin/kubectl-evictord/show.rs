//! Drawing: progress bars on a terminal (indicatif) with, under each node's bar, its drain
//! deadline, the pods skipped and waited for, and the pods holding it up; plain lines otherwise;
//! objects as json or yaml.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;

use console::style;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use evictord::plugin::progress::{Frame, WAITING_TEXT, new_lines, plain_lines, skipped_text};
use evictord::plugin::{Error, Result};

use crate::cli::Output;

/// Prints a value as json or yaml.
pub fn print_object<T: Serialize>(value: &T, output: Output) -> Result<()> {
    let text = match output {
        Output::Json => {
            serde_json::to_string_pretty(value).map_err(|e| Error::Usage(e.to_string()))?
        }
        Output::Yaml => serde_norway::to_string(value).map_err(|e| Error::Usage(e.to_string()))?,
    };
    println!("{}", text.trim_end());
    Ok(())
}

/// True when stdout is a terminal: bars, else plain lines.
pub fn is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// Progress display of a drain.
pub enum Display {
    /// One bar per node and its blocker lines under it.
    Live {
        multi: MultiProgress,
        bars: BTreeMap<String, (ProgressBar, ProgressBar)>,
    },
    /// One line per change.
    Plain { printed: BTreeSet<String> },
}

impl Display {
    /// Bars on a terminal, plain lines otherwise.
    pub fn new() -> Self {
        if is_terminal() {
            Display::Live {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stdout()),
                bars: BTreeMap::new(),
            }
        } else {
            Display::Plain {
                printed: BTreeSet::new(),
            }
        }
    }

    /// Shows a frame.
    pub fn update(&mut self, frame: &Frame) {
        match self {
            Display::Plain { printed } => {
                for line in new_lines(printed, &plain_lines(frame)) {
                    println!("{line}");
                }
            }
            Display::Live { multi, bars } => {
                for n in &frame.nodes {
                    let (bar, lines) = bars.entry(n.node.clone()).or_insert_with(|| {
                        let bar = multi.add(ProgressBar::new(0));
                        bar.set_style(bar_style());
                        bar.set_prefix(n.node.clone());
                        let lines = multi.add(ProgressBar::new(0));
                        lines.set_style(lines_style());
                        (bar, lines)
                    });
                    bar.set_length(n.total);
                    bar.set_position(n.evicted);
                    bar.set_message(n.note.clone().unwrap_or_default());
                    let mut text: Vec<String> = Vec::new();
                    if let Some(d) = &n.deadline {
                        let line = d.text(Some(frame.at));
                        text.push(if d.exceeded {
                            format!("  {} {}", style("•").red(), style(line).red())
                        } else {
                            format!("  {} {line}", style("•").cyan())
                        });
                    }
                    if !n.skipped.is_empty() {
                        text.push(format!(
                            "  {} {}",
                            style("-").dim(),
                            skipped_text(&n.skipped)
                        ));
                    }
                    text.extend(
                        n.waiting
                            .iter()
                            .map(|p| format!("  {} {p}: {WAITING_TEXT}", style("…").cyan())),
                    );
                    text.extend(n.pods.iter().map(|p| {
                        format!("  {} {}: {}", style("•").yellow(), p.pod, p.holdup.text)
                    }));
                    lines.set_message(text.join("\n"));
                }
            }
        }
    }

    /// Leaves the last frame on screen and prints `line` under it.
    pub fn finish(&mut self, line: &str) {
        match self {
            Display::Plain { .. } => println!("{line}"),
            Display::Live { bars, .. } => {
                // Abandoned bars stay on screen; the line goes under them.
                for (bar, lines) in bars.values() {
                    bar.abandon();
                    lines.abandon();
                }
                println!("{line}");
            }
        }
    }
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:.bold} [{bar:30.green/white}] {pos}/{len} pods evicted {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

fn lines_style() -> ProgressStyle {
    ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_bar())
}
