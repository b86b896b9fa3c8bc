//! What the sampler sees of the pool's nodes (issue 41): at each sample how many are
//! *unavailable* as a user sees them (cordoned or not `Ready`) and how many a maintenance
//! *holds* as a MaintenanceBudget counts them (SPEC 6.1: admitted to a NodeMaintenance that
//! has not given them back, or not `Ready`; a node cordoned by hand, as `--cordon-first` does,
//! is not counted there), the most of each at once, each node's spans, and which drained nodes
//! were *given back* (cordoned at a sample, schedulable again at a later one): pods that land on
//! a node after it was given back are not pods to drain.
//!
//! Pure: [`NodeWatch::observe`] takes one sample's nodes and held set; [`held_nodes`] reads the
//! maintenances' admission records.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use evictord::api::{Admitted, NodeMaintenance};
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

/// True when the node is cordoned (`spec.unschedulable`).
pub fn is_cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// True when the node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The nodes admitted maintenances hold: their admission record's nodes until the record says
/// they were given back (a maintenance that acted before records were kept: its status's
/// nodes).
pub fn held_nodes(maintenances: &[Arc<NodeMaintenance>]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in maintenances {
        match m.admitted() {
            Admitted::Nothing => {}
            a @ Admitted::Nodes(record) => {
                if !a.released() {
                    out.extend(record.nodes.iter().map(|n| n.name.clone()));
                }
            }
            Admitted::Every => out.extend(
                m.status
                    .iter()
                    .flat_map(|s| &s.node_statuses)
                    .map(|s| s.node_ref.name.clone()),
            ),
        }
    }
    out
}

/// From when to when (`None`: still at the last sample), seconds since the sampling started.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Span {
    pub from: f64,
    pub to: Option<f64>,
}

/// One node's spans cordoned and held.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeSpans {
    pub node: String,
    pub cordoned: Vec<Span>,
    pub held: Vec<Span>,
}

fn mark(spans: &mut Vec<Span>, t: f64, on: bool) {
    let open = spans.last().is_some_and(|s| s.to.is_none());
    if on && !open {
        spans.push(Span { from: t, to: None });
    } else if !on
        && open
        && let Some(s) = spans.last_mut()
    {
        s.to = Some(t);
    }
}

/// The most nodes at once, when first and which.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Peak {
    pub count: usize,
    pub at: f64,
    pub nodes: Vec<String>,
}

impl Peak {
    fn observe(&mut self, t: f64, nodes: &BTreeSet<String>) {
        if nodes.len() > self.count {
            *self = Peak {
                count: nodes.len(),
                at: t,
                nodes: nodes.iter().cloned().collect(),
            };
        }
    }
}

/// One sample's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct NodeCounts {
    pub cordoned: usize,
    pub not_ready: usize,
    /// Cordoned or not Ready.
    pub unavailable: usize,
    /// Held by a maintenance or not Ready (`None`: no maintenance watch).
    pub held: Option<usize>,
}

/// What the sampler saw of the nodes (see the module documentation).
#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeFigures {
    /// Cordoned or not Ready.
    pub most_unavailable: Peak,
    /// Held by a maintenance or not Ready (`None`: no maintenance watch).
    pub most_held: Option<Peak>,
    /// The nodes with a span, by name.
    pub spans: Vec<NodeSpans>,
    /// The drained nodes given back, in the order they were.
    pub given_back: Vec<String>,
}

/// The accumulator.
#[derive(Clone, Debug)]
pub struct NodeWatch {
    drained: BTreeSet<String>,
    was_cordoned: BTreeSet<String>,
    given_back: Vec<String>,
    back: BTreeSet<String>,
    spans: BTreeMap<String, NodeSpans>,
    most_unavailable: Peak,
    most_held: Option<Peak>,
}

impl NodeWatch {
    pub fn new(drained: BTreeSet<String>) -> Self {
        Self {
            drained,
            was_cordoned: BTreeSet::new(),
            given_back: Vec::new(),
            back: BTreeSet::new(),
            spans: BTreeMap::new(),
            most_unavailable: Peak::default(),
            most_held: None,
        }
    }

    /// True once the drained node was given back: pods landing there now are not to drain.
    pub fn given_back(&self, node: &str) -> bool {
        self.back.contains(node)
    }

    /// Takes the sample at `t`: the pool's nodes, and the nodes maintenances hold when watched.
    pub fn observe(
        &mut self,
        t: f64,
        nodes: &[Arc<Node>],
        held: Option<&BTreeSet<String>>,
    ) -> NodeCounts {
        let mut cordoned = BTreeSet::new();
        let mut not_ready = BTreeSet::new();
        for n in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            if is_cordoned(n) {
                cordoned.insert(name.clone());
            }
            if !is_ready(n) {
                not_ready.insert(name);
            }
        }
        let names: BTreeSet<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let held: Option<BTreeSet<String>> =
            held.map(|h| h.intersection(&names).cloned().collect());
        for name in &names {
            let c = cordoned.contains(name);
            let h = held.as_ref().is_some_and(|h| h.contains(name));
            if c || h || self.spans.contains_key(name) {
                let s = self.spans.entry(name.clone()).or_insert_with(|| NodeSpans {
                    node: name.clone(),
                    ..NodeSpans::default()
                });
                mark(&mut s.cordoned, t, c);
                mark(&mut s.held, t, h);
            }
            if self.drained.contains(name) {
                if c {
                    self.was_cordoned.insert(name.clone());
                } else if self.was_cordoned.contains(name) && self.back.insert(name.clone()) {
                    self.given_back.push(name.clone());
                }
            }
        }
        let unavailable: BTreeSet<String> = cordoned.union(&not_ready).cloned().collect();
        self.most_unavailable.observe(t, &unavailable);
        let held_count = held.map(|h| {
            let h: BTreeSet<String> = h.union(&not_ready).cloned().collect();
            self.most_held
                .get_or_insert_with(Peak::default)
                .observe(t, &h);
            h.len()
        });
        NodeCounts {
            cordoned: cordoned.len(),
            not_ready: not_ready.len(),
            unavailable: unavailable.len(),
            held: held_count,
        }
    }

    pub fn finish(self) -> NodeFigures {
        NodeFigures {
            most_unavailable: self.most_unavailable,
            most_held: self.most_held,
            spans: self.spans.into_values().collect(),
            given_back: self.given_back,
        }
    }
}
