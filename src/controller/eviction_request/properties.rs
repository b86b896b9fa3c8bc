//! Property tests of the eviction request controller against the real status webhook: random
//! lives of one request (interceptors that heartbeat, complete or fall silent, Eviction API
//! answers, the pod terminating or vanishing, the clock jumping) are driven through [`decide`]
//! and [`after_eviction`], and every write is reviewed by `review_eviction_request`, as
//! kube-apiserver would send it.
//!
//! Each life runs under one `--interceptor-registration` mode with some of its interceptors
//! registered (SPEC 5.5); the controller writes as evictord, an interceptor as its service
//! account, so rules S2 and S7 see both.
//!
//! Properties:
//! - every status write of the controller is admitted (its own writes always pass);
//! - the Eviction API is called only when the imperative interceptor is active and every earlier
//!   interceptor is processed, having completed, timed out or (under `enforce`) gone unregistered
//!   past the grace;
//! - no Eviction API call after the pod was evicted (terminating or gone) or the request ended.

use std::cell::Cell;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::admission::Operation;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::fixtures::{IMP, pod, request, t};
use super::*;
use crate::admission::eviction_request::review_eviction_request;
use crate::admission::{ReviewRequest, Settings, Verdict};
use crate::api::{
    EvictionInterceptor, EvictionInterceptorSpec, EvictionRequest, InterceptorStatus, Registration,
    RegistrationMode, ServiceAccountReference,
};
use crate::cluster::{CachedPod, StaticView};

/// One thing that happens between two reconciliations.
#[derive(Clone, Debug)]
enum Event {
    /// The clock moves on.
    Wait(i64),
    /// The active interceptor (not the imperative one) writes its entry.
    Interceptor(Write),
    /// The pod starts terminating (someone deleted it).
    PodTerminates,
    /// The pod is gone.
    PodVanishes,
    /// The pod's containers exited.
    PodSucceeds,
}

/// What an interceptor writes into its own entry.
#[derive(Clone, Copy, Debug)]
enum Write {
    Start,
    Heartbeat,
    Complete,
    ExpectFinishIn(i64),
}

/// What the Eviction API answers.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Evicted,
    TooManyRequests { retry_after: Option<u64> },
    Gone,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (0i64..1500).prop_map(Event::Wait),
        6 => prop_oneof![
            Just(Write::Start),
            Just(Write::Heartbeat),
            Just(Write::Complete),
            (0i64..3600).prop_map(Write::ExpectFinishIn),
        ]
        .prop_map(Event::Interceptor),
        1 => Just(Event::PodTerminates),
        1 => Just(Event::PodVanishes),
        1 => Just(Event::PodSucceeds),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        2 => Just(Answer::Evicted),
        3 => proptest::option::of(0u64..120)
            .prop_map(|retry_after| Answer::TooManyRequests { retry_after }),
        1 => Just(Answer::Gone),
    ]
}

/// A life: how many interceptors the pod declares, the heartbeat deadline, the events, and the
/// Eviction API's answers in order.
#[derive(Clone, Debug)]
struct Life {
    interceptors: usize,
    deadline_seconds: Option<i32>,
    events: Vec<Event>,
    answers: Vec<Answer>,
    mode: RegistrationMode,
    /// Which of [`NAMES`] an EvictionInterceptor registers.
    registered: [bool; 3],
}

fn life() -> impl Strategy<Value = Life> {
    (
        0usize..4,
        proptest::option::of(600i32..1300),
        proptest::collection::vec(event(), 1..40),
        proptest::collection::vec(answer(), 1..8),
        prop_oneof![
            Just(RegistrationMode::Off),
            Just(RegistrationMode::Warn),
            Just(RegistrationMode::Enforce),
        ],
        proptest::array::uniform3(any::<bool>()),
    )
        .prop_map(
            |(interceptors, deadline_seconds, events, answers, mode, registered)| Life {
                interceptors,
                deadline_seconds,
                events,
                answers,
                mode,
                registered,
            },
        )
}

