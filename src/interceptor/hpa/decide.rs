//! The HPA interceptor's decisions, pure: what to do for a pod whose EvictionRequest has made it
//! active ([`on_activation`]), and how to bring an autoscaler back once the pods its surge covers
//! are gone or their requests ended ([`settle`]). A user's change of the limits is found by
//! [`taken_over`] in both.

use std::time::Duration;

use super::record::{AutoscalerFacts, HpaSurgeRecord, Limits};
use super::workload::WorkloadFacts;
use crate::interceptor::deployment::decide::{Fate, unobserved};
use crate::interceptor::deployment::surge::{Strategy, SurgedPod};

/// One write of an autoscaler: its limits `from` → `to` and the record (`None`: removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The limits read (tested by the patch).
    pub from: Limits,
    /// The limits to write.
    pub to: Limits,
    /// The record to write; `None` removes it.
    pub record: Option<HpaSurgeRecord>,
}

/// What the interceptor does for one active request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No surge: complete at once, saying why (the next interceptor decides).
    Skip(String),
    /// Record the pod in the surge and raise the limits (one patch).
    Join(Write),
    /// In progress: raised, or waiting for a place in the surge.
    Wait(String),
    /// The workload has the replicas the surge wants available: complete, the pod may go.
    Ready(String),
    /// Someone else changed `spec.minReplicas` during the surge: their floor wins. Write the
    /// abandoned record (and the ceiling back where only the surge raised it), complete saying so.
    Abandon {
        /// The write.
        write: Write,
        /// Why.
        message: String,
    },
    /// Someone else changed only `spec.maxReplicas`: their ceiling is the one to keep. Write the
    /// record with it, and look again.
    Adopt {
        /// The write.
        write: Write,
        /// What happened.
        message: String,
    },
}

/// Which limit someone else changed during a surge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// `spec.minReplicas`: the surge is abandoned.
    Floor,
    /// Only `spec.maxReplicas`: the surge goes on under their ceiling.
    Ceiling,
}

/// When the limits `now` are not those record `r` expects, someone else changed them: the
/// record after their change (their values become the ones to keep), the limits to write, and
/// which limit they took. Their floor ends the surge (every covered pod is abandoned; a ceiling
/// only the surge raised goes back, never below their floor); their ceiling alone replaces the
/// one to restore and the surge goes on (the API keeps a ceiling at or above the floor).
pub fn taken_over(now: Limits, r: &HpaSurgeRecord) -> Option<(HpaSurgeRecord, Limits, Taken)> {
    let expected = r.expected();
    if now.min != expected.min {
        let max = if now.max == expected.max {
            r.before.max.max(now.min)
        } else {
            now.max
        };
        let mut abandoned = r.abandoned.clone();
        abandoned.extend(r.pods.iter().cloned());
        let before = Limits { min: now.min, max };
        let next = HpaSurgeRecord {
            before,
            base: r.base,
            pods: Vec::new(),
            abandoned,
        };
        return Some((next, before, Taken::Floor));
    }
    if now.max != expected.max {
        let next = HpaSurgeRecord {
            before: Limits {
                min: r.before.min,
                max: now.max,
            },
            ..r.clone()
        };
        return Some((next, now, Taken::Ceiling));
    }
    None
}

fn stored(r: HpaSurgeRecord) -> Option<HpaSurgeRecord> {
    (!r.is_empty()).then_some(r)
}

/// Why the workload cannot surge now, if it cannot: a `Skip` whose message completes the
/// request, or a `Wait` while a Deployment's latest generation is not observed yet
/// ([`unobserved`]: the autoscaler scaling it back after a surge bumps it too). `own_surge`: the
/// record already covers pods (the autoscaler's own scaling bumped the Deployment's generation,
/// which is no rollout).
fn ineligible(
    h: &AutoscalerFacts,
    w: &WorkloadFacts,
    own_surge: bool,
    base: i32,
    unobserved_for: Duration,
) -> Option<Step> {
    let name = &h.autoscaler.name;
    let workload = &w.workload;
    let why = if w.replicas == 0 {
        format!("{workload} is scaled to zero: HorizontalPodAutoscaler {name} is off")
    } else if let Some(d) = &w.deployment {
        let f = &d.facts;
        let (max_surge, max_unavailable) = d.surge_at(base);
        if f.paused {
            format!("{workload} is paused")
        } else if f.strategy == Strategy::Recreate {
            format!("{workload} uses the Recreate strategy, which never runs extra pods")
        } else if let Some(wait) = unobserved(f, &workload.to_string(), own_surge, unobserved_for) {
            return Some(Step::Wait(wait));
        } else if f.updated_replicas < f.status_replicas
            || (!own_surge && f.observed_generation < f.generation)
        {
            format!("a rollout of {workload} is in progress")
        } else if max_surge == 0 {
            format!(
                "{workload} has maxSurge 0 (maxUnavailable {max_unavailable}): it accepts unavailable pods instead of extra ones"
            )
        } else {
            return None;
        }
    } else {
        return None;
    };
    Some(Step::Skip(format!("no surge: {why}")))
}

