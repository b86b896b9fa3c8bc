//! Table tests of the `endpoints.evictord.dev` decisions: one row per rule.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use rstest::rstest;
use serde_json::json;

use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn delay(secs: u64) -> Delay {
    Delay {
        value: Duration::from_secs(secs),
        problem: None,
    }
}

fn facts(gated: bool, serving: Serving, terminating: bool) -> Facts {
    Facts {
        pod: "ns/web-1".into(),
        gated,
        serving,
        terminating,
        delay: delay(30),
        turn_started: t(0),
    }
}

/// What a step is, for the rows: its kind and the end of a wait.
fn kind(step: &Step) -> (&'static str, Option<Timestamp>) {
    match step {
        Step::Complete { .. } => ("complete", None),
        Step::Wait { until, .. } => ("wait", *until),
        Step::CheckBudgets => ("budgets", None),
        Step::CheckEndpoints { .. } => ("endpoints", None),
    }
}

/// One row per rule of [`on_activation`], at `now` = t(now).
#[rstest]
// A terminating pod is going anyway.
#[case::terminating(facts(true, Serving::Leaving { since: t(0) }, true), 5, "complete", None)]
// No gate: the delay from the turn, nothing else.
#[case::ungated_waits(facts(false, Serving::Absent, false), 10, "wait", Some(t(31)))]
#[case::ungated_waits_the_second_after_its_turn(
    facts(false, Serving::Absent, false),
    30,
    "wait",
    Some(t(31))
)]
#[case::ungated_completes(facts(false, Serving::Absent, false), 31, "complete", None)]
// Serving (or not seen yet): the budgets decide whether it leaves.
#[case::serving(facts(true, Serving::True, false), 0, "budgets", None)]
#[case::not_seen_yet(facts(true, Serving::Absent, false), 0, "budgets", None)]
// Leaving: the Services decide.
#[case::leaving(facts(true, Serving::Leaving { since: t(3) }, false), 5, "endpoints", None)]
// Out: the delay from when it was seen out.
#[case::deregistering(facts(true, Serving::Deregistering { since: t(3), out: t(5) }, false), 20, "wait", Some(t(35)))]
#[case::delay_over(facts(true, Serving::Deregistering { since: t(3), out: t(5) }, false), 35, "complete", None)]
fn activation_rows(
    #[case] f: Facts,
    #[case] now: i64,
    #[case] expected: &str,
    #[case] until: Option<Timestamp>,
) {
    assert_eq!(kind(&on_activation(&f, t(now))), (expected, until));
}

#[test]
fn messages_say_why() {
    let Step::Complete { message, result } =
        on_activation(&facts(false, Serving::Absent, false), t(40))
    else {
        panic!("complete");
    };
    assert_eq!(result, Some("ungated"));
    assert!(
        message.contains("has no evictord.dev/serving readiness gate"),
        "{message}"
    );
    assert!(
        message.contains("waited the deregistration delay 30s only"),
        "{message}"
    );
    let mut f = facts(
        true,
        Serving::Deregistering {
            since: t(0),
            out: t(1),
        },
        false,
    );
    f.delay.problem = Some("evictord.dev/deregistration-delay \"x\" is not a duration".into());
    let Step::Wait { message, .. } = on_activation(&f, t(2)) else {
        panic!("wait");
    };
    assert!(message.contains("(evictord.dev/deregistration-delay \"x\" is not a duration)"));
    let Step::Complete { result, .. } = on_activation(&f, t(31)) else {
        panic!("complete");
    };
    assert_eq!(result, None, "counted when it was seen out");
}

fn pod() -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": "web-1", "namespace": "ns", "labels": {"app": "web"}}}),
    )
    .unwrap()
}

fn budget(name: &str, app: &str, allowed: i32, observed: bool) -> Budget {
    Budget {
        namespace: "ns".into(),
        name: name.into(),
        selector: Some(LabelSelector {
            match_labels: Some([("app".to_string(), app.to_string())].into()),
            ..Default::default()
        }),
        disruptions_allowed: allowed,
        observed,
        disrupted_pods: vec![],
    }
}

/// [`on_budgets`]: every selecting budget must allow one more disruption.
#[rstest]
#[case::no_budget(vec![], None)]
#[case::allows(vec![budget("web", "web", 1, true)], None)]
#[case::other_pods(vec![budget("db", "db", 0, true)], None)]
#[case::refuses(vec![budget("web", "web", 0, true)], Some("PodDisruptionBudget web allows 0 disruptions"))]
#[case::not_observed(vec![budget("web", "web", 1, false)], Some("PodDisruptionBudget web is not observed"))]
#[case::one_of_two(vec![budget("a", "web", 1, true), budget("b", "web", 0, true)], Some("PodDisruptionBudget b allows 0"))]
fn budget_rows(#[case] budgets: Vec<Budget>, #[case] waits: Option<&str>) {
    match (on_budgets(&pod(), "ns/web-1", &budgets), waits) {
        (BudgetStep::Leave, None) => {}
        (BudgetStep::Wait(m), Some(w)) => {
            assert!(m.contains(w), "{m}");
            assert!(m.starts_with("pod ns/web-1 still serves: "), "{m}");
        }
        (got, want) => panic!("{got:?}, want {want:?}"),
    }
}

fn view(name: &str, concern: Concern) -> ServiceView {
    ServiceView {
        name: name.into(),
        concern,
    }
}

const IN: Concern = Concern::Waited { ready: true };
const OUT: Concern = Concern::Waited { ready: false };

/// [`on_endpoints`]: out of every waited-for Service, or the bound passed; the others are named.
#[rstest]
#[case::out_of_all(vec![view("a", OUT), view("b", OUT)], 5, "out", "out of the ready endpoints of Service a, Service b; evicted after the deregistration delay 30s")]
#[case::no_service(vec![], 5, "out", "no Service selects it; evicted after")]
#[case::one_still_in(vec![view("a", OUT), view("b", IN)], 5, "wait", "waiting until Service b drop it from their ready addresses (Endpoints, EndpointSlices): 5s so far, at most 2m")]
#[case::skipped_named(vec![view("a", OUT), view("h", Concern::PublishesNotReady), view("m", Concern::NoSelector)], 5, "out", "; not waited for: Service h (publishNotReadyAddresses), Service m (no selector)")]
#[case::skipped_never_waited(vec![view("h", Concern::PublishesNotReady)], 5, "out", "no Service selects it; not waited for: Service h")]
#[case::bound_passed(vec![view("b", IN)], 120, "timed_out", "Service b still list it as a ready address after 2m; going on with the deregistration delay 30s anyway")]
fn endpoints_rows(
    #[case] services: Vec<ServiceView>,
    #[case] after: i64,
    #[case] expected: &str,
    #[case] message: &str,
) {
    let step = on_endpoints(
        "ns/web-1",
        &services,
        t(0),
        t(after),
        Duration::from_secs(120),
        Duration::from_secs(30),
    );
    let (got, text) = match step {
        EndpointsStep::Out {
            message,
            timed_out: false,
        } => ("out", message),
        EndpointsStep::Out {
            message,
            timed_out: true,
        } => ("timed_out", message),
        EndpointsStep::Wait(message) => ("wait", message),
    };
    assert_eq!(got, expected, "{text}");
    assert!(text.contains(message), "{text:?} lacks {message:?}");
}
