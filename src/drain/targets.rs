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
