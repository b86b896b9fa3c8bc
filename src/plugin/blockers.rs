//! What holds a pod's eviction up, in words: one rule per function, each a row of the tests.
//!
//! The retry schedule and heartbeat deadline shown are those of the controller's defaults (the
//! plugin cannot read the server's flags); the counts and times come from the request's status.

use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::api::{
    CONDITION_CANCELED, CONDITION_EVICTED, EvictionRequest, IMPERATIVE_INTERCEPTOR,
    NodeMaintenance, PodType,
};
pub use crate::cluster::{Budget, blocking_budgets};
use crate::cluster::{CachedPod, allowance, pod_type};
use crate::controller::eviction_request::backoff::retry_at;
use crate::controller::eviction_request::decision::DecideSettings;
use crate::drain::Stay;

/// Why a pod is still there. `key` changes when the situation changes (plain output prints a line
/// then); `text` may also carry clocks that move every second.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holdup {
    /// What changed, for plain output.
    pub key: String,
    /// The words.
    pub text: String,
}

impl Holdup {
    fn stable(text: String) -> Self {
        Holdup {
            key: text.clone(),
            text,
        }
    }
}

/// `40 s`, `3 m`, `2 h 5 m`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} m", s / 60),
        _ => format!("{} h {} m", s / 3600, (s % 3600) / 60),
    }
}

/// The time from `then` to `now` in whole seconds (0 when `then` is later).
pub fn since(then: Timestamp, now: Timestamp) -> Duration {
    Duration::from_secs(u64::try_from(now.as_second() - then.as_second()).unwrap_or(0))
}

/// Why `pod` is still on its node, given its EvictionRequest (if any), the budgets of its
/// namespace and the time.
pub fn holdup(
    pod: &CachedPod,
    request: Option<&EvictionRequest>,
    budgets: &[Budget],
    now: Timestamp,
) -> Holdup {
    if pod.is_terminating() {
        return Holdup::stable("terminating".into());
    }
    let Some(r) = request else {
        return Holdup::stable("waiting for its EvictionRequest to be created".into());
    };
    if let Some(h) = ended(r) {
        return h;
    }
    let status = r.status.clone().unwrap_or_default();
    match status.active_interceptors.first() {
        None => Holdup::stable("waiting for the controller to select an interceptor".into()),
        Some(name) if name == IMPERATIVE_INTERCEPTOR => imperative(pod, r, budgets, now),
        Some(name) => interceptor(r, name, now),
    }
}

/// An ended request with its pod still there.
fn ended(r: &EvictionRequest) -> Option<Holdup> {
    let s = r.status.as_ref()?;
    if s.is_true(CONDITION_EVICTED) {
        return Some(Holdup::stable("evicted, the pod is shutting down".into()));
    }
    let c = s
        .condition(CONDITION_CANCELED)
        .filter(|c| c.status == "True")?;
    Some(Holdup::stable(format!("request canceled: {}", c.message)))
}

/// The controller itself is the active interceptor and calls the Eviction API.
fn imperative(pod: &CachedPod, r: &EvictionRequest, budgets: &[Budget], now: Timestamp) -> Holdup {
    if pod_type(pod) != PodType::Default {
        return Holdup::stable(format!(
            "stays: {}, and the Eviction API does not remove DaemonSet and static pods (does not hold the drain)",
            Stay::LeftByInterceptors.reason()
        ));
    }
    let status = r.status.clone().unwrap_or_default();
    let failures = status.failed_evictions();
    if failures == 0 {
        return Holdup::stable("being evicted through the Eviction API".into());
    }
    let settings = DecideSettings::default();
    let next = match retry_at(
        &status,
        settings.backoff_base,
        settings.backoff_cap,
        allowance(pod, budgets),
    ) {
        Some(at) if at > now => format!("next in {}", human(since(now, at))),
        _ => "next attempt due".into(),
    };
    let blocking = blocking_budgets(pod, budgets);
    let key = match blocking.first() {
        Some(b) => format!(
            "PodDisruptionBudget {} allows {} disruptions (retry {failures}",
            b.name, b.disruptions_allowed
        ),
        None => format!("the Eviction API refused the eviction (retry {failures}"),
    };
    Holdup {
        text: format!("{key}, {next})"),
        key,
    }
}

