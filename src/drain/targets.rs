//! Drain targets (SPEC 3.4): what a plan prefix targets, and the lattice of target lists that
//! intersecting maintenances are resolved in.
//!
//! A target list is read as a function "pod type × label selector → highest targeted priority".
//! For each pod type there is a selector-less threshold (`base`) and, for each selector named in
//! the list, a threshold that is never below `base` (a selector target can only widen what the
//! selector-less target already takes). Comparing, meeting and joining lists is done point-wise
//! on these thresholds. Selectors are compared syntactically (after canonicalisation), so the
//! order is *sound*: `covers(a, b)` implies every pod matched by `b` is matched by `a`; two
//! different selectors that happen to overlap are simply treated as unrelated.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{DrainPlanEntry, PodType};
use crate::selector::label_selector_matches;

/// Highest targeted priority; `None` targets nothing (below every priority).
type Threshold = Option<i32>;

/// The targets of one pod type.
#[derive(Clone, Debug, Default, PartialEq)]
struct TypeTargets {
    /// Selector-less threshold.
    base: Threshold,
    /// Per selector (by canonical key): the selector and its threshold, already raised to `base`.
    selectors: BTreeMap<String, (LabelSelector, Threshold)>,
}

impl TypeTargets {
    /// Threshold for pods matching the selector with this key: a selector this list does not
    /// name is still covered by the selector-less target.
    fn threshold(&self, key: &str) -> Threshold {
        self.selectors
            .get(key)
            .map_or(self.base, |(_, t)| (*t).max(self.base))
    }

    fn is_empty(&self) -> bool {
        self.base.is_none() && self.selectors.values().all(|(_, t)| t.is_none())
    }

    /// Point-wise combination over the union of both selector sets.
    fn combine(&self, other: &Self, pick: fn(Threshold, Threshold) -> Threshold) -> Self {
        let base = pick(self.base, other.base);
        let mut selectors = BTreeMap::new();
        for (key, (selector, _)) in self.selectors.iter().chain(&other.selectors) {
            if selectors.contains_key(key) {
                continue;
            }
            let t = pick(self.threshold(key), other.threshold(key));
            if t.is_some() {
                selectors.insert(key.clone(), (selector.clone(), t.max(base)));
            }
        }
        TypeTargets { base, selectors }
    }

    fn covers(&self, other: &Self) -> bool {
        self.base >= other.base
            && other
                .selectors
                .keys()
                .all(|k| self.threshold(k) >= other.threshold(k))
    }
}

/// A target list in normal form; see the module docs. Built from any list of entries (also
/// non-canonical ones read back from a status), turned back into the canonical list with
/// [`TargetSet::to_entries`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetSet {
    types: BTreeMap<PodType, TypeTargets>,
}

impl TargetSet {
    /// Reads a list of targets (or plan entries): per type the highest selector-less priority, per
    /// selector the highest priority of its entries, raised to the selector-less one.
    pub fn from_entries(entries: &[DrainPlanEntry]) -> Self {
        let mut types: BTreeMap<PodType, TypeTargets> = BTreeMap::new();
        for e in entries {
            let tt = types.entry(e.pod_type).or_default();
            match canonical_selector(e.pod_selector.as_ref()) {
                None => tt.base = tt.base.max(Some(e.pod_priority)),
                Some((key, selector)) => {
                    let slot = tt.selectors.entry(key).or_insert((selector, None));
                    slot.1 = slot.1.max(Some(e.pod_priority));
                }
            }
        }
        for tt in types.values_mut() {
            let base = tt.base;
            for (_, t) in tt.selectors.values_mut() {
                *t = (*t).max(base);
            }
        }
        TargetSet { types }
    }

    /// The canonical list: pod types in drain order (Default, DaemonSet, Static); per type the
    /// selector-less target first, then one target per selector ordered by its canonical key.
    /// This is the order the KEP's example statuses show.
    pub fn to_entries(&self) -> Vec<DrainPlanEntry> {
        let mut out = Vec::new();
        for (pod_type, tt) in &self.types {
            if let Some(p) = tt.base {
                out.push(DrainPlanEntry {
                    pod_priority: p,
                    pod_type: *pod_type,
                    pod_selector: None,
                });
            }
            for (selector, t) in tt.selectors.values() {
                if let Some(p) = t {
                    out.push(DrainPlanEntry {
                        pod_priority: *p,
                        pod_type: *pod_type,
                        pod_selector: Some(selector.clone()),
                    });
                }
            }
        }
        out
    }

