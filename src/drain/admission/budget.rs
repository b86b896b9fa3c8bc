//! A MaintenanceBudget as the admission reads it: the nodes it selects, how many of them may be
//! unavailable (`maxUnavailable` resolved), and its windows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::window::{Window, parse_windows};
use crate::api::MaintenanceBudget;
use crate::selector::{node_selector_matches, validate_node_selector};

/// `spec.maxUnavailable`, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// A number of nodes (at least 1).
    Nodes(u32),
    /// A percentage (1–100) of the selected nodes, rounded up, at least 1 node.
    Percent(u32),
}

impl Default for MaxUnavailable {
    fn default() -> Self {
        MaxUnavailable::Nodes(1)
    }
}

impl MaxUnavailable {
    /// Parses `spec.maxUnavailable` (absent: 1).
    ///
    /// # Errors
    /// An integer below 1, or a string that is not a percentage from 1% to 100%.
    pub fn parse(value: Option<&IntOrString>) -> Result<Self, String> {
        match value {
            None => Ok(Self::default()),
            Some(IntOrString::Int(n)) => u32::try_from(*n)
                .ok()
                .filter(|n| *n >= 1)
                .map(MaxUnavailable::Nodes)
                .ok_or_else(|| {
                    format!("spec.maxUnavailable: {n} is below 1; at least one node must be allowed")
                }),
            Some(IntOrString::String(s)) => s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|p| (1..=100).contains(p))
                .map(MaxUnavailable::Percent)
                .ok_or_else(|| {
                    format!(
                        "spec.maxUnavailable: {s:?} is neither an integer of at least 1 nor a percentage from 1% to 100%"
                    )
                }),
        }
    }

    /// How many of `selected` nodes may be unavailable at once (at least 1).
    pub fn allowed(self, selected: usize) -> usize {
        match self {
            MaxUnavailable::Nodes(n) => n as usize,
            MaxUnavailable::Percent(p) => (selected * p as usize).div_ceil(100).max(1),
        }
    }
}

/// One MaintenanceBudget, parsed.
#[derive(Clone, Debug)]
pub struct BudgetInput {
    /// Name (cluster-scoped).
    pub name: String,
    /// `spec.nodeSelector`; `None` selects every node.
    pub selector: Option<NodeSelector>,
    /// The spec as far as it is valid, or what is wrong with it. An invalid budget (written
    /// while the webhook was down, or before it knew the rules) admits nothing new: exceeding an
    /// administrator's intended budget is worse than waiting for the fix.
    pub spec: Result<BudgetRules, String>,
}

/// The rules of a valid budget.
#[derive(Clone, Debug)]
pub struct BudgetRules {
    /// `spec.maxUnavailable`.
    pub max_unavailable: MaxUnavailable,
    /// `spec.windows`, parsed (none: always open).
    pub windows: Vec<Window>,
}

impl BudgetInput {
    /// The admission's view of a budget object.
    pub fn of(budget: &MaintenanceBudget) -> Self {
        BudgetInput {
            name: budget.metadata.name.clone().unwrap_or_default(),
            selector: budget.spec.node_selector.clone(),
            spec: budget_rules(budget),
        }
    }

    /// True when the budget covers the node of this name and labels.
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.selector
            .as_ref()
            .is_none_or(|s| node_selector_matches(s, name, labels))
    }
}

/// The rules of a budget, or the first problem with its spec (as the webhook words it).
///
/// # Errors
/// A malformed node selector, `maxUnavailable` or window.
pub fn budget_rules(budget: &MaintenanceBudget) -> Result<BudgetRules, String> {
    if let Some(selector) = &budget.spec.node_selector
        && let Some(problem) = validate_node_selector(selector, "spec.nodeSelector")
            .into_iter()
            .next()
    {
        return Err(problem);
    }
    Ok(BudgetRules {
        max_unavailable: MaxUnavailable::parse(budget.spec.max_unavailable.as_ref())?,
        windows: parse_windows(&budget.spec.windows)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rstest::rstest]
    #[case::absent(None, Ok(MaxUnavailable::Nodes(1)))]
    #[case::two(Some(IntOrString::Int(2)), Ok(MaxUnavailable::Nodes(2)))]
    #[case::half(Some(IntOrString::String("50%".into())), Ok(MaxUnavailable::Percent(50)))]
    #[case::all(Some(IntOrString::String("100%".into())), Ok(MaxUnavailable::Percent(100)))]
    #[case::zero(Some(IntOrString::Int(0)), Err("below 1"))]
    #[case::negative(Some(IntOrString::Int(-3)), Err("below 1"))]
    #[case::zero_percent(Some(IntOrString::String("0%".into())), Err("neither"))]
    #[case::over_percent(Some(IntOrString::String("101%".into())), Err("neither"))]
    #[case::number_string(Some(IntOrString::String("2".into())), Err("neither"))]
    #[case::fraction(Some(IntOrString::String("2.5%".into())), Err("neither"))]
    fn max_unavailable_rows(
        #[case] value: Option<IntOrString>,
        #[case] want: Result<MaxUnavailable, &str>,
    ) {
        match (MaxUnavailable::parse(value.as_ref()), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(e), Err(part)) => {
                assert!(e.starts_with("spec.maxUnavailable: "), "{e}");
                assert!(e.contains(part), "{e}");
            }
            (got, want) => panic!("{got:?} != {want:?}"),
        }
    }

    #[rstest::rstest]
    #[case::nodes(MaxUnavailable::Nodes(2), 6, 2)]
    #[case::nodes_above_the_pool(MaxUnavailable::Nodes(9), 6, 9)]
    #[case::half_of_six(MaxUnavailable::Percent(50), 6, 3)]
    #[case::rounded_up(MaxUnavailable::Percent(10), 11, 2)]
    #[case::at_least_one(MaxUnavailable::Percent(1), 5, 1)]
    #[case::empty_pool(MaxUnavailable::Percent(50), 0, 1)]
    fn allowed_rows(#[case] max: MaxUnavailable, #[case] selected: usize, #[case] want: usize) {
        assert_eq!(max.allowed(selected), want);
    }
}
