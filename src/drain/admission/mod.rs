//! Admission of NodeMaintenances by MaintenanceBudgets (SPEC 6.1), as a pure function of the
//! nodes, the budgets, the maintenances and `now`.
//!
//! A maintenance in Cordon or Drain acts on its nodes only once they are admitted, all of its
//! waiting nodes or none. [`admit`] goes through the maintenances oldest first (creation time,
//! then name) and admits one when, for every budget selecting one of the nodes it would make
//! unavailable, the budget is open and stays within its `maxUnavailable`, counting each node once.
//! A node is unavailable while an admitted maintenance that has not given it back holds it, or
//! while its `Ready` condition is not `True`; a node cordoned by someone else is not counted.
//!
//! - A maintenance that would add no unavailable node (its nodes already NotReady, or held) is
//!   admitted whatever the budgets say.
//! - One that selects more of a budget's nodes than the budget ever allows is `TooLarge`: it is
//!   skipped and holds nobody back.
//! - One that waits for room (`BudgetExhausted`) keeps its place in every budget it needs: a
//!   younger maintenance does not take that room first, so a large maintenance is not starved by
//!   small ones.
//! - A closed window (`OutsideWindow`) admits nothing new and keeps no place.
//! - Admitted stays admitted: a closing window or a smaller budget stops new admissions only.
//!
//! [`budget_status`](status::budget_status) derives each budget's status from the same pass.

pub mod budget;
pub mod status;
pub mod window;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::api::{REASON_BUDGET_EXHAUSTED, REASON_OUTSIDE_WINDOW, REASON_TOO_LARGE};

pub use budget::{BudgetInput, BudgetRules, MaxUnavailable, budget_rules};
pub use window::{Window, WindowState, parse_windows, window_state};

/// At most this many node names in a message; the rest are counted.
const MAX_NAMED_NODES: usize = 5;

/// A node, reduced to what admission reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
}

/// A NodeMaintenance, reduced to what admission reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceState {
    /// Name.
    pub name: String,
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// In stage Cordon or Drain and not being deleted: its selected nodes want admission.
    pub wants: bool,
    /// The nodes its selector matches now.
    pub selected: BTreeSet<String>,
    /// The nodes admitted so far (its record, or every selected node for a maintenance that
    /// acted before admissions were recorded).
    pub admitted: BTreeSet<String>,
    /// Admission recorded (possibly of no node): `Admitted` is `True`.
    pub recorded: bool,
    /// Its admitted nodes count as unavailable: admitted and not given back yet (whatever its
    /// stage: a maintenance in Complete holds its nodes until its Complete work restored them).
    pub holding: bool,
}

/// Everything [`admit`] decides on.
#[derive(Clone, Debug, Default)]
pub struct AdmissionInput {
    /// Every node.
    pub nodes: Vec<NodeState>,
    /// Every MaintenanceBudget.
    pub budgets: Vec<BudgetInput>,
    /// Every NodeMaintenance.
    pub maintenances: Vec<MaintenanceState>,
}

/// What [`admit`] decided for one maintenance that wants admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing new to decide: its selected nodes are admitted.
    Settled,
    /// Admit these nodes now (possibly none, for a maintenance selecting no node); `budgets` are
    /// the budgets selecting them (none: no budget applies).
    Admit {
        /// The nodes to add to its admission, by name.
        nodes: Vec<String>,
        /// The budgets selecting some of them.
        budgets: Vec<String>,
    },
    /// Its waiting nodes stay queued.
    Queue(Queued),
}

/// Why a maintenance's waiting nodes stay queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    /// The nodes waiting for admission.
    pub waiting: Vec<String>,
    /// The budget that holds it.
    pub budget: String,
    /// Why.
    pub reason: QueueReason,
}

/// Why a budget holds a maintenance back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueReason {
    /// It selects `selects` of the budget's nodes, more than the `allowed` ever allowed at once.
    TooLarge {
        /// Its nodes in the budget.
        selects: usize,
        /// The budget's resolved `maxUnavailable`.
        allowed: usize,
    },
    /// The budget's windows are closed; the next opens at `next_open`.
    OutsideWindow {
        /// When the next window opens.
        next_open: Option<Timestamp>,
    },
    /// The budget has no room: `unavailable` of its nodes (with why) are unavailable and it
    /// allows `allowed`; the maintenance would add `adds`.
    BudgetExhausted {
        /// The budget's unavailable nodes, each with why.
        unavailable: Vec<(String, String)>,
        /// The budget's resolved `maxUnavailable`.
        allowed: usize,
        /// How many nodes it would add.
        adds: usize,
    },
    /// An older maintenance waits for room in the budget first (whether or not it has room now).
    Behind {
        /// The youngest of the older maintenances waiting for it: the one just ahead.
        older: String,
    },
    /// The budget's spec is invalid (the problem as the webhook words it).
    InvalidBudget(String),
}