/// How many pods of the workload may surge together: a Deployment's `maxSurge` at `base`
/// replicas, one at a time for any other workload (it declares no surge room).
fn room(w: &WorkloadFacts, base: i32) -> i32 {
    w.deployment.as_ref().map_or(1, |d| d.surge_at(base).0)
}

/// The step for pod `pod`; `h` is the autoscaler of its workload `w`, a Deployment whose latest
/// generation has been seen unobserved for `unobserved_for` (zero when observed or no Deployment).
pub fn on_activation(
    h: &AutoscalerFacts,
    w: &WorkloadFacts,
    pod: &SurgedPod,
    unobserved_for: Duration,
) -> Step {
    let name = &h.autoscaler.name;
    let workload = &w.workload;
    let record = match &h.record {
        Ok(r) => r.clone(),
        Err(e) => {
            return Step::Skip(format!(
                "no surge: the annotation {} of HorizontalPodAutoscaler {name} is unreadable ({e}); remove it",
                super::RECORD_ANNOTATION
            ));
        }
    };
    if let Some(r) = &record
        && let Some((next, to, taken)) = taken_over(h.limits, r)
    {
        let write = Write {
            from: h.limits,
            to,
            record: stored(next),
        };
        return match taken {
            Taken::Floor => Step::Abandon {
                write,
                message: format!(
                    "no surge: minReplicas of HorizontalPodAutoscaler {name} was changed to {} by someone else \
                     during a surge (expected {}); their value stays",
                    h.limits.min,
                    r.expected().min
                ),
            },
            Taken::Ceiling => Step::Adopt {
                write,
                message: format!(
                    "maxReplicas of HorizontalPodAutoscaler {name} was changed to {} by someone else during a \
                     surge; their value stays",
                    h.limits.max
                ),
            },
        };
    }
    if record.as_ref().is_some_and(|r| r.abandoned(&pod.uid)) {
        return Step::Skip(format!(
            "no surge: minReplicas of HorizontalPodAutoscaler {name} was changed to {} by someone else during \
             the surge for this pod; their value stays",
            h.limits.min
        ));
    }
    match record {
        Some(r) if r.covers(&pod.uid) => {
            let want = r.want();
            if w.caught_up && w.replicas >= want && w.available >= want {
                Step::Ready(format!(
                    "{}; {workload} has {} available replicas (wanted {want}): the pod may go",
                    raised(name, &r),
                    w.available
                ))
            } else {
                Step::Wait(covered_wait(name, workload, &r))
            }
        }
        record => {
            let own_surge = record.as_ref().is_some_and(|r| !r.pods.is_empty());
            let mut r = match record {
                Some(r) if own_surge => r,
                other => HpaSurgeRecord {
                    abandoned: other.map(|r| r.abandoned).unwrap_or_default(),
                    ..HpaSurgeRecord::start(h.limits, w.replicas)
                },
            };
            if let Some(step) = ineligible(h, w, own_surge, r.base, unobserved_for) {
                return step;
            }
            let room = room(w, r.base);
            let in_use = i32::try_from(r.pods.len()).unwrap_or(i32::MAX);
            if in_use >= room {
                return Step::Wait(no_room(workload, name));
            }
            r.pods.push(pod.clone());
            Step::Join(Write {
                from: h.limits,
                to: r.expected(),
                record: Some(r),
            })
        }
    }
}

fn raised(name: &str, r: &HpaSurgeRecord) -> String {
    format!(
        "raised minReplicas of HorizontalPodAutoscaler {name} from {} to {}",
        r.before.min,
        r.expected().min
    )
}

/// The message of a request whose pod the surge `r` through autoscaler `name` covers, from the
/// surge's start (the look that raised the floor) until `workload` has the replicas: without
/// the counts that move meanwhile, so that it is written once.
pub fn covered_wait(name: &str, workload: &impl std::fmt::Display, r: &HpaSurgeRecord) -> String {
    format!(
        "{}; waiting until {workload} has {} available replicas",
        raised(name, r),
        r.want()
    )
}

/// The message of a request waiting for room in a surge of `workload` through autoscaler
/// `name`: without the counts, so that it stays the same while the request waits (and while the
/// room comes back, [`waiting_to_join`](crate::interceptor::deployment::decide::waiting_to_join)).
pub fn no_room(workload: &impl std::fmt::Display, name: &str) -> String {
    format!(
        "waiting for room to surge {workload} through HorizontalPodAutoscaler {name}: it is in use by other pods, or being given back"
    )
}