/// evictord's own user name in these lives.
const EVICTORD: &str = "system:serviceaccount:evictord:evictord";

/// The service account of an interceptor of [`NAMES`]: `interceptors/<first label>`.
fn account(name: &str) -> ServiceAccountReference {
    ServiceAccountReference {
        namespace: "interceptors".into(),
        name: name.split('.').next().unwrap_or_default().into(),
    }
}

const NAMES: [&str; 3] = ["a.example.com", "b.example.com", "c.example.com"];

/// What one life showed, for the non-vacuity checks.
#[derive(Default)]
struct Seen {
    evictions: usize,
    interceptor_writes_admitted: usize,
    /// Unregistered interceptors passed over after the grace (`enforce`).
    passed_over: usize,
}

struct Sim {
    request: EvictionRequest,
    pod: Option<CachedPod>,
    now: Timestamp,
    settings: DecideSettings,
    review_settings: Settings,
    /// The registrations the webhook sees.
    view: StaticView,
    registered: [bool; 3],
    /// The Eviction API accepted the eviction (or said the pod was gone).
    evicted: bool,
    seen: Seen,
}

impl Sim {
    fn new(life: &Life) -> Self {
        let mut builder = request("uid");
        if let Some(s) = life.deadline_seconds {
            builder = builder.deadline_seconds(s);
        }
        let settings = DecideSettings {
            interceptor_registration: life.mode,
            ..DecideSettings::default()
        };
        let registrations = NAMES
            .iter()
            .zip(life.registered)
            .filter(|(_, r)| *r)
            .map(|(n, _)| {
                EvictionInterceptor::new(
                    n,
                    EvictionInterceptorSpec {
                        service_accounts: vec![account(n)],
                    },
                )
            });
        Sim {
            request: builder.build(),
            pod: Some(pod("p").interceptors(&NAMES[..life.interceptors]).build()),
            now: t(1),
            review_settings: Settings {
                min_heartbeat_interval: settings.min_heartbeat_interval,
                interceptor_deadline: settings.interceptor_deadline,
                interceptor_registration: life.mode,
                unregistered_interceptor_grace: settings.unregistered_interceptor_grace,
                own_user: Some(EVICTORD.into()),
                ..Settings::default()
            },
            view: StaticView::with_objects([], [], [], []).with_interceptors(registrations),
            registered: life.registered,
            settings,
            evicted: false,
            seen: Seen::default(),
        }
    }

    fn is_registered(&self, name: &str) -> bool {
        NAMES
            .iter()
            .position(|n| *n == name)
            .is_some_and(|i| self.registered[i])
    }

    fn registration(&self, name: &str) -> Registration {
        Registration::of(name, Some(self.is_registered(name)))
    }

    /// The status webhook's verdict on replacing the stored request by `new`, written by `user`.
    fn review(&self, new: &EvictionRequest, user: &str) -> Verdict {
        let user = UserInfo {
            username: Some(user.into()),
            ..UserInfo::default()
        };
        let req = ReviewRequest {
            operation: Operation::Update,
            sub_resource: Some("status"),
            namespace: new.metadata.namespace.as_deref(),
            name: new.metadata.name.as_deref().unwrap_or_default(),
            object: Some(new),
            old_object: Some(&self.request),
            user: &user,
            dry_run: false,
            now: self.now,
        };
        review_eviction_request(&req, &self.view, &self.review_settings)
    }

    /// Applies a decision of the controller; its status write must be admitted.
    fn apply(&mut self, d: &Decision) -> Result<(), TestCaseError> {
        if let Some(status) = &d.status {
            let mut new = self.request.clone();
            new.status = Some(status.clone());
            let verdict = self.review(&new, EVICTORD);
            prop_assert!(
                verdict.allowed(),
                "the controller's own write was denied at {}: {:?}\nold: {:#?}\nnew: {:#?}",
                self.now,
                verdict.denied,
                self.request.status,
                status
            );
            self.request = new;
        }
        if let Some(labels) = &d.labels {
            self.request.metadata.labels = Some(labels.clone());
        }
        Ok(())
    }