/// Another interceptor is active.
fn interceptor(r: &EvictionRequest, name: &str, now: Timestamp) -> Holdup {
    let entry = r.status.as_ref().and_then(|s| s.interceptor(name));
    let activated = entry
        .and_then(|e| e.activation_time.as_ref().or(e.start_time.as_ref()))
        .map(|t| t.0)
        .or_else(|| r.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let heartbeat = entry.and_then(|e| e.heartbeat_time.as_ref()).map(|t| t.0);
    let message = entry
        .and_then(|e| e.message.as_deref())
        .filter(|m| !m.is_empty())
        .map(|m| format!(": {}", m.chars().take(120).collect::<String>()))
        .unwrap_or_default();
    let beat = match heartbeat {
        Some(h) => format!("last heartbeat {} ago", human(since(h, now))),
        None => "no heartbeat yet".into(),
    };
    Holdup {
        key: format!("interceptor {name} active, heartbeat {heartbeat:?}{message}"),
        text: format!(
            "interceptor {name} active for {}, {beat}{message}",
            human(since(activated, now))
        ),
    }
}

/// Words for a node whose status says it waits for another node: names the maintenances that
/// share that node. `None` when the node's own bar says enough.
pub fn node_note(message: &str, me: &str, maintenances: &[NodeMaintenance]) -> Option<String> {
    if message.is_empty() || message == "Drained" || message == "Evacuating" {
        return None;
    }
    let Some(rest) = message.strip_prefix("Waiting for node ") else {
        return Some(message.trim_end_matches('.').to_string());
    };
    let node: String = rest
        .chars()
        .take_while(|c| !matches!(c, ' ' | '.' | ';'))
        .collect();
    let sharing: Vec<&str> = maintenances
        .iter()
        .filter(|m| m.metadata.name.as_deref() != Some(me))
        .filter(|m| {
            m.status
                .iter()
                .flat_map(|s| &s.node_statuses)
                .any(|s| s.node_ref.name == node)
        })
        .filter_map(|m| m.metadata.name.as_deref())
        .collect();
    Some(if sharing.is_empty() {
        format!("waiting for node {node}")
    } else {
        format!(
            "waiting for node {node}: shared with maintenance {}",
            sharing.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeMaintenanceNodeStatus, NodeMaintenanceStatus, NodeReference};
    use crate::plugin::fixtures::{pod, request, t};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use rstest::rstest;

    const NM: &str = "nodemaintenance.evictord.dev";

    fn web_budget(allowed: i32) -> Budget {
        Budget::from_json(
            "ns",
            "v1",
            &serde_json::json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}},
                "status": {"disruptionsAllowed": allowed},
            }),
        )
    }

    #[rstest]
    #[case::terminating(pod("p").terminating().build(), None, "terminating")]
    #[case::no_request(pod("p").build(), None, "waiting for its EvictionRequest to be created")]
    #[case::evicted(pod("p").build(), Some(request("p", &[NM]).condition("Evicted", "").build()), "evicted, the pod is shutting down")]
    #[case::canceled(pod("p").build(), Some(request("p", &[]).condition("Canceled", "No requesters").build()), "request canceled: No requesters")]
    #[case::unselected(pod("p").build(), Some(request("p", &[NM]).build()), "waiting for the controller to select an interceptor")]
    #[case::evicting(pod("p").build(), Some(request("p", &[NM]).active(&[IMPERATIVE_INTERCEPTOR], IMPERATIVE_INTERCEPTOR).build()), "being evicted through the Eviction API")]
    #[case::daemonset(pod("p").daemonset().build(), Some(request("p", &[NM]).active(&[IMPERATIVE_INTERCEPTOR], IMPERATIVE_INTERCEPTOR).build()), "stays: its interceptors finished without removing it, and the Eviction API does not remove DaemonSet and static pods (does not hold the drain)")]
    // Retry 4 failed 2 s ago: the 4th wait is 8 s, so the next call is in 6 s.
    // Refused 4 times, the last 2 s ago, the budget still refusing: held 10 s (not the 8 s backoff).
    #[case::budget(pod("p").label("app", "web").build(), Some(request("p", &[NM]).active(&[IMPERATIVE_INTERCEPTOR], IMPERATIVE_INTERCEPTOR).failures(4, t(-2)).build()), "PodDisruptionBudget web allows 0 disruptions (retry 4, next in 8 s)")]
    #[case::refused(pod("p").build(), Some(request("p", &[NM]).active(&[IMPERATIVE_INTERCEPTOR], IMPERATIVE_INTERCEPTOR).failures(1, t(-5)).build()), "the Eviction API refused the eviction (retry 1, next attempt due)")]
    #[case::interceptor(pod("p").build(), Some(request("p", &[NM]).active(&["surge.example.com", IMPERATIVE_INTERCEPTOR], "surge.example.com").entry("surge.example.com", |e| { e.activation_time = Some(Time(t(-180))); e.heartbeat_time = Some(Time(t(-40))); }).build()), "interceptor surge.example.com active for 3 m, last heartbeat 40 s ago")]
    #[case::silent(pod("p").build(), Some(request("p", &[NM]).active(&["surge.example.com", IMPERATIVE_INTERCEPTOR], "surge.example.com").entry("surge.example.com", |e| { e.activation_time = Some(Time(t(-5))); e.message = Some("surging 1 pod".into()); }).build()), "interceptor surge.example.com active for 5 s, no heartbeat yet: surging 1 pod")]
    fn holdups(#[case] p: CachedPod, #[case] r: Option<EvictionRequest>, #[case] text: &str) {
        assert_eq!(holdup(&p, r.as_ref(), &[web_budget(0)], t(0)).text, text);
    }

    #[test]
    fn a_budget_that_allows_a_disruption_is_not_named() {
        let p = pod("p").label("app", "web").build();
        assert!(blocking_budgets(&p, &[web_budget(1)]).is_empty());
        assert_eq!(blocking_budgets(&p, &[web_budget(0)]).len(), 1);
        let other = pod("q").label("app", "db").build();
        assert!(blocking_budgets(&other, &[web_budget(0)]).is_empty());
    }

    /// The plain output's key ignores moving clocks but not a new heartbeat or retry.
    #[test]
    fn keys_change_with_the_situation_only() {
        let r = request("p", &[NM])
            .active(&["a.example.com", IMPERATIVE_INTERCEPTOR], "a.example.com")
            .entry("a.example.com", |e| e.heartbeat_time = Some(Time(t(-10))))
            .build();
        let p = pod("p").build();
        let (a, b) = (
            holdup(&p, Some(&r), &[], t(0)),
            holdup(&p, Some(&r), &[], t(30)),
        );
        assert_eq!(a.key, b.key);
        assert_ne!(a.text, b.text);
        let r2 = request("p", &[NM])
            .active(&["a.example.com", IMPERATIVE_INTERCEPTOR], "a.example.com")
            .entry("a.example.com", |e| e.heartbeat_time = Some(Time(t(20))))
            .build();
        assert_ne!(holdup(&p, Some(&r2), &[], t(30)).key, a.key);
    }

    #[rstest]
    #[case(0, "0 s")]
    #[case(59, "59 s")]
    #[case(180, "3 m")]
    #[case(7500, "2 h 5 m")]
    fn human_durations(#[case] secs: u64, #[case] text: &str) {
        assert_eq!(human(Duration::from_secs(secs)), text);
    }

    fn holding(name: &str, node: &str) -> NodeMaintenance {
        let mut m = crate::plugin::maintenance::maintenance_for(
            name,
            &[node.into()],
            &[],
            None,
            crate::api::Stage::Drain,
        );
        m.status = Some(NodeMaintenanceStatus {
            node_statuses: vec![NodeMaintenanceNodeStatus {
                node_ref: NodeReference { name: node.into() },
                ..Default::default()
            }],
            ..Default::default()
        });
        m
    }

    #[rstest]
    #[case::evacuating("Evacuating", None)]
    #[case::drained("Drained", None)]
    #[case::shared(
        "Waiting for node n2.",
        Some("waiting for node n2: shared with maintenance other-nm")
    )]
    #[case::shared_owner(
        "Waiting for node n2 (other-nm).",
        Some("waiting for node n2: shared with maintenance other-nm")
    )]
    #[case::alone("Waiting for node n3.", Some("waiting for node n3"))]
    #[case::limited(
        "Evacuating (limited by other-nm)",
        Some("Evacuating (limited by other-nm)")
    )]
    fn node_notes(#[case] message: &str, #[case] note: Option<&str>) {
        let all = [holding("mine", "n2"), holding("other-nm", "n2")];
        assert_eq!(node_note(message, "mine", &all).as_deref(), note);
    }
}
