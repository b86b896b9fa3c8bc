//! The `endpoints.evictord.dev` interceptor's decisions, pure: what to do for an active request
//! given the pod's `evictord.dev/serving` condition ([`on_activation`]), whether the pod's
//! PodDisruptionBudgets let it leave its endpoints ([`on_budgets`]), and whether its Services
//! still list it ([`on_endpoints`]). One rule each; the shell reads what a step asks for.

use std::time::Duration;

use jiff::Timestamp;

use super::services::{Concern, ServiceView};
use crate::disruption::{Budget, DisruptedPod};
use crate::serving::{Delay, SERVING_CONDITION, Serving};

/// What the interceptor knows of the pod when it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `namespace/name`.
    pub pod: String,
    /// The pod has the `evictord.dev/serving` readiness gate.
    pub gated: bool,
    /// What its condition says.
    pub serving: Serving,
    /// Its deletion has started.
    pub terminating: bool,
    /// Its deregistration delay.
    pub delay: Delay,
    /// When this interceptor's turn began (its `activationTime`): the start of an ungated pod's
    /// delay.
    pub turn_started: Timestamp,
}

/// The step for an active request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Complete now.
    Complete {
        /// The message.
        message: String,
        /// The metric `result`, when this completion is where the pod is counted.
        result: Option<&'static str>,
    },
    /// In progress: nothing to do but wait.
    Wait {
        /// The message.
        message: String,
        /// When the wait ends, if known.
        until: Option<Timestamp>,
    },
    /// The pod serves: read its PodDisruptionBudgets ([`on_budgets`]).
    CheckBudgets,
    /// The pod left its endpoints at `since`: read its Services ([`on_endpoints`]).
    CheckEndpoints {
        /// When its condition went `False`.
        since: Timestamp,
    },
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

/// ` (why the annotation was not used)`, or nothing.
fn delay_note(delay: &Delay) -> String {
    delay
        .problem
        .as_ref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default()
}

/// The step, in order: a terminating pod is going anyway; a pod without the gate waits its delay
/// from the interceptor's turn (from the whole second after its `activationTime`) and says why; a serving pod (condition `True`, or none yet) leaves
/// its endpoints once its budgets allow; a leaving one waits for its Services; one out of them
/// waits its delay from then, and completes.
pub fn on_activation(f: &Facts, now: Timestamp) -> Step {
    let delay = f.delay.value;
    let human = humantime::format_duration(delay);
    if f.terminating {
        return Step::Complete {
            message: format!("pod {} is terminating already", f.pod),
            result: Some("pod_gone"),
        };
    }
    if !f.gated {
        // `activationTime` has whole seconds, rounded down: counted from the next second, the
        // delay is never shorter than asked.
        let until = add(add(f.turn_started, Duration::from_secs(1)), delay);
        if now >= until {
            return Step::Complete {
                message: format!(
                    "pod {} has no {SERVING_CONDITION} readiness gate (created before evictord's pod \
                     webhook added it, in a namespace the webhook leaves out, or while it was down), so \
                     it stays in its Services' endpoints until its containers stop; waited the \
                     deregistration delay {human} only{}",
                    f.pod,
                    delay_note(&f.delay)
                ),
                result: Some("ungated"),
            };
        }
        return Step::Wait {
            message: format!(
                "pod {} has no {SERVING_CONDITION} readiness gate, so evictord cannot take it out of \
                 its Services' endpoints; waiting the deregistration delay {human} only{}",
                f.pod,
                delay_note(&f.delay)
            ),
            until: Some(until),
        };
    }
    match f.serving {
        Serving::Absent | Serving::True => Step::CheckBudgets,
        Serving::Leaving { since } => Step::CheckEndpoints { since },
        Serving::Deregistering { out, .. } => {
            let until = add(out, delay);
            if now >= until {
                Step::Complete {
                    message: format!(
                        "pod {} was out of the ready endpoints of its Services for the deregistration \
                         delay {human}; the eviction may go on",
                        f.pod
                    ),
                    result: None,
                }
            } else {
                Step::Wait {
                    message: format!(
                        "pod {} is out of the ready endpoints of its Services since {out}; waiting the \
                         deregistration delay {human}{} until {until}",
                        f.pod,
                        delay_note(&f.delay)
                    ),
                    until: Some(until),
                }
            }
        }
    }
}