    /// True when nothing is targeted.
    pub fn is_empty(&self) -> bool {
        self.types.values().all(TypeTargets::is_empty)
    }

    /// "At least as powerful": every pod `other` matches, `self` matches too.
    pub fn covers(&self, other: &Self) -> bool {
        let none = TypeTargets::default();
        other
            .types
            .iter()
            .all(|(t, theirs)| self.types.get(t).unwrap_or(&none).covers(theirs))
    }

    /// Same pods targeted (each covers the other), whatever the spelling of the lists.
    pub fn equivalent(&self, other: &Self) -> bool {
        self.covers(other) && other.covers(self)
    }

    /// The most powerful list that both cover (greatest lower bound).
    pub fn meet(&self, other: &Self) -> Self {
        self.combine(other, std::cmp::min)
    }

    /// The least powerful list that covers both (least upper bound): "never move backwards".
    pub fn join(&self, other: &Self) -> Self {
        self.combine(other, std::cmp::max)
    }

    fn combine(&self, other: &Self, pick: fn(Threshold, Threshold) -> Threshold) -> Self {
        let none = TypeTargets::default();
        let mut types = BTreeMap::new();
        for t in self.types.keys().chain(other.types.keys()) {
            let combined = self
                .types
                .get(t)
                .unwrap_or(&none)
                .combine(other.types.get(t).unwrap_or(&none), pick);
            if !combined.is_empty() {
                types.insert(*t, combined);
            }
        }
        TargetSet { types }
    }

    /// True when a pod of this type, priority and labels is targeted.
    pub fn matches(
        &self,
        pod_type: PodType,
        priority: i32,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let Some(tt) = self.types.get(&pod_type) else {
            return false;
        };
        tt.base.is_some_and(|p| priority <= p)
            || tt
                .selectors
                .values()
                .any(|(s, t)| t.is_some_and(|p| priority <= p) && label_selector_matches(s, labels))
    }
}

/// SPEC 3.4: the targets of a plan whose entries `0..=k` have been reached (`k` past the end
/// means the whole plan). Per pod type reached: one selector-less target at the highest
/// selector-less priority of the prefix; for each selector used anywhere in the plan for that
/// type, one target at the higher of that and the selector's own highest priority in the prefix.
pub fn targets_at(plan: &[DrainPlanEntry], k: usize) -> Vec<DrainPlanEntry> {
    target_set_at(plan, k).to_entries()
}

/// [`targets_at`] in normal form.
pub fn target_set_at(plan: &[DrainPlanEntry], k: usize) -> TargetSet {
    let prefix = &plan[..plan.len().min(k.saturating_add(1))];
    let mut set = TargetSet::from_entries(prefix);
    // Selectors named later in the plan already get a target (at the selector-less priority)
    // once their type is reached, as in the KEP's "PodTypes and Label Selectors Progression".
    for e in &plan[prefix.len()..] {
        let (Some(tt), Some((key, selector))) = (
            set.types.get_mut(&e.pod_type),
            canonical_selector(e.pod_selector.as_ref()),
        ) else {
            continue;
        };
        let base = tt.base;
        tt.selectors.entry(key).or_insert((selector, base));
    }
    set
}

/// "Targets `a` are at least as powerful as targets `b`": every pod matched by `b` is matched by `a`.
pub fn covers(a: &[DrainPlanEntry], b: &[DrainPlanEntry]) -> bool {
    TargetSet::from_entries(a).covers(&TargetSet::from_entries(b))
}

/// The least powerful of several target lists (their meet), in canonical order; `None` for no lists.
pub fn least_powerful<'a>(
    lists: impl IntoIterator<Item = &'a [DrainPlanEntry]>,
) -> Option<Vec<DrainPlanEntry>> {
    lists
        .into_iter()
        .map(TargetSet::from_entries)
        .reduce(|a, b| a.meet(&b))
        .map(|s| s.to_entries())
}

/// Targets never move backwards: the least powerful list covering both what a node already
/// reached and what it would get now (their join), in canonical order.
pub fn never_backwards(reached: &[DrainPlanEntry], now: &[DrainPlanEntry]) -> Vec<DrainPlanEntry> {
    TargetSet::from_entries(reached)
        .join(&TargetSet::from_entries(now))
        .to_entries()
}

