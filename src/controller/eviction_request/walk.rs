//! A simulated life of one request, driven by feeding each decision's status back in with an
//! advancing clock: two interceptors (the first completes, the second stays silent and times
//! out), then the controller as the imperative interceptor (eviction fails, backs off, succeeds)
//! and finally the pod goes away. Every status written is checked against the status admission
//! invariants the controller must keep.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::fixtures::{IMP, pod, request, t};
use super::*;
use crate::api::{EvictionRequest, EvictionRequestStatus};
use crate::cluster::{Allowance, CachedPod};

/// The world of the simulation: the stored request and what the shell observed.
struct World {
    request: EvictionRequest,
    pod: Option<CachedPod>,
    now: Timestamp,
    events: Vec<&'static str>,
    settings: DecideSettings,
}

impl World {
    /// Applies a decision as the shell would, checking the status transition first.
    fn apply(&mut self, d: &Decision) {
        if let Some(status) = &d.status {
            let old = self.request.status.clone().unwrap_or_default();
            assert_admissible(&old, status, &self.settings);
            self.request.status = Some(status.clone());
        }
        if let Some(labels) = &d.labels {
            self.request.metadata.labels = Some(labels.clone());
        }
        self.events.extend(d.events.iter().map(|e| e.reason));
    }

    /// One reconciliation at the current time; returns the decision.
    fn reconcile(&mut self) -> Decision {
        let d = decide(&self.request, self.pod.as_ref(), self.now, &self.settings);
        self.apply(&d);
        d
    }

    /// Advances the clock to the decision's requeue.
    fn wait(&mut self, d: &Decision) {
        let after = d.requeue_after.expect("something is pending");
        self.now = self.now.checked_add(after).unwrap();
    }

    fn status(&self) -> &EvictionRequestStatus {
        self.request.status.as_ref().unwrap()
    }

    fn active(&self) -> Vec<String> {
        self.status().active_interceptors.clone()
    }

    /// An interceptor writing its own entry, as the API server would accept it.
    fn interceptor_writes(
        &mut self,
        name: &str,
        edit: impl FnOnce(&mut crate::api::InterceptorStatus),
    ) {
        let status = self.request.status.as_mut().unwrap();
        let entry = status
            .interceptors
            .iter_mut()
            .find(|i| i.name == name)
            .unwrap();
        edit(entry);
    }
}