    /// The checks on an Eviction API call, made with the status as the shell has written it.
    fn check_eviction(&self) -> Result<(), TestCaseError> {
        prop_assert!(
            !self.evicted,
            "an Eviction API call after the pod was evicted"
        );
        let pod = self.pod.as_ref();
        prop_assert!(
            pod.is_some_and(|p| !p.is_terminating() && !p.is_terminal()),
            "an Eviction API call for a pod that is gone, terminating or terminated: {pod:?}"
        );
        let status = self.request.status.clone().unwrap_or_default();
        prop_assert!(
            !status.is_terminal(),
            "an Eviction API call on an ended request"
        );
        prop_assert_eq!(status.active_interceptors.as_slice(), [IMP.to_string()]);
        let earlier = &status.target_interceptors[..status.target_interceptors.len() - 1];
        prop_assert_eq!(
            status.processed_interceptors.len(),
            earlier.len(),
            "every earlier interceptor is processed"
        );
        for target in earlier {
            let entry = status.interceptor(&target.name);
            let passed = |end: Option<Timestamp>| end.is_some_and(|end| end <= self.now);
            let done = entry.is_some_and(|e| {
                e.completion_time.is_some()
                    || passed(heartbeat_deadline_at(
                        &self.request,
                        e,
                        self.settings.interceptor_deadline,
                    ))
                    || (self.settings.interceptor_registration.enforces()
                        && !self.is_registered(&e.name)
                        && passed(self.request.unregistered_grace_end_at(
                            e,
                            self.settings.unregistered_interceptor_grace,
                        )))
            });
            prop_assert!(
                done,
                "{} neither completed, timed out nor went unregistered past the grace before the \
                 Eviction API call at {}: {entry:?}",
                target.name,
                self.now
            );
        }
        Ok(())
    }

    /// One reconciliation, with the Eviction API call and its answer when one is decided.
    fn reconcile(
        &mut self,
        answers: &mut impl Iterator<Item = Answer>,
    ) -> Result<(), TestCaseError> {
        let registration = |name: &str| self.registration(name);
        let surroundings = Surroundings {
            node_agent: false,
            registration: &registration,
            budgets: crate::cluster::Allowance::Unknown,
            unreachable_until: None,
        };
        let d = decide_with(
            &self.request,
            self.pod.as_ref(),
            &surroundings,
            self.now,
            &self.settings,
        );
        self.seen.passed_over += d
            .processed
            .iter()
            .filter(|(_, r)| *r == ProcessedReason::NotRegistered)
            .count();
        self.apply(&d)?;
        let Some(Action::Evict { uid, .. }) = &d.action else {
            return Ok(());
        };
        prop_assert_eq!(uid.as_str(), "uid");
        self.check_eviction()?;
        self.seen.evictions += 1;
        let outcome = match answers.next().unwrap_or(Answer::Evicted) {
            Answer::Evicted => {
                self.evicted = true;
                if let Some(p) = self.pod.as_mut() {
                    p.metadata.deletion_timestamp = Some(Time(self.now));
                }
                EvictionOutcome::Evicted
            }
            Answer::TooManyRequests { retry_after } => EvictionOutcome::Failed {
                status_code: 429,
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                retry_after: retry_after.map(Duration::from_secs),
            },
            Answer::Gone => {
                self.evicted = true;
                self.pod = None;
                EvictionOutcome::PodGone
            }
        };
        let after = after_eviction(
            &self.request,
            outcome,
            self.now,
            &self.settings,
            crate::cluster::Allowance::Unknown,
        );
        self.apply(&after)
    }