/// What the budgets say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetStep {
    /// Take the pod out of its endpoints (condition `False`).
    Leave,
    /// Not now: a budget allows no disruption; the message names it.
    Wait(String),
}

/// Whether the pod may leave its endpoints now: only while every PodDisruptionBudget selecting it
/// allows one more disruption. An unready pod counts against its budgets, so leaving earlier
/// would use up the disruption its eviction needs (and, under `IfHealthyBudget`, get that eviction
/// refused): the workload's surge comes first.
pub fn on_budgets<P: DisruptedPod + ?Sized>(pod: &P, name: &str, budgets: &[Budget]) -> BudgetStep {
    let refusing: Vec<String> = budgets
        .iter()
        .filter(|b| b.selects(pod) && !b.allows())
        .map(|b| {
            if b.observed {
                format!(
                    "PodDisruptionBudget {} allows {} disruptions",
                    b.name, b.disruptions_allowed
                )
            } else {
                format!(
                    "PodDisruptionBudget {} is not observed by the disruption controller yet",
                    b.name
                )
            }
        })
        .collect();
    if refusing.is_empty() {
        return BudgetStep::Leave;
    }
    BudgetStep::Wait(format!(
        "pod {name} still serves: {}; taking it out of its endpoints now would count against the \
         budget and hold its eviction (a workload's surge interceptor, declared before this one, \
         makes room first)",
        refusing.join(", ")
    ))
}

/// What the Services say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointsStep {
    /// Out of every waited-for Service's ready endpoints (or given up on them): the delay starts.
    Out {
        /// The condition's message and progress.
        message: String,
        /// The wait was given up after the bound (a Warning event).
        timed_out: bool,
    },
    /// Some Service still lists the pod as ready.
    Wait(String),
}

fn names(views: &[&ServiceView]) -> String {
    views
        .iter()
        .map(|v| format!("Service {}", v.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `; not waited for: Service a (publishNotReadyAddresses), Service b (no selector)`, or nothing.
fn skipped_note(services: &[ServiceView]) -> String {
    let skipped: Vec<String> = services
        .iter()
        .filter_map(|v| match v.concern {
            Concern::PublishesNotReady => {
                Some(format!("Service {} (publishNotReadyAddresses)", v.name))
            }
            Concern::NoSelector => Some(format!("Service {} (no selector)", v.name)),
            Concern::Waited { .. } => None,
        })
        .collect();
    if skipped.is_empty() {
        String::new()
    } else {
        format!("; not waited for: {}", skipped.join(", "))
    }
}

/// Whether the pod, unready since `since`, is out of the ready endpoints of every Service that
/// selects it (Endpoints and EndpointSlices), waiting at most `bound` for them.
pub fn on_endpoints(
    pod: &str,
    services: &[ServiceView],
    since: Timestamp,
    now: Timestamp,
    bound: Duration,
    delay: Duration,
) -> EndpointsStep {
    let human = humantime::format_duration(delay);
    let waited: Vec<&ServiceView> = services
        .iter()
        .filter(|v| matches!(v.concern, Concern::Waited { .. }))
        .collect();
    let still: Vec<&ServiceView> = waited
        .iter()
        .copied()
        .filter(|v| v.concern == Concern::Waited { ready: true })
        .collect();
    let skipped = skipped_note(services);
    if still.is_empty() {
        let which = if waited.is_empty() {
            "no Service selects it".to_string()
        } else {
            format!("out of the ready endpoints of {}", names(&waited))
        };
        return EndpointsStep::Out {
            message: format!(
                "pod {pod}: {which}{skipped}; evicted after the deregistration delay {human}"
            ),
            timed_out: false,
        };
    }
    let waited_for = Duration::try_from(now.duration_since(since)).unwrap_or_default();
    if waited_for >= bound {
        return EndpointsStep::Out {
            message: format!(
                "pod {pod}: {} still list it as a ready address after {}; going on with the \
                 deregistration delay {human} anyway{skipped}",
                names(&still),
                humantime::format_duration(bound)
            ),
            timed_out: true,
        };
    }
    EndpointsStep::Wait(format!(
        "pod {pod} is unready ({SERVING_CONDITION} False); waiting until {} drop it from their ready \
         addresses (Endpoints, EndpointSlices): {}s so far, at most {}{skipped}",
        names(&still),
        waited_for.as_secs(),
        humantime::format_duration(bound)
    ))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