/// The replicas to give an autoscaler's workload at once after a [`Step::Join`] raised its floor
/// to `floor`, when it has fewer (`replicas`). The autoscaler itself brings a workload below its
/// `minReplicas` up to it, before and whatever its metrics say, but only at its next sync (every
/// 15 s by default): writing that same count now spares the drain the wait. `None` when the
/// workload already has that many, and for a workload scaled to zero (its autoscaler is off).
pub fn scale_to_floor(replicas: i32, floor: i32) -> Option<i32> {
    (replicas > 0 && replicas < floor).then_some(floor)
}

/// How to bring an autoscaler back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settle {
    /// The write.
    pub write: Write,
    /// Pods whose surge finished (gone).
    pub finished: usize,
    /// Pods whose surge was undone (request canceled or deleted, pod kept).
    pub undone: usize,
    /// Someone else changed a limit (the covered pods were abandoned for the floor).
    pub taken: Option<Taken>,
}

/// The settling write for an autoscaler with facts `h`, given the fate of each covered or
/// abandoned pod; `None` when nothing is to be done.
pub fn settle(h: &AutoscalerFacts, fates: &[(SurgedPod, Fate)]) -> Option<Settle> {
    let r = h.record.as_ref().ok()?.as_ref()?;
    if let Some((next, to, taken)) = taken_over(h.limits, r) {
        return Some(Settle {
            write: Write {
                from: h.limits,
                to,
                record: stored(next),
            },
            finished: 0,
            undone: 0,
            taken: Some(taken),
        });
    }
    let fate_of = |p: &SurgedPod| {
        fates
            .iter()
            .find(|(q, _)| q.uid == p.uid)
            .map_or(Fate::Pending, |(_, fate)| *fate)
    };
    let count = |fate: Fate| r.pods.iter().filter(|p| fate_of(p) == fate).count();
    let pending = |list: &[SurgedPod]| -> Vec<SurgedPod> {
        list.iter()
            .filter(|p| fate_of(p) == Fate::Pending)
            .cloned()
            .collect()
    };
    let next = HpaSurgeRecord {
        before: r.before,
        base: r.base,
        pods: pending(&r.pods),
        abandoned: pending(&r.abandoned),
    };
    if next == *r {
        return None;
    }
    Some(Settle {
        write: Write {
            from: h.limits,
            to: next.expected(),
            record: stored(next),
        },
        finished: count(Fate::Gone),
        undone: count(Fate::Kept),
        taken: None,
    })
}

/// Whether the places of autoscaler `h`'s surge may be handed to pods waiting to join it
/// ([`hand_over`]): its workload `w` is a Deployment still one it would surge (not scaled to
/// zero, paused, Recreate, rolling out or of maxSurge 0: those waiting pods complete without a
/// surge). Other workloads give their one place back: their pods are not named after them.
pub fn may_hand_over(h: &AutoscalerFacts, w: &WorkloadFacts, base: i32) -> bool {
    w.deployment.is_some() && ineligible(h, w, true, base, Duration::ZERO).is_none()
}

/// [`settle`]'s write `s` of autoscaler `h` with the places of the pods whose surge finished
/// handed to pods of its Deployment `w` waiting to join the surge (`waiting`, first come first),
/// within the room at the surge's base, instead of given back; `None` when no place is handed
/// over. The floor stays raised, so the replacement the ReplicaSet started for the pod that left
/// is the next pod's surge: no lowering and raising of the floor again (two autoscaler writes and
/// a write of the Deployment's scale fewer per pod handed over), and no surge started from the
/// replicas the last one left behind (the autoscaler scales back down only later, after its
/// stabilisation window, or never without metrics), one more pod each time. Only while the
/// Deployment already has the replicas the surge wants. The pod taken in waits, as one that
/// joined, until its surge is available ([`on_activation`]).
pub fn hand_over(
    h: &AutoscalerFacts,
    w: &WorkloadFacts,
    s: &Settle,
    waiting: &[SurgedPod],
) -> Option<(Settle, Vec<SurgedPod>)> {
    let recorded = h.record.as_ref().ok()?.as_ref()?;
    if s.taken.is_some() || s.finished == 0 || !may_hand_over(h, w, recorded.base) {
        return None;
    }
    let mut next = s.write.record.clone().unwrap_or(HpaSurgeRecord {
        pods: Vec::new(),
        abandoned: Vec::new(),
        ..recorded.clone()
    });
    let room = usize::try_from(room(w, next.base)).unwrap_or(0);
    let places = s.finished.min(room.saturating_sub(next.pods.len()));
    let taken: Vec<SurgedPod> = waiting
        .iter()
        .filter(|p| !recorded.covers(&p.uid) && !recorded.abandoned(&p.uid))
        .take(places)
        .cloned()
        .collect();
    next.pods.extend(taken.iter().cloned());
    if taken.is_empty() || w.replicas < next.want() {
        return None;
    }
    let settle = Settle {
        write: Write {
            from: h.limits,
            to: next.expected(),
            record: Some(next),
        },
        ..s.clone()
    };
    Some((settle, taken))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