/// The status invariants of SPEC 2.2 that the controller's writes must keep (a test double of
/// the webhook's S1–S6, as far as they concern the controller).
fn assert_admissible(
    old: &EvictionRequestStatus,
    new: &EvictionRequestStatus,
    settings: &DecideSettings,
) {
    if !old.target_interceptors.is_empty() {
        assert_eq!(
            old.target_interceptors, new.target_interceptors,
            "S1 targetInterceptors immutable"
        );
    }
    assert_eq!(
        new.target_interceptors.last().map(|t| t.name.as_str()),
        Some(IMP),
        "S1 imperative last"
    );
    assert!(new.active_interceptors.len() <= 1, "S2 at most one active");
    assert!(
        new.processed_interceptors
            .starts_with(&old.processed_interceptors),
        "S3 append-only"
    );
    for added in &new.processed_interceptors[old.processed_interceptors.len()..] {
        assert!(
            old.active_interceptors.contains(added),
            "S3 added name was active"
        );
    }
    if let Some(y) = new.active_interceptors.first()
        && old.active_interceptors.first() != Some(y)
    {
        let k = new.processed_interceptors.len();
        assert_eq!(
            new.target_interceptors[k].name, *y,
            "S2 activates the next unprocessed"
        );
        assert!(
            new.interceptor(y).unwrap().activation_time.is_some(),
            "S2 activationTime with activation"
        );
    }
    let names = |s: &EvictionRequestStatus| {
        s.interceptors
            .iter()
            .map(|i| i.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(new),
        new.target_interceptors
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>(),
        "S4 names"
    );
    if !old.interceptors.is_empty() {
        for (o, n) in old.interceptors.iter().zip(&new.interceptors) {
            if o == n {
                continue;
            }
            let was_active = old.active_interceptors.contains(&o.name);
            let activated = new.active_interceptors.contains(&n.name) && !was_active;
            // The entry of the interceptor active before or after the update may change (the
            // controller starts its own imperative turn in the update that activates it); its
            // activationTime only in the update that activates it.
            assert!(
                was_active || activated,
                "S4 only the active entry changes: {}",
                o.name
            );
            if !activated {
                assert_eq!(
                    o.activation_time, n.activation_time,
                    "S4 activationTime only on activation: {}",
                    o.name
                );
            }
            if let (Some(oh), Some(nh)) = (&o.heartbeat_time, &n.heartbeat_time)
                && oh != nh
            {
                let step = Duration::try_from(nh.0.duration_since(oh.0)).unwrap();
                assert!(
                    step >= settings.min_heartbeat_interval,
                    "S4 heartbeat step {step:?}"
                );
            }
            if n.heartbeat_time.is_some() {
                assert!(n.start_time.is_some(), "S4 first heartbeat with startTime");
            }
        }
    }
    for c in &old.conditions {
        if c.status == "True" {
            assert!(new.is_true(&c.type_), "S5 {} stays True", c.type_);
        }
    }
    assert!(
        new.failed_evictions() >= old.failed_evictions(),
        "S6 counter never decreases"
    );
    assert!(
        new.observed_generation >= old.observed_generation,
        "S6 observedGeneration"
    );
}

#[test]
fn full_walk_two_interceptors_then_imperative_eviction() {
    let mut w = World {
        request: request("uid").build(),
        pod: Some(
            pod("p")
                .interceptors(&["a.example.com", "b.example.com"])
                .labels(&[("app", "web")])
                .build(),
        ),
        now: t(1),
        events: Vec::new(),
        settings: DecideSettings::default(),
    };

    // First sight: targets fixed, labels copied, the first interceptor activated.
    let d = w.reconcile();
    assert_eq!(w.active(), ["a.example.com"]);
    assert_eq!(w.request.metadata.labels.as_ref().unwrap()["app"], "web");
    assert_eq!(d.requeue_after, Some(Duration::from_secs(1200)));
    let again = w.reconcile();
    assert!(again.status.is_none() && again.events.is_empty() && again.action.is_none());
    assert_eq!(again.requeue_after, Some(Duration::from_secs(1200)));

    // The first interceptor works and completes; the second one is activated.
    w.now = t(30);
    w.interceptor_writes("a.example.com", |e| {
        e.start_time = Some(Time(t(30)));
        e.heartbeat_time = Some(Time(t(30)));
    });
    w.now = t(100);
    w.interceptor_writes("a.example.com", |e| e.completion_time = Some(Time(t(100))));
    let d = w.reconcile();
    assert_eq!(
        d.processed,
        vec![("a.example.com".to_string(), ProcessedReason::Completed)]
    );
    assert_eq!(w.active(), ["b.example.com"]);

    // The second one never heartbeats: at its deadline it times out and the controller takes over.
    w.wait(&d);
    assert_eq!(w.now, t(1300));
    let d = w.reconcile();
    assert_eq!(
        d.processed,
        vec![("b.example.com".to_string(), ProcessedReason::TimedOut)]
    );
    assert_eq!(w.active(), [IMP]);

    // In that same update it starts its turn and evicts; a PodDisruptionBudget refuses twice.
    let mut d = d;
    let mut failures = 0;
    let outcomes = [
        EvictionOutcome::Failed {
            status_code: 429,
            message: "PDB".into(),
            retry_after: None,
        },
        EvictionOutcome::Failed {
            status_code: 429,
            message: "PDB".into(),
            retry_after: Some(Duration::from_secs(10)),
        },
        EvictionOutcome::Evicted,
    ];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        if i > 0 {
            d = w.reconcile();
        }
        let Some(Action::Evict { uid, .. }) = &d.action else {
            panic!("expected an eviction at {}: {d:#?}", w.now)
        };
        assert_eq!(uid, "uid");
        let is_failure = matches!(outcome, EvictionOutcome::Failed { .. });
        let after = after_eviction(&w.request, outcome, w.now, &w.settings, Allowance::Unknown);
        w.apply(&after);
        if is_failure {
            failures += 1;
            assert_eq!(w.status().failed_evictions(), failures);
            // A reconcile triggered by some other event before the backoff elapses does nothing.
            let next = next_attempt_at(w.status(), w.settings.backoff_base, w.settings.backoff_cap)
                .unwrap();
            let retry_at = w.now.checked_add(after.requeue_after.unwrap()).unwrap();
            assert!(
                next <= retry_at,
                "the requeue honours the backoff (and Retry-After)"
            );
            w.now = next.checked_sub(Duration::from_secs(1)).unwrap();
            assert!(w.reconcile().action.is_none(), "retried early at {}", w.now);
            w.now = retry_at;
        }
    }
    assert_eq!(
        w.status()
            .interceptor(IMP)
            .unwrap()
            .start_time
            .as_ref()
            .map(|t| t.0),
        Some(t(1300))
    );

    // The pod terminates, then disappears: Evicted.
    w.pod.as_mut().unwrap().metadata.deletion_timestamp = Some(Time(w.now));
    assert!(w.reconcile().action.is_none());
    w.now = w.now.checked_add(Duration::from_secs(30)).unwrap();
    w.pod = None;
    let d = w.reconcile();
    assert!(w.status().is_true("Evicted"));
    assert!(w.active().is_empty());
    assert_eq!(d.requeue_after, None);
    assert!(w.reconcile().is_noop());

    assert_eq!(
        w.events,
        [
            "InterceptorSelected",
            "InterceptorCompleted",
            "InterceptorTimedOut",
            "EvictionFailed",
            "EvictionFailed",
            "Evicted",
            "Evicted",
        ]
    );
    assert_eq!(
        w.status().processed_interceptors,
        [
            "a.example.com",
            "b.example.com",
            "imperative-eviction.k8s.io"
        ],
        "the imperative interceptor had its turn: it is recorded as processed with Evicted"
    );
}

#[test]
fn restart_resumes_backoff_from_status() {
    // A fresh process sees only the stored status: 6 failures, the last at t(100).
    let r = request("uid")
        .targets(&[])
        .active(IMP)
        .started(IMP, t(90))
        .failures(6, Some(t(100)))
        .build();
    let p = pod("p").build();
    let s = DecideSettings::default();
    assert!(decide(&r, Some(&p), t(131), &s).action.is_none());
    assert_eq!(
        decide(&r, Some(&p), t(131), &s).requeue_after,
        Some(Duration::from_secs(1))
    );
    assert!(decide(&r, Some(&p), t(132), &s).action.is_some());
}