impl QueueReason {
    /// The condition reason (PascalCase).
    pub fn reason(&self) -> &'static str {
        match self {
            QueueReason::TooLarge { .. } => REASON_TOO_LARGE,
            QueueReason::OutsideWindow { .. } => REASON_OUTSIDE_WINDOW,
            QueueReason::BudgetExhausted { .. }
            | QueueReason::Behind { .. }
            | QueueReason::InvalidBudget(_) => REASON_BUDGET_EXHAUSTED,
        }
    }

    /// How strongly it holds: the most permanent reason is reported when several budgets hold
    /// the same maintenance.
    fn rank(&self) -> u8 {
        match self {
            QueueReason::InvalidBudget(_) => 0,
            QueueReason::TooLarge { .. } => 1,
            QueueReason::OutsideWindow { .. } => 2,
            QueueReason::BudgetExhausted { .. } => 3,
            QueueReason::Behind { .. } => 4,
        }
    }

    /// Whether the maintenance keeps its place in the budgets it needs: only while it merely
    /// waits for room.
    fn keeps_place(&self) -> bool {
        matches!(
            self,
            QueueReason::BudgetExhausted { .. } | QueueReason::Behind { .. }
        )
    }
}

impl Queued {
    /// The condition reason (PascalCase).
    pub fn reason(&self) -> &'static str {
        self.reason.reason()
    }

    /// A sentence for the `Admitted` condition, each waiting node's `drainMessage` and events:
    /// which budget holds the maintenance and why (the nodes that use it up).
    pub fn message(&self) -> String {
        let budget = &self.budget;
        match &self.reason {
            QueueReason::TooLarge { selects, allowed } => format!(
                "Queued: MaintenanceBudget {budget} allows {allowed} unavailable node{} and this maintenance selects {selects} of its nodes, so it can never be admitted; split it (kubectl evictord rollout does) or raise the budget",
                plural(*allowed)
            ),
            QueueReason::OutsideWindow { next_open: Some(t) } => format!(
                "Queued: MaintenanceBudget {budget} is outside its maintenance windows; the next opens at {t}"
            ),
            QueueReason::OutsideWindow { next_open: None } => {
                format!("Queued: MaintenanceBudget {budget} is outside its maintenance windows")
            }
            QueueReason::BudgetExhausted {
                unavailable,
                allowed,
                adds,
            } => format!(
                "Queued: MaintenanceBudget {budget} allows {allowed} unavailable node{}, {} {} unavailable ({}), and this maintenance would add {adds}",
                plural(*allowed),
                unavailable.len(),
                if unavailable.len() == 1 { "is" } else { "are" },
                named(unavailable.iter().map(|(n, why)| format!("{n}: {why}")))
            ),
            QueueReason::Behind { older } => format!(
                "Queued: MaintenanceBudget {budget} is kept for the older maintenance {older}, which waits for room in it first"
            ),
            QueueReason::InvalidBudget(problem) => format!(
                "Queued: MaintenanceBudget {budget} is invalid and admits nothing until it is fixed: {problem}"
            ),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `a, b, c` or `a, b, c, d, e and 3 more`.
fn named(items: impl Iterator<Item = String>) -> String {
    let all: Vec<String> = items.collect();
    let shown = all[..all.len().min(MAX_NAMED_NODES)].join(", ");
    match all.len().saturating_sub(MAX_NAMED_NODES) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// The decisions of one pass, and what the budgets' statuses are made of.
#[derive(Clone, Debug, Default)]
pub struct AdmissionOutput {
    /// One per maintenance that wants admission, oldest first.
    pub verdicts: Vec<(String, Verdict)>,
    /// Per budget (in input order): the state of its windows at `now`.
    pub windows: Vec<WindowState>,
    /// Per node: why it is unavailable after this pass's admissions (the holding maintenance, or
    /// `None` for NotReady). Nodes not listed are available.
    pub unavailable: BTreeMap<String, Option<String>>,
}

impl AdmissionOutput {
    /// The verdict for the maintenance of that name.
    pub fn verdict(&self, name: &str) -> Option<&Verdict> {
        self.verdicts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

/// Decides which maintenances to admit now. See the module docs.
///
/// # Guarantees
/// After the admissions it returns, no open, valid budget has more unavailable nodes than it
/// allows unless it already had before (NotReady nodes, a budget lowered) — and then nothing that
/// adds to it is admitted. Maintenances that no budget selects are admitted at once.
pub fn admit(input: &AdmissionInput, now: Timestamp) -> AdmissionOutput {
    let windows: Vec<WindowState> = input
        .budgets
        .iter()
        .map(|b| match &b.spec {
            Ok(rules) => window_state(&rules.windows, now),
            Err(_) => WindowState::default(),
        })
        .collect();
    // The nodes of each budget.
    let members: Vec<BTreeSet<&str>> = input
        .budgets
        .iter()
        .map(|b| {
            input
                .nodes
                .iter()
                .filter(|n| b.selects(&n.name, &n.labels))
                .map(|n| n.name.as_str())
                .collect()
        })
        .collect();
    let mut unavailable = unavailable_nodes(input);
    let mut by_age: Vec<&MaintenanceState> = input.maintenances.iter().collect();
    by_age.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    // Budgets kept for older maintenances waiting for room: budget index → the youngest of them.
    let mut kept: BTreeMap<usize, &str> = BTreeMap::new();
    let mut verdicts = Vec::new();
    for m in by_age.into_iter().filter(|m| m.wants) {
        let waiting: BTreeSet<&str> = m
            .selected
            .iter()
            .map(String::as_str)
            .filter(|n| !m.admitted.contains(*n))
            .collect();
        if waiting.is_empty() && m.recorded {
            verdicts.push((m.name.clone(), Verdict::Settled));
            continue;
        }
        let adds: BTreeSet<&str> = waiting
            .iter()
            .copied()
            .filter(|n| !unavailable.contains_key(*n))
            .collect();
        let touched: Vec<usize> = (0..input.budgets.len())
            .filter(|&b| waiting.iter().any(|n| members[b].contains(n)))
            .collect();
        let mut holds: Vec<(usize, QueueReason)> = Vec::new();
        for &b in touched
            .iter()
            .filter(|&&b| adds.iter().any(|n| members[b].contains(n)))
        {
            let budget = &input.budgets[b];
            let rules = match &budget.spec {
                Ok(rules) => rules,
                Err(problem) => {
                    holds.push((b, QueueReason::InvalidBudget(problem.clone())));
                    continue;
                }
            };
            let allowed = rules.max_unavailable.allowed(members[b].len());
            let selects = m
                .selected
                .iter()
                .filter(|n| members[b].contains(n.as_str()))
                .count();
            let adds_here = adds.iter().filter(|n| members[b].contains(*n)).count();
            let now_unavailable: Vec<(String, String)> = members[b]
                .iter()
                .filter_map(|n| {
                    unavailable.get(*n).map(|why| {
                        let why = why
                            .as_ref()
                            .map_or_else(|| "NotReady".to_string(), |m| format!("maintenance {m}"));
                        (n.to_string(), why)
                    })
                })
                .collect();
            if let Some(reason) = too_large(rules, members[b].len(), selects) {
                holds.push((b, reason));
            } else if !windows[b].open {
                holds.push((
                    b,
                    QueueReason::OutsideWindow {
                        next_open: windows[b].next_open,
                    },
                ));
            } else if let Some(older) = kept.get(&b) {
                // Behind an older one, full or not: its message names that one, not the
                // unavailable nodes, so it stays the same while the queue moves (a rollout
                // of N nodes wrote every queued maintenance's status at each turn: N² writes).
                holds.push((
                    b,
                    QueueReason::Behind {
                        older: older.to_string(),
                    },
                ));
            } else if now_unavailable.len() + adds_here > allowed {
                holds.push((
                    b,
                    QueueReason::BudgetExhausted {
                        unavailable: now_unavailable,
                        allowed,
                        adds: adds_here,
                    },
                ));
            }
        }
        let verdict = match holds.into_iter().min_by_key(|(b, r)| (r.rank(), *b)) {
            None => {
                for n in &adds {
                    unavailable.insert(n.to_string(), Some(m.name.clone()));
                }
                Verdict::Admit {
                    nodes: waiting.iter().map(|n| n.to_string()).collect(),
                    budgets: touched
                        .iter()
                        .map(|&b| input.budgets[b].name.clone())
                        .collect(),
                }
            }
            Some((b, reason)) => {
                if reason.keeps_place() {
                    // The youngest waiting one: the next in line waits behind it.
                    for &t in &touched {
                        kept.insert(t, m.name.as_str());
                    }
                }
                Verdict::Queue(Queued {
                    waiting: waiting.iter().map(|n| n.to_string()).collect(),
                    budget: input.budgets[b].name.clone(),
                    reason,
                })
            }
        };
        verdicts.push((m.name.clone(), verdict));
    }
    AdmissionOutput {
        verdicts,
        windows,
        unavailable,
    }
}

/// `TooLarge` when a maintenance selecting `selects` of a budget's `members` nodes can never be
/// admitted: the budget never allows that many at once. Shared with the webhook's warning (rule
/// N7) and the plugin's refusal.
pub fn too_large(rules: &BudgetRules, members: usize, selects: usize) -> Option<QueueReason> {
    let allowed = rules.max_unavailable.allowed(members);
    (selects > allowed).then_some(QueueReason::TooLarge { selects, allowed })
}

/// Every unavailable node before this pass: held by a holding maintenance (the oldest, when
/// several hold it), else NotReady (`None`).
fn unavailable_nodes(input: &AdmissionInput) -> BTreeMap<String, Option<String>> {
    let mut holding: Vec<&MaintenanceState> =
        input.maintenances.iter().filter(|m| m.holding).collect();
    holding.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    let mut out = BTreeMap::new();
    for n in &input.nodes {
        if let Some(m) = holding.iter().find(|m| m.admitted.contains(&n.name)) {
            out.insert(n.name.clone(), Some(m.name.clone()));
        } else if !n.ready {
            out.insert(n.name.clone(), None);
        }
    }
    out
}