/// A selector in canonical form with its key, or `None` when it matches every pod (absent or
/// empty), which makes it the same as no selector.
fn canonical_selector(selector: Option<&LabelSelector>) -> Option<(String, LabelSelector)> {
    let s = selector?;
    let labels = s.match_labels.clone().unwrap_or_default();
    let mut exprs = s.match_expressions.clone().unwrap_or_default();
    for e in &mut exprs {
        if let Some(v) = e.values.as_mut() {
            v.sort();
            v.dedup();
        }
    }
    exprs.sort_by(|a, b| (&a.key, &a.operator, &a.values).cmp(&(&b.key, &b.operator, &b.values)));
    exprs.dedup();
    if labels.is_empty() && exprs.is_empty() {
        return None;
    }
    let mut key: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    key.extend(exprs.iter().map(|e| {
        format!(
            "{} {} ({})",
            e.key,
            e.operator,
            e.values.as_deref().unwrap_or_default().join(",")
        )
    }));
    let canonical = LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    };
    Some((key.join(","), canonical))
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::drain::fixtures::{MAX, WithSelector, d, ds, label_map, st};

    const PG: &[(&str, &str)] = &[("app", "postgres")];

    fn kep_a() -> Vec<DrainPlanEntry> {
        vec![d(5000), d(15000), ds(3000)]
    }

    fn kep_five() -> Vec<DrainPlanEntry> {
        vec![d(1000), d(2000).sel(PG), d(MAX), ds(1000), ds(MAX), st(MAX)]
    }

    #[rstest]
    #[case::first_entry(kep_a(), 0, vec![d(5000)])]
    #[case::second_entry_replaces_lower_priority(kep_a(), 1, vec![d(15000)])]
    #[case::next_type_added_after_previous(kep_a(), 2, vec![d(15000), ds(3000)])]
    #[case::past_the_end_is_the_whole_plan(kep_a(), 99, vec![d(15000), ds(3000)])]
    #[case::empty_plan(vec![], 0, vec![])]
    #[case::selector_used_later_listed_at_base(kep_five(), 0, vec![d(1000), d(1000).sel(PG)])]
    #[case::selector_own_entry_raises_it(kep_five(), 1, vec![d(1000), d(2000).sel(PG)])]
    #[case::base_raises_selector(kep_five(), 2, vec![d(MAX), d(MAX).sel(PG)])]
    #[case::selector_of_unreached_type_not_listed(vec![d(100), ds(100).sel(PG)], 0, vec![d(100)])]
    #[case::selector_only_type(vec![ds(100).sel(PG)], 0, vec![ds(100).sel(PG)])]
    #[case::selector_without_base_yet(vec![d(100).sel(PG), d(200)], 0, vec![d(100).sel(PG)])]
    #[case::selector_entry_below_base(vec![d(5000), d(1000).sel(PG)], 1, vec![d(5000), d(5000).sel(PG)])]
    #[case::selectors_in_canonical_order(
        vec![d(100).sel(&[("app", "b")]), d(100).sel(&[("app", "a")]), d(200)],
        2,
        vec![d(200), d(200).sel(&[("app", "a")]), d(200).sel(&[("app", "b")])],
    )]
    #[case::empty_selector_is_no_selector(vec![d(100).sel(&[])], 0, vec![d(100)])]
    fn targets_at_prefix(
        #[case] plan: Vec<DrainPlanEntry>,
        #[case] k: usize,
        #[case] want: Vec<DrainPlanEntry>,
    ) {
        assert_eq!(targets_at(&plan, k), want);
    }

    #[rstest]
    #[case::equal(vec![d(5000)], vec![d(5000)], true)]
    #[case::higher_priority(vec![d(10000)], vec![d(5000)], true)]
    #[case::lower_priority(vec![d(5000)], vec![d(10000)], false)]
    #[case::anything_covers_nothing(vec![], vec![], true)]
    #[case::nothing_covers_something(vec![], vec![d(1)], false)]
    #[case::base_covers_selector_below_it(vec![d(200)], vec![d(100).sel(PG)], true)]
    #[case::selector_does_not_cover_base(vec![d(100), d(500).sel(PG)], vec![d(200)], false)]
    #[case::selector_covers_same_selector(vec![d(100), d(500).sel(PG)], vec![d(300).sel(PG)], true)]
    #[case::other_selector_unrelated(vec![d(100), d(500).sel(&[("app", "x")])], vec![d(300).sel(PG)], false)]
    #[case::unreached_type(vec![d(MAX)], vec![ds(1)], false)]
    #[case::later_type_reached(vec![d(MAX), ds(1)], vec![d(MAX)], true)]
    #[case::redundant_selector_target_is_equivalent(vec![d(1000)], vec![d(1000), d(1000).sel(PG)], true)]
    #[case::non_canonical_list(vec![d(50), d(100)], vec![d(100)], true)]
    fn covers_rows(
        #[case] a: Vec<DrainPlanEntry>,
        #[case] b: Vec<DrainPlanEntry>,
        #[case] want: bool,
    ) {
        assert_eq!(covers(&a, &b), want);
    }

    #[rstest]
    #[case::kep_node_one(vec![d(5000)], vec![d(10000)], vec![d(5000)], vec![d(10000)])]
    #[case::type_only_in_one(vec![d(15000), ds(3000)], vec![d(15000)], vec![d(15000)], vec![d(15000), ds(3000)])]
    #[case::same_types(vec![d(15000), ds(3000)], vec![d(15000), ds(4000)], vec![d(15000), ds(3000)], vec![d(15000), ds(4000)])]
    #[case::incomparable(
        vec![d(1000), d(2000).sel(PG)],
        vec![d(1500)],
        vec![d(1000), d(1500).sel(PG)],
        vec![d(1500), d(2000).sel(PG)],
    )]
    #[case::selector_kept(vec![d(1000), d(1000).sel(PG)], vec![d(1000)], vec![d(1000), d(1000).sel(PG)], vec![d(1000), d(1000).sel(PG)])]
    fn meet_and_join(
        #[case] a: Vec<DrainPlanEntry>,
        #[case] b: Vec<DrainPlanEntry>,
        #[case] meet: Vec<DrainPlanEntry>,
        #[case] join: Vec<DrainPlanEntry>,
    ) {
        assert_eq!(
            least_powerful([a.as_slice(), b.as_slice()]),
            Some(meet.clone())
        );
        assert_eq!(least_powerful([b.as_slice(), a.as_slice()]), Some(meet));
        assert_eq!(never_backwards(&a, &b), join);
        assert_eq!(never_backwards(&b, &a), join);
    }

    #[test]
    fn least_powerful_of_none_and_of_three() {
        assert_eq!(least_powerful([]), None);
        let (a, b, c) = (vec![d(15000)], vec![d(10000)], vec![d(2000)]);
        assert_eq!(
            least_powerful([a.as_slice(), b.as_slice(), c.as_slice()]),
            Some(vec![d(2000)])
        );
        assert_eq!(
            never_backwards(&b, &c),
            vec![d(10000)],
            "the KEP's maintenance-c on node one"
        );
    }

    /// Meet is the greatest lower bound and join the least upper bound, over a sample of lists.
    #[test]
    fn lattice_laws() {
        let x: &[(&str, &str)] = &[("app", "x")];
        let samples: Vec<TargetSet> = [
            vec![],
            vec![d(100)],
            vec![d(1000)],
            vec![d(1000), d(2000).sel(PG)],
            vec![d(1500)],
            vec![d(100).sel(x)],
            vec![d(MAX), ds(100)],
            vec![d(500), d(900).sel(x), d(700).sel(PG)],
        ]
        .iter()
        .map(|l| TargetSet::from_entries(l))
        .collect();
        for a in &samples {
            for b in &samples {
                let (m, j) = (a.meet(b), a.join(b));
                assert!(a.covers(&m) && b.covers(&m), "meet below {a:?} {b:?}");
                assert!(j.covers(a) && j.covers(b), "join above {a:?} {b:?}");
                assert!(m.equivalent(&b.meet(a)) && j.equivalent(&b.join(a)));
                for c in &samples {
                    if a.covers(c) && b.covers(c) {
                        assert!(
                            m.covers(c),
                            "meet of {a:?} {b:?} is the greatest below, {c:?}"
                        );
                    }
                    if c.covers(a) && c.covers(b) {
                        assert!(
                            c.covers(&j),
                            "join of {a:?} {b:?} is the least above, {c:?}"
                        );
                    }
                }
            }
        }
    }

    #[rstest]
    #[case::below_base(PodType::Default, 900, &[], true)]
    #[case::at_base(PodType::Default, 1000, &[], true)]
    #[case::above_base(PodType::Default, 1500, &[], false)]
    #[case::selector_matches(PodType::Default, 1500, PG, true)]
    #[case::above_selector(PodType::Default, 2500, PG, false)]
    #[case::other_type(PodType::DaemonSet, 1, PG, false)]
    fn matches_pods(
        #[case] t: PodType,
        #[case] priority: i32,
        #[case] labels: &[(&str, &str)],
        #[case] want: bool,
    ) {
        let set = TargetSet::from_entries(&[d(1000), d(2000).sel(PG)]);
        assert_eq!(set.matches(t, priority, &label_map(labels)), want);
    }
}
