//! The Deployment interceptor's decisions, pure: what to do for a pod whose EvictionRequest has
//! made it active ([`on_activation`]), and how to bring a surged Deployment back once the pods
//! it covered are gone or their requests canceled ([`settle`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::surge::{DeploymentFacts, Strategy, SurgeRecord, SurgedPod};

/// How long, at most, an interceptor waits for the Deployment controller to observe a
/// Deployment's latest generation before it takes the change for a rollout, counted from the
/// first time it saw that generation unobserved ([`super::unobserved::Unobserved`]). evictord's
/// own writes of `spec.replicas` (a surge, a settled surge put back) bump the generation as a
/// rollout does, and only the observed status tells them apart; the controller observes a change
/// within moments, unless it is down.
pub const UNOBSERVED_WAIT: Duration = Duration::from_secs(30);

/// The message to wait with while `workload`'s latest generation is not observed yet, if it has
/// been seen unobserved for less than [`UNOBSERVED_WAIT`] (`unobserved_for`; shared with the
/// HorizontalPodAutoscaler interceptor). `own_surge`: the change is the surge's own.
pub(crate) fn unobserved(
    f: &DeploymentFacts,
    workload: &str,
    own_surge: bool,
    unobserved_for: Duration,
) -> Option<String> {
    (!own_surge && f.observed_generation < f.generation && unobserved_for < UNOBSERVED_WAIT).then(
        || {
            format!(
                "waiting until the Deployment controller observes generation {} of {workload} (observed {}): \
                 a change not observed yet is no rollout yet",
                f.generation, f.observed_generation
            )
        },
    )
}

/// What the interceptor does for one active request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No surge: complete at once, saying why (the next interceptor decides).
    Skip(String),
    /// Record the pod in the surge and set `spec.replicas` (one patch).
    Join {
        /// The record to write.
        record: SurgeRecord,
        /// The `spec.replicas` to write (`record.expected_replicas()`).
        replicas: i32,
        /// The `spec.replicas` the patch expects to replace.
        from: i32,
    },
    /// In progress: surged, or waiting for a place in the surge.
    Wait(String),
    /// The surge pods are available: complete, the pod may go.
    Ready(String),
    /// `spec.replicas` was changed by someone else during the surge: their value wins. Write
    /// `record` (the surge abandoned, [`SurgeRecord::abandon`]) if the Deployment is still the
    /// version read, leave `spec.replicas`, complete saying so.
    Abandon {
        /// The record to write.
        record: SurgeRecord,
        /// Why.
        message: String,
    },
}

/// Why a Deployment cannot surge now, if it cannot: a `Skip` whose message completes the
/// request, or a `Wait` while its latest generation is not observed yet ([`unobserved`]).
fn ineligible(
    f: &DeploymentFacts,
    name: &str,
    own_surge: bool,
    unobserved_for: Duration,
) -> Option<Step> {
    let workload = format!("Deployment {name}");
    let why = if let Some(hpa) = &f.hpa {
        format!("HorizontalPodAutoscaler {hpa} scales Deployment {name}: a surge would fight it")
    } else if f.paused {
        format!("Deployment {name} is paused")
    } else if f.strategy == Strategy::Recreate {
        format!("Deployment {name} uses the Recreate strategy, which never runs extra pods")
    } else if let Some(wait) = unobserved(f, &workload, own_surge, unobserved_for) {
        return Some(Step::Wait(wait));
    } else if f.updated_replicas < f.status_replicas
        || (!own_surge && f.observed_generation < f.generation)
    {
        format!("a rollout of {workload} is in progress")
    } else if f.max_surge == 0 {
        format!(
            "Deployment {name} has maxSurge 0 (maxUnavailable {}): it accepts unavailable pods instead of extra ones",
            f.max_unavailable
        )
    } else {
        return None;
    };
    Some(Step::Skip(format!("no surge: {why}")))
}

