//! Where a roll's time went, node by node (issue 41), from what the sampler saw: when each
//! drained node was *taken* (held by an admitted maintenance when one held it, else cordoned),
//! when its last pod to drain left (*emptied*), and when it was *given back* (schedulable again,
//! and no maintenance holding it); with the drain mode's time, how many nodes were out at once
//! on average.

use serde::Serialize;

use crate::loadgen::median;
use crate::support::pool::measure::Samples;
use crate::support::pool::nodes::Span;

/// One drained node's roll, seconds since the drain started.
#[derive(Clone, Debug, Serialize)]
pub struct NodeRoll {
    pub node: String,
    pub taken: Option<f64>,
    pub emptied: Option<f64>,
    pub back: Option<f64>,
}

/// The rolls' medians and maxima (seconds).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RollSummary {
    /// Nodes taken.
    pub nodes: usize,
    /// Nodes given back.
    pub back: usize,
    /// Taken → emptied (the drain).
    pub drain_median: f64,
    pub drain_max: f64,
    /// Emptied → given back (the step, waiting for Ready, the give-back).
    pub after_median: f64,
    pub after_max: f64,
    /// Σ (given back − taken) ÷ the drain mode's time: nodes out at once on average.
    pub mean_out: f64,
    /// The first node taken, and the last given back.
    pub first_taken: f64,
    pub last_back: f64,
}

fn first_from(spans: &[Span]) -> Option<f64> {
    spans.first().map(|s| s.from)
}

/// The last end of `spans` when every span ended.
fn last_to(spans: &[Span]) -> Option<f64> {
    spans.last().and_then(|s| s.to)
}

/// Each drained node's roll.
pub fn rolls(samples: &Samples, drained: &[String]) -> Vec<NodeRoll> {
    drained
        .iter()
        .map(|node| {
            let spans = samples.nodes.spans.iter().find(|s| &s.node == node);
            let taken = spans.and_then(|s| first_from(&s.held).or_else(|| first_from(&s.cordoned)));
            let back = spans.and_then(|s| {
                let cordon = last_to(&s.cordoned);
                if s.held.is_empty() {
                    cordon
                } else {
                    Some(cordon?.max(last_to(&s.held)?))
                }
            });
            let emptied = samples
                .departures
                .iter()
                .filter(|d| &d.node == node)
                .map(|d| d.t)
                .reduce(f64::max);
            NodeRoll {
                node: node.clone(),
                taken,
                emptied,
                back,
            }
        })
        .collect()
}

/// The medians and maxima of `rolls` over a mode that took `seconds`.
pub fn summary(rolls: &[NodeRoll], seconds: f64) -> RollSummary {
    let taken: Vec<&NodeRoll> = rolls.iter().filter(|r| r.taken.is_some()).collect();
    let drain: Vec<f64> = taken
        .iter()
        .filter_map(|r| Some(r.emptied? - r.taken?))
        .map(|d| d.max(0.0))
        .collect();
    let after: Vec<f64> = taken
        .iter()
        .filter_map(|r| Some(r.back? - r.emptied?))
        .map(|d| d.max(0.0))
        .collect();
    let out: f64 = taken
        .iter()
        .filter_map(|r| Some(r.back.unwrap_or(seconds) - r.taken?))
        .sum();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    RollSummary {
        nodes: taken.len(),
        back: taken.iter().filter(|r| r.back.is_some()).count(),
        drain_median: median(drain.iter().copied()),
        drain_max: max(&drain),
        after_median: median(after.iter().copied()),
        after_max: max(&after),
        mean_out: out / seconds.max(1e-9),
        first_taken: taken
            .iter()
            .filter_map(|r| r.taken)
            .fold(f64::INFINITY, f64::min),
        last_back: taken.iter().filter_map(|r| r.back).fold(0.0, f64::max),
    }
}