    /// The active interceptor, unless it is the imperative one, writes its entry; applied only
    /// when the webhook admits it (a real interceptor's denied write changes nothing).
    fn interceptor_writes(&mut self, write: Write) {
        let Some(status) = self.request.status.as_ref() else {
            return;
        };
        let Some(active) = status.active_interceptors.first().cloned() else {
            return;
        };
        if active == IMP {
            return;
        }
        let now = Time(self.now);
        let mut new = self.request.clone();
        let Some(entry) = new
            .status
            .as_mut()
            .and_then(|s| s.interceptors.iter_mut().find(|i| i.name == active))
        else {
            return;
        };
        edit(entry, write, now);
        if self.review(&new, &account(&active).username()).allowed() {
            self.seen.interceptor_writes_admitted += 1;
            self.request = new;
        }
    }

    fn run(mut self, life: &Life) -> Result<Seen, TestCaseError> {
        let mut answers = life.answers.iter().copied();
        self.reconcile(&mut answers)?;
        for event in &life.events {
            match *event {
                Event::Wait(secs) => {
                    self.now = self
                        .now
                        .checked_add(Duration::from_secs(secs as u64))
                        .unwrap()
                }
                Event::Interceptor(write) => self.interceptor_writes(write),
                Event::PodTerminates => {
                    self.evicted = true;
                    if let Some(p) = self.pod.as_mut() {
                        p.metadata.deletion_timestamp = Some(Time(self.now));
                    }
                }
                Event::PodVanishes => {
                    self.evicted = true;
                    self.pod = None;
                }
                Event::PodSucceeds => {
                    self.evicted = true;
                    if let Some(p) = self.pod.as_mut() {
                        p.status.phase = Some("Succeeded".into());
                    }
                }
            }
            self.reconcile(&mut answers)?;
        }
        // The pod leaves in the end: the request must end Evicted, and nothing more is called.
        self.pod = None;
        self.evicted = true;
        self.now = self.now.checked_add(Duration::from_secs(1)).unwrap();
        self.reconcile(&mut answers)?;
        let status = self.request.status.clone().unwrap_or_default();
        prop_assert!(status.is_terminal(), "the request did not end: {status:#?}");
        prop_assert!(status.active_interceptors.is_empty());
        Ok(self.seen)
    }
}

fn edit(entry: &mut InterceptorStatus, write: Write, now: Time) {
    match write {
        Write::Start => {
            entry.start_time = Some(now.clone());
            entry.heartbeat_time = Some(now);
        }
        Write::Heartbeat => entry.heartbeat_time = Some(now),
        Write::Complete => entry.completion_time = Some(now),
        Write::ExpectFinishIn(secs) => {
            entry.expected_finish_time = Some(Time(
                now.0.checked_add(Duration::from_secs(secs as u64)).unwrap(),
            ))
        }
    }
}

#[test]
fn the_controller_writes_pass_admission_and_evicts_only_after_every_earlier_interceptor() {
    let mut runner = TestRunner::new(Config {
        cases: 1000,
        // Failures are reported with their minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..Config::default()
    });
    // `run` takes a `Fn`: the totals are kept in cells.
    let (evictions, lives_with_eviction, interceptor_writes, passed_over) =
        (Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0));
    runner
        .run(&life(), |life| {
            let seen = Sim::new(&life).run(&life)?;
            evictions.set(evictions.get() + seen.evictions);
            lives_with_eviction.set(lives_with_eviction.get() + usize::from(seen.evictions > 0));
            interceptor_writes.set(interceptor_writes.get() + seen.interceptor_writes_admitted);
            passed_over.set(passed_over.get() + seen.passed_over);
            Ok(())
        })
        .unwrap();
    let (evictions, lives_with_eviction, interceptor_writes) = (
        evictions.get(),
        lives_with_eviction.get(),
        interceptor_writes.get(),
    );
    // Not vacuous: many lives reach the Eviction API, and interceptors do get writes in.
    assert!(
        lives_with_eviction >= 200 && evictions >= 300,
        "{lives_with_eviction} lives with {evictions} evictions"
    );
    assert!(
        interceptor_writes >= 500,
        "{interceptor_writes} interceptor writes admitted"
    );
    assert!(
        passed_over.get() >= 50,
        "{} unregistered interceptors passed over",
        passed_over.get()
    );
}