/// The step for pod `pod` of Deployment `name`, whose latest generation has been seen unobserved
/// for `unobserved_for` (zero when observed).
pub fn on_activation(
    f: &DeploymentFacts,
    name: &str,
    pod: &SurgedPod,
    unobserved_for: Duration,
) -> Step {
    let record = match &f.record {
        Ok(r) => r.clone(),
        Err(e) => {
            return Step::Skip(format!(
                "no surge: the annotation {} of Deployment {name} is unreadable ({e}); remove it",
                super::SURGE_ANNOTATION
            ));
        }
    };
    let user_scaled = |r: &SurgeRecord| {
        format!(
            "no surge: spec.replicas of Deployment {name} was changed to {} by someone else during a surge \
             (expected {}); their value stays",
            f.replicas,
            r.expected_replicas()
        )
    };
    if let Some(r) = &record
        && f.replicas != r.expected_replicas()
    {
        return Step::Abandon {
            record: r.abandon(f.replicas),
            message: user_scaled(r),
        };
    }
    if let Some(r) = &record
        && r.abandoned.iter().any(|p| p.uid == pod.uid)
    {
        return Step::Skip(format!(
            "no surge: spec.replicas of Deployment {name} was changed to {} by someone else during the surge for \
             this pod; their value stays",
            f.replicas
        ));
    }
    match record {
        Some(r) if r.covers(&pod.uid) => {
            let caught_up = f.observed_generation >= f.generation;
            if caught_up && f.available_replicas >= r.expected_replicas() {
                Step::Ready(format!(
                    "surged Deployment {name} from {} to {} replicas; {} available: the pod may go",
                    r.base,
                    r.expected_replicas(),
                    f.available_replicas
                ))
            } else {
                Step::Wait(surged(name, r.base))
            }
        }
        record => {
            let own_surge = record.as_ref().is_some_and(|r| !r.pods.is_empty());
            if let Some(step) = ineligible(f, name, own_surge, unobserved_for) {
                return step;
            }
            let mut r = record.unwrap_or(SurgeRecord {
                base: f.replicas,
                ..SurgeRecord::default()
            });
            let in_use = i32::try_from(r.pods.len()).unwrap_or(i32::MAX);
            if in_use >= f.max_surge {
                return Step::Wait(no_room(name, f.max_surge));
            }
            r.pods.push(pod.clone());
            Step::Join {
                replicas: r.expected_replicas(),
                from: f.replicas,
                record: r,
            }
        }
    }
}

/// The message of a request whose pod a surge of Deployment `name` (from `base` replicas)
/// covers, from the surge's start until its replicas are available: the same at every look, so
/// that a look writes nothing while the counts move (another pod joining or leaving the surge
/// included); `base` changes only when someone else scales, which ends the surge.
pub fn surged(name: &str, base: i32) -> String {
    format!(
        "surged Deployment {name} from {base} replicas, one more for this pod; waiting until the surge is available"
    )
}

/// The message of a request waiting for room in Deployment `name`'s surge: its maxSurge, not
/// how much of it is in use, so that it stays the same while the request waits.
pub fn no_room(name: &str, max_surge: i32) -> String {
    format!(
        "waiting for room to surge Deployment {name}: its maxSurge {max_surge} is in use by other pods, or being given back"
    )
}

/// The message of a request waiting to join a surge, from this look's reason to wait (`wait`),
/// the message of a wait for room (`room`) and the message the request's entry shows (`shown`):
/// a request already told that it waits for room keeps that message while the room comes back
/// (the Deployment controller observing the settler's write of `spec.replicas`, the ReplicaSet
/// deleting the extra pod, [`scaling_down`]). To the reader it is the same wait; told turn by
/// turn, it cost a request waiting behind two others six status writes of its own in the pool
/// benchmark. Shared with the HorizontalPodAutoscaler interceptor. Only for a pod the surge
/// does not cover: a covered pod's message is the surge's ([`surged`]).
pub(crate) fn waiting_to_join(shown: Option<&str>, room: String, wait: String) -> String {
    if shown == Some(room.as_str()) {
        room
    } else {
        wait
    }
}

