//! The canonical drain plan: the twelve default entries every plan contains (SPEC 3.2 M2), the
//! canonical order of entries, and rule N3 (the plan is in that order, without duplicates).

use std::cmp::Ordering;

use crate::api::{DrainPlanEntry, PodType};

/// Priorities of the default entries, inserted for every pod type: the highest user-defined
/// priority, `system-cluster-critical`, `system-node-critical` and the maximum value.
pub const DEFAULT_DRAIN_PRIORITIES: [i32; 4] =
    [1_000_000_000, 2_000_000_000, 2_000_001_000, i32::MAX];

/// The twelve default entries, selector-less, in canonical order.
pub fn default_drain_plan() -> Vec<DrainPlanEntry> {
    PodType::ALL
        .iter()
        .flat_map(|&pod_type| {
            DEFAULT_DRAIN_PRIORITIES
                .iter()
                .map(move |&pod_priority| DrainPlanEntry {
                    pod_priority,
                    pod_type,
                    pod_selector: None,
                })
        })
        .collect()
}

/// The canonical order of drain plan entries: pod type (Default, DaemonSet, Static), then
/// priority ascending, then entries with a `podSelector` before those without (the KEP's
/// "concrete selectors are executed first"). Entries that differ only in their selector compare
/// equal, so a stable sort keeps the user's order among them.
pub fn drain_plan_order(a: &DrainPlanEntry, b: &DrainPlanEntry) -> Ordering {
    a.pod_type
        .cmp(&b.pod_type)
        .then(a.pod_priority.cmp(&b.pod_priority))
        .then(a.pod_selector.is_none().cmp(&b.pod_selector.is_none()))
}

/// The plan with every missing default entry inserted, stably sorted into canonical order.
///
/// # Guarantees
/// Duplicates are kept (rule N3 reports them rather than the mutation silently dropping user
/// input); applying it twice gives the same plan.
pub fn canonical_drain_plan(plan: &[DrainPlanEntry]) -> Vec<DrainPlanEntry> {
    let mut canonical = plan.to_vec();
    canonical.extend(missing_default_entries(plan));
    canonical.sort_by(drain_plan_order);
    canonical
}

/// The default entries the plan lacks, in canonical order.
pub fn missing_default_entries(plan: &[DrainPlanEntry]) -> Vec<DrainPlanEntry> {
    default_drain_plan()
        .into_iter()
        .filter(|d| !plan.contains(d))
        .collect()
}

/// `Type/priority`, with ` (podSelector)` when the entry has one, for messages.
pub(super) fn describe_entry(entry: &DrainPlanEntry) -> String {
    match entry.pod_selector {
        Some(_) => format!(
            "{}/{} (with podSelector)",
            entry.pod_type, entry.pod_priority
        ),
        None => format!("{}/{}", entry.pod_type, entry.pod_priority),
    }
}

/// Rule N3, order: every entry is in canonical order relative to the next one.
///
/// # Errors
/// A message naming the first pair out of order and the order to follow.
pub(super) fn check_canonical_order(plan: &[DrainPlanEntry]) -> Result<(), String> {
    let Some(i) = plan
        .windows(2)
        .position(|w| drain_plan_order(&w[0], &w[1]) == Ordering::Greater)
    else {
        return Ok(());
    };
    Err(format!(
        "spec.drainPlan is not in canonical order (rule N3): spec.drainPlan[{i}] ({}) must come after \
         spec.drainPlan[{}] ({}); order entries by podType Default, DaemonSet, Static, then podPriority \
         ascending, then entries with a podSelector before those without",
        describe_entry(&plan[i]),
        i + 1,
        describe_entry(&plan[i + 1]),
    ))
}

/// Rule N3, duplicates: no two entries have the same type, priority and selector.
///
/// # Errors
/// A message naming the first duplicate and the entry it repeats.
pub(super) fn check_no_duplicates(plan: &[DrainPlanEntry]) -> Result<(), String> {
    for (j, later) in plan.iter().enumerate() {
        if let Some(i) = plan[..j].iter().position(|earlier| earlier == later) {
            return Err(format!(
                "spec.drainPlan[{j}] duplicates spec.drainPlan[{i}] ({}) (rule N3: entries must differ in \
                 podType, podPriority or podSelector); remove one of them",
                describe_entry(later),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::node_maintenance::fixtures::{EntryBuilder, entry};

    #[test]
    fn default_plan_is_twelve_canonical_entries() {
        let plan = default_drain_plan();
        assert_eq!(plan.len(), 12);
        assert!(check_canonical_order(&plan).is_ok());
        assert_eq!(plan[0], entry(PodType::Default, 1_000_000_000));
        assert_eq!(plan[11], entry(PodType::Static, i32::MAX));
    }

    #[test]
    fn order_is_type_then_priority_then_selector_first() {
        let by_type = (entry(PodType::Static, 0), entry(PodType::DaemonSet, 5));
        assert_eq!(drain_plan_order(&by_type.0, &by_type.1), Ordering::Greater);
        let by_priority = (entry(PodType::Default, 10), entry(PodType::Default, 5));
        assert_eq!(
            drain_plan_order(&by_priority.0, &by_priority.1),
            Ordering::Greater
        );
        let plain = entry(PodType::Default, 5);
        let selected = entry(PodType::Default, 5).selector(&[("app", "db")]);
        assert_eq!(drain_plan_order(&selected, &plain), Ordering::Less);
        assert_eq!(
            drain_plan_order(
                &selected,
                &entry(PodType::Default, 5).selector(&[("app", "web")])
            ),
            Ordering::Equal
        );
    }

    #[test]
    fn canonical_plan_inserts_missing_defaults_and_sorts_stably() {
        let user = vec![
            entry(PodType::DaemonSet, 1_000_000_000),
            entry(PodType::Default, 5000).selector(&[("app", "web")]),
            entry(PodType::Default, 5000),
            entry(PodType::Default, 5000).selector(&[("app", "db")]),
            entry(PodType::Default, -10),
        ];
        let plan = canonical_drain_plan(&user);
        assert_eq!(plan.len(), 5 + 11);
        assert_eq!(plan[0], entry(PodType::Default, -10));
        assert_eq!(
            plan[1],
            entry(PodType::Default, 5000).selector(&[("app", "web")])
        );
        assert_eq!(
            plan[2],
            entry(PodType::Default, 5000).selector(&[("app", "db")])
        );
        assert_eq!(plan[3], entry(PodType::Default, 5000));
        assert!(check_canonical_order(&plan).is_ok());
        assert_eq!(canonical_drain_plan(&plan), plan, "idempotent");
        assert_eq!(missing_default_entries(&user).len(), 11);
    }

    #[test]
    fn a_selector_entry_does_not_stand_in_for_a_default() {
        let user = vec![entry(PodType::Default, 1_000_000_000).selector(&[("app", "db")])];
        assert_eq!(missing_default_entries(&user).len(), 12);
    }
}
