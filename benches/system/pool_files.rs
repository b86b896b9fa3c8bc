//! The pool part's raw samples and plots, next to the report (`pool-<mode>-*.csv`,
//! `pool-<mode>.svg`):
//! - `availability.csv`: `t,workload,row,available,desired` at the first sample and at every
//!   change of a workload's available pods (a step function: the value holds until the next row
//!   of that workload), `t` in seconds since the drain started;
//! - `totals.csv`: every sample (every 100 ms): pods (not the DaemonSet's) and DaemonSet pods on
//!   the drained nodes, replicas below desired over all workloads, PodDisruptionBudget floors
//!   broken, the pool's nodes cordoned, not Ready, either, and held by an admitted NodeMaintenance
//!   or not Ready (empty without a maintenance watch);
//! - `departures.csv`: each pod that left a drained node, when;
//! - `nodes.csv`: each span a node was cordoned or held by a maintenance;
//! - the plot: available ÷ desired over time of the mode's worst Deployment or StatefulSet, and
//!   of its worst Deployment under the goal.

use std::fmt::Write;
use std::path::Path;

use crate::pool_mode::Mode;
use crate::pool_results::Worst;
use crate::support::pool::measure::Samples;
use crate::svg::{Line, StepPlot};

/// Writes the mode's files; returns their names.
pub fn write(
    dir: &Path,
    mode: &Mode,
    samples: &Samples,
    plotted: [Option<&Worst>; 2],
    drain_seconds: f64,
) -> anyhow::Result<Vec<String>> {
    let slug = mode.slug();
    let mut files = Vec::new();
    let mut put = |suffix: &str, text: String| -> anyhow::Result<()> {
        let name = format!("pool-{slug}{suffix}");
        std::fs::write(dir.join(&name), text)?;
        files.push(name);
        Ok(())
    };
    let mut a = String::from("t,workload,row,available,desired\n");
    for w in &samples.workloads {
        for (t, available) in &w.availability.changes {
            let _ = writeln!(
                a,
                "{t:.2},{},{},{available},{}",
                w.tracked.name, w.tracked.row, w.tracked.desired
            );
        }
    }
    put("-availability.csv", a)?;
    let mut t = String::from(
        "t,pods_on_drained_nodes,daemonset_pods_on_drained_nodes,replicas_below_desired,pdb_floors_broken,nodes_cordoned,nodes_not_ready,nodes_unavailable,nodes_held\n",
    );
    for s in &samples.totals {
        let _ = writeln!(
            t,
            "{:.2},{},{},{},{},{},{},{},{}",
            s.t,
            s.pods_on_drained,
            s.daemonset_pods_on_drained,
            s.replicas_below_desired,
            s.floors_broken,
            s.nodes.cordoned,
            s.nodes.not_ready,
            s.nodes.unavailable,
            s.nodes.held.map_or(String::new(), |h| h.to_string())
        );
    }
    put("-totals.csv", t)?;
    let mut d = String::from("t,pod,workload,row,node\n");
    for x in &samples.departures {
        let _ = writeln!(
            d,
            "{:.2},{},{},{},{}",
            x.t, x.pod, x.workload, x.row, x.node
        );
    }
    put("-departures.csv", d)?;
    let mut n = String::from("node,what,from,to\n");
    for x in &samples.nodes.spans {
        for (what, spans) in [("cordoned", &x.cordoned), ("held", &x.held)] {
            for span in spans {
                let _ = writeln!(
                    n,
                    "{},{what},{:.2},{}",
                    x.node,
                    span.from,
                    span.to.map_or(String::new(), |t| format!("{t:.2}"))
                );
            }
        }
    }
    put("-nodes.csv", n)?;
    let mut plotted: Vec<&Worst> = plotted.into_iter().flatten().collect();
    plotted.dedup_by(|a, b| a.workload == b.workload);
    if !plotted.is_empty() {
        let labels: Vec<String> = plotted
            .iter()
            .map(|w| {
                format!(
                    "{} ({}): {:.1} replica-s below desired",
                    w.workload, w.row, w.replica_seconds
                )
            })
            .collect();
        let title = format!("{}: available pods ÷ desired", mode.id());
        let plot = StepPlot {
            title: &title,
            y_label: "available ÷ desired",
            lines: plotted
                .iter()
                .zip(&labels)
                .map(|(w, label)| Line {
                    label,
                    points: &w.ratio,
                })
                .collect(),
            x_end: samples.seconds,
            reference: Some((1.0, "desired")),
            mark: Some((drain_seconds, "drain ended")),
        };
        put(".svg", plot.render())?;
    }
    Ok(files)
}

/// A kube-apiserver histogram series under a short name: `VERB resource[/subresource]` for
/// request durations, `webhook NAME OPERATION` for admission webhook calls.
pub fn short_series(series: &str) -> String {
    let label = |name: &str| -> String {
        let needle = format!("{name}=\"");
        series
            .split(['{', ','])
            .find_map(|kv| kv.strip_prefix(needle.as_str()))
            .map(|v| v.trim_end_matches('}').trim_end_matches('"').to_string())
            .unwrap_or_default()
    };
    if series.starts_with("apiserver_admission_webhook") {
        return format!("webhook {} {}", label("name"), label("operation"));
    }
    let sub = label("subresource");
    format!(
        "{} {}{}{sub}",
        label("verb"),
        label("resource"),
        if sub.is_empty() { "" } else { "/" }
    )
}