/// A pod of a surged Deployment as [`confirmed`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodReadiness {
    /// The pod's UID.
    pub uid: String,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// It has a `deletionTimestamp`.
    pub terminating: bool,
}

impl PodReadiness {
    /// How `pod` looks to [`confirmed`].
    pub fn of(pod: &k8s_openapi::api::core::v1::Pod) -> Self {
        Self {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ready: pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Whether the pods themselves bear out a `Ready` step: at least `record.base` pods the surge
/// does not cover are ready and not terminating, so the covered pods may all go. A Deployment's
/// `availableReplicas` comes from its ReplicaSets' status, which can still count a replacement
/// the ReplicaSet is deleting after `spec.replicas` went down (the settler putting the Deployment
/// back after an earlier pod); the pods cannot. `Err` says what is missing.
pub fn confirmed(record: &SurgeRecord, pods: &[PodReadiness]) -> Result<(), String> {
    confirmed_over(record.base, |uid| record.covers(uid), pods)
}

/// [`confirmed`] for any surge (shared with the HorizontalPodAutoscaler interceptor): at least
/// `base` of `pods` that `covers` does not cover are ready and not terminating.
pub fn confirmed_over(
    base: i32,
    covers: impl Fn(&str) -> bool,
    pods: &[PodReadiness],
) -> Result<(), String> {
    let ready = pods
        .iter()
        .filter(|p| p.ready && !p.terminating && !covers(&p.uid))
        .count();
    let ready = i32::try_from(ready).unwrap_or(i32::MAX);
    if ready >= base {
        Ok(())
    } else {
        // Without the count of ready pods: it moves while the state (not enough) does not.
        Err(format!(
            "waiting until {base} of its pods the surge does not cover are ready before the pod goes"
        ))
    }
}

/// Why a pod may not join a surge of Deployment `name` yet, if it may not: the Deployment is
/// still coming down to its `spec.replicas` — more pods than that active, by its status
/// (`status.replicas`) or by its pods as seen (`active_pods`, not terminating). The settler
/// lowers `spec.replicas` when a covered pod is gone, and the ReplicaSet then deletes the extra
/// pod, the newest (often the replacement of the pod that went, ready by then). A join that
/// raised `spec.replicas` again at once would find that pod ready, not covered, and let the next
/// covered pod go; the ReplicaSet controller, having seen the lower count in between, deletes it
/// all the same, and the Deployment is a pod short until another is ready (seen in the pool
/// test: a NodeMaintenance evicting two pods of one Deployment in a row). Once the extra pod is
/// terminating, the join surges from what remains.
pub fn scaling_down(f: &DeploymentFacts, name: &str, active_pods: usize) -> Option<String> {
    let over = i32::try_from(active_pods).unwrap_or(i32::MAX);
    (f.status_replicas > f.replicas || over > f.replicas).then(|| {
        format!(
            "waiting until Deployment {name} has come down to its {} replicas before surging it again: \
             its ReplicaSet may still delete a pod to meet that count",
            f.replicas
        )
    })
}

/// Whether `pod` is an active pod of Deployment `name`, as its ReplicaSets count them: not
/// terminating, and controlled by one of its ReplicaSets (named `<name>-<pod-template-hash>`, the
/// hash the pod's label carries). A pod its selector also matches but another controller owns
/// (overlapping selectors) is not one the Deployment's ReplicaSets would delete.
pub fn active_in(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> bool {
    let hash = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"));
    owned_by(
        name,
        hash.map(String::as_str),
        pod.metadata.owner_references.iter().flatten(),
    ) && pod.metadata.deletion_timestamp.is_none()
}

/// Whether a pod whose `pod-template-hash` label is `hash` and whose owner references are
/// `owners` is controlled by one of Deployment `name`'s ReplicaSets ([`active_in`]).
pub fn owned_by<'a>(
    name: &str,
    hash: Option<&str>,
    mut owners: impl Iterator<Item = &'a OwnerReference>,
) -> bool {
    owners.any(|o| {
        o.controller == Some(true)
            && o.kind == "ReplicaSet"
            && hash.is_some_and(|h| {
                o.name.strip_prefix(name).and_then(|r| r.strip_prefix('-')) == Some(h)
            })
    })
}

/// What became of a pod a surge covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The pod (that UID) is gone or terminating: the surge for it is finished.
    Gone,
    /// Its EvictionRequest was canceled or deleted while the pod stays: undo its surge.
    Kept,
    /// Still being evicted.
    Pending,
}

/// Whether the covered pod of UID `uid` has left, from its pod as read (`None`: not found): gone,
/// replaced by another of the same name, or terminating. A terminating pod never serves again and
/// its ReplicaSet already counts it out (it starts a replacement while `spec.replicas` still
/// holds the surge), so its surge ends when its termination starts, not its grace period later:
/// the next pod of the Deployment waiting for room in the surge takes it at once.
pub fn has_left(pod: Option<(&str, bool)>, uid: &str) -> bool {
    pod.is_none_or(|(pod_uid, terminating)| pod_uid != uid || terminating)
}

/// Whether the Deployment's ReplicaSets have counted out `terminating` covered pods that are
/// still there, terminating: its `status.replicas` (the active pods its ReplicaSets counted at
/// their last sync; a terminating pod is not active once a ReplicaSet controller has seen it) at
/// most `spec.replicas` less those pods, the current generation observed. Lowering
/// `spec.replicas` before that lets a ReplicaSet controller still counting a terminating pod as
/// active delete a live one to come down to the lowered count — the newest, the surge pod — and
/// both go: a lagging controller manager (right after a kube-apiserver restart) did just that in
/// the soak. At worst the surge is settled once the pod is gone.
pub fn counted_out(f: &DeploymentFacts, terminating: i32) -> bool {
    f.observed_generation >= f.generation && f.status_replicas <= f.replicas - terminating
}

/// How to bring a Deployment back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settle {
    /// The new record (`None`: remove the annotation).
    pub record: Option<SurgeRecord>,
    /// The `spec.replicas` to write, replacing `from`; `None` leaves `spec.replicas` alone
    /// (someone else changed it: their value wins).
    pub replicas: Option<(i32, i32)>,
    /// Pods whose surge finished.
    pub finished: usize,
    /// Pods whose surge was undone.
    pub undone: usize,
    /// Someone else changed `spec.replicas`: the covered pods were abandoned.
    pub abandoned: bool,
}

/// The settling write for a Deployment with facts `f`, given the fate of each covered or
/// abandoned pod; `None` when nothing is to be done.
pub fn settle(f: &DeploymentFacts, fates: &[(SurgedPod, Fate)]) -> Option<Settle> {
    let record = f.record.as_ref().ok()?.as_ref()?;
    if f.replicas != record.expected_replicas() {
        let next = record.abandon(f.replicas);
        return Some(Settle {
            abandoned: !record.pods.is_empty(),
            record: Some(next),
            replicas: None,
            finished: 0,
            undone: 0,
        });
    }
    let fate_of = |p: &SurgedPod| {
        fates
            .iter()
            .find(|(q, _)| q.uid == p.uid)
            .map_or(Fate::Pending, |(_, fate)| *fate)
    };
    let count = |fate: Fate| record.pods.iter().filter(|p| fate_of(p) == fate).count();
    let (finished, undone) = (count(Fate::Gone), count(Fate::Kept));
    let pending = |list: &[SurgedPod]| -> Vec<SurgedPod> {
        list.iter()
            .filter(|p| fate_of(p) == Fate::Pending)
            .cloned()
            .collect()
    };
    let next = SurgeRecord {
        base: record.base,
        pods: pending(&record.pods),
        abandoned: pending(&record.abandoned),
    };
    if next == *record {
        return None;
    }
    let replicas = (finished + undone > 0).then(|| (f.replicas, next.expected_replicas()));
    let empty = next.pods.is_empty() && next.abandoned.is_empty();
    Some(Settle {
        record: (!empty).then_some(next),
        replicas,
        finished,
        undone,
        abandoned: false,
    })
}

/// How long, at most, the settler keeps the places of pods that left for other pods of their
/// Deployment still to leave ([`hold`]), counted from the first look that kept them. Under
/// `kubectl drain`, which drains one node after another, the next pod of a Deployment came 19 s
/// after the one before at the median in the pool benchmark, 93 s at most.
pub const HOLD_MAX: Duration = Duration::from_secs(120);

/// Whether the settler keeps the places of the pods whose surge finished ([`settle`]'s write
/// `s`) instead of giving them back, when no pod waits for them yet ([`hand_over`] took none):
/// `due` pods of the Deployment, not covered by the surge, are still on cordoned nodes (a drain
/// that cordons every node first, as `kubectl drain` of several nodes does, reaches them next),
/// the places have been kept for less than [`HOLD_MAX`] (`held_for`), the surge is full (a pod
/// that comes would wait for a place, not raise `spec.replicas` further), and the Deployment is
/// one its places may be handed over on ([`may_hand_over`]; `f` with its autoscaler). The
/// replacement the ReplicaSet started when the pod left then becomes the next pod's surge, as
/// in a hand-over, instead of being deleted when `spec.replicas` comes down and another pod
/// started when it goes up again: about 26 requests to kube-apiserver fewer per pod taken in
/// under `kubectl drain` (the book's performance page). A place given back for an undone
/// surge, or with someone else's scale, is never kept.
pub fn hold(f: &DeploymentFacts, name: &str, s: &Settle, due: usize, held_for: Duration) -> bool {
    let Ok(Some(recorded)) = &f.record else {
        return false;
    };
    let full = i32::try_from(recorded.pods.len()).unwrap_or(i32::MAX) >= f.max_surge;
    s.finished > 0
        && s.undone == 0
        && !s.abandoned
        && full
        && due > 0
        && held_for < HOLD_MAX
        && may_hand_over(f, name)
}

/// Whether the places of a surge of Deployment `name` may be handed to pods waiting to join it
/// ([`hand_over`]): the surge's own Deployment, still one it would surge (not autoscaled, paused,
/// Recreate, rolling out or of maxSurge 0: those waiting pods complete without a surge).
pub fn may_hand_over(f: &DeploymentFacts, name: &str) -> bool {
    ineligible(f, name, true, Duration::ZERO).is_none()
}

/// [`settle`]'s write `s` with the places of the pods whose surge finished handed to pods of
/// the same Deployment waiting to join it (`waiting`, first come first), within `maxSurge`,
/// instead of given back; `None` when no place is handed over. The replacement the ReplicaSet
/// started when the finished pod began terminating (`spec.replicas` still held the surge) is
/// then the next pod's surge: `spec.replicas` stays up instead of coming down (the ReplicaSet
/// deleting that replacement) and going up again (starting another), two Deployment writes and
/// a pod started and stopped fewer per pod handed over. The pod taken in waits, as one that
/// joined, until its surge is available ([`on_activation`], [`confirmed`]).
pub fn hand_over(
    f: &DeploymentFacts,
    s: &Settle,
    waiting: &[SurgedPod],
) -> Option<(Settle, Vec<SurgedPod>)> {
    let recorded = f.record.as_ref().ok()?.as_ref()?;
    if s.abandoned || s.finished == 0 {
        return None;
    }
    let mut next = s.record.clone().unwrap_or(SurgeRecord {
        base: recorded.base,
        ..SurgeRecord::default()
    });
    let room = usize::try_from(f.max_surge).unwrap_or(0);
    let places = s.finished.min(room.saturating_sub(next.pods.len()));
    let taken: Vec<SurgedPod> = waiting
        .iter()
        .filter(|p| !recorded.covers(&p.uid) && !recorded.abandoned.iter().any(|a| a.uid == p.uid))
        .take(places)
        .cloned()
        .collect();
    if taken.is_empty() {
        return None;
    }
    next.pods.extend(taken.iter().cloned());
    let to = next.expected_replicas();
    let settle = Settle {
        replicas: (to != f.replicas).then_some((f.replicas, to)),
        record: Some(next),
        ..s.clone()
    };
    Some((settle, taken))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
