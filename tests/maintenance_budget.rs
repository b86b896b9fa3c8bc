//! Maintenance budgets on a real control plane (SPEC 6.1): NodeMaintenances admitted by
//! MaintenanceBudgets — never more nodes cordoned than a budget allows (sampled every 100 ms),
//! oldest first, the queue named in the conditions and node statuses, NotReady nodes counted,
//! nodes cordoned by hand not, TooLarge warned and skipped, windows closed and opening.
//! Fake Ready nodes without pods, so a maintenance in Drain is Drained as soon as it acts. Also
//! the nodes a maintenance holds out of external load balancers (SPEC 6.4).

mod support;

use std::future::Future;
use std::time::Duration;

use evictord::api::{MaintenanceBudget, NodeMaintenance, Stage};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::budget::{
    Sampler, admitted, budget, cordoned, drained, get, maintenance, pool, set_stage,
};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn setup() -> Client {
    let c = support::cluster().await;
    support::evictord::shared(support::evictord::FAST).await;
    c.client().await
}

async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let evictord = support::evictord::shared(support::evictord::FAST).await;
    support::wait::until_logged(TIMEOUT, what, || evictord.logs(), f).await
}

/// The names of the maintenances admitted now (Admitted=True).
async fn admitted_now(client: &Client, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        if let Some(nm) = get(client, n).await
            && admitted(&nm).is_some_and(|(s, _, _)| s == "True")
        {
            out.push(n.clone());
        }
    }
    out
}

/// Sets every maintenance of `names` that is admitted, in Drain and drained to Complete.
async fn complete_drained(client: &Client, names: &[String]) {
    for n in names {
        if let Some(nm) = get(client, n).await
            && admitted(&nm).is_some_and(|(s, _, _)| s == "True")
            && nm.spec.stage() == Stage::Drain
            && drained(&nm)
        {
            set_stage(client, n, Stage::Complete).await;
        }
    }
}

/// Six one-node maintenances `<prefix>-m1`..`m6` in Drain, created one after the other.
async fn six_maintenances(client: &Client, nodes: &[String], prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let name = format!("{prefix}-m{}", i + 1);
        maintenance(client, &name, &[n.as_str()], Stage::Drain).await;
        names.push(name);
        // Distinct creation times (seconds precision), so "oldest first" is by time, not name.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    names
}

#[tokio::test]
async fn six_maintenances_under_a_budget_of_two_roll_two_at_a_time_oldest_first() {
    let client = setup().await;
    let nodes = pool(&client, "roll", 6).await;
    budget(&client, "roll", "roll", json!(2), json!([])).await;
    let sampler = Sampler::start(client.clone(), "roll", &[]);
    let names = six_maintenances(&client, &nodes, "roll").await;
    // Two admitted and drained, four queued: the first in line names the budget and the nodes
    // that use it up, each of the others the maintenance just ahead of it (a message that stays
    // the same while the queue moves: no status write per queued maintenance at each turn).
    let ahead = |i: usize| {
        if i == 2 {
            "MaintenanceBudget roll allows 2 unavailable nodes".to_string()
        } else {
            format!(
                "MaintenanceBudget roll is kept for the older maintenance {}, which waits",
                names[i - 1]
            )
        }
    };
    eventually("two admitted and drained, four queued", || async {
        let mut admitted_names = Vec::new();
        let mut queued = 0;
        for (i, n) in names.iter().enumerate() {
            let nm = get(&client, n).await?;
            match admitted(&nm)? {
                (s, _, _) if s == "True" && drained(&nm) => admitted_names.push(n.clone()),
                (s, reason, message)
                    if s == "False"
                        && reason == "BudgetExhausted"
                        && message.contains(&ahead(i)) =>
                {
                    queued += 1
                }
                _ => return None,
            }
        }
        (admitted_names == names[..2] && queued == 4).then_some(())
    })
    .await;
    let last = get(&client, &names[5]).await.unwrap();
    // A queued maintenance touched nothing: its node is not cordoned, its node status says why.
    let third = get(&client, &names[2]).await.unwrap();
    let line = &third.status.as_ref().unwrap().node_statuses[0];
    assert!(
        line.drain_message.contains("roll-1: maintenance roll-m1"),
        "{}",
        line.drain_message
    );
    assert!(!cordoned(&client, "roll").await.contains(&nodes[2]));
    // Completing the drained ones admits the oldest queued, until all six are done.
    let mut order: Vec<String> = names[..2].to_vec();
    for round in 0..6 {
        if order.len() == 6 {
            break;
        }
        let before = order.len();
        let next = eventually(&format!("round {round}: the next admission"), || async {
            // The ones admitted in earlier rounds, on every look and not once per round: two
            // admitted together may not both have drained when the round begins, and then
            // nothing would free a place.
            complete_drained(&client, &order).await;
            let now = admitted_now(&client, &names).await;
            let new: Vec<String> = now.into_iter().filter(|n| !order.contains(n)).collect();
            (!new.is_empty()).then_some(new)
        })
        .await;
        order.extend(next);
        assert!(order.len() > before);
        if round == 0 {
            // The queue moved (m3 admitted, m1 and m2 given back); the last one, still behind
            // m5, was not written.
            let now = get(&client, &names[5]).await.unwrap();
            assert_eq!(
                (now.resource_version(), admitted(&now).map(|(_, _, m)| m)),
                (last.resource_version(), admitted(&last).map(|(_, _, m)| m)),
                "the last queued maintenance's status was written while it stayed behind m5"
            );
        }
    }
    assert_eq!(order, names, "admitted oldest first");
    for n in &names {
        set_stage(&client, n, Stage::Complete).await;
    }
    eventually("every node uncordoned", || async {
        cordoned(&client, "roll").await.is_empty().then_some(())
    })
    .await;
    let (max, worst, samples) = sampler.finish().await;
    assert!(samples > 20, "{samples} samples");
    assert!(max <= 2, "{max} nodes cordoned at once: {worst:?}");
    assert_eq!(max, 2, "two at a time");
    // The budget's status.
    let b: MaintenanceBudget = Api::<MaintenanceBudget>::all(client.clone())
        .get("roll")
        .await
        .unwrap();
    let status = b.status.unwrap();
    assert_eq!((status.selected_nodes, status.allowed_unavailable), (6, 2));
}

#[tokio::test]
async fn a_percentage_admits_that_share_of_the_pool() {
    let client = setup().await;
    let nodes = pool(&client, "half", 6).await;
    budget(&client, "half", "half", json!("50%"), json!([])).await;
    let sampler = Sampler::start(client.clone(), "half", &[]);
    let names: Vec<String> = {
        let mut v = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let name = format!("half-m{}", i + 1);
            maintenance(&client, &name, &[n.as_str()], Stage::Drain).await;
            v.push(name);
        }
        v
    };
    eventually("three admitted", || async {
        let now = admitted_now(&client, &names).await;
        (now.len() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(admitted_now(&client, &names).await.len(), 3);
    for n in &names {
        set_stage(&client, n, Stage::Complete).await;
    }
    let (max, worst, _) = sampler.finish().await;
    assert!(max <= 3, "{max}: {worst:?}");
}

#[tokio::test]
async fn a_not_ready_node_uses_up_the_budget_and_a_node_cordoned_by_hand_does_not() {
    let client = setup().await;
    let nodes = pool(&client, "hand", 4).await;
    // The whole pool cordoned by hand first (as a blue-green upgrade does), and one node NotReady.
    for n in &nodes {
        Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
    }
    support::fixtures::set_node_ready(&client, &nodes[3], false).await;
    budget(&client, "hand", "hand", json!(2), json!([])).await;
    let names = vec!["hand-m1".to_string(), "hand-m2".to_string()];
    maintenance(&client, &names[0], &[nodes[0].as_str()], Stage::Drain).await;
    maintenance(&client, &names[1], &[nodes[1].as_str()], Stage::Drain).await;
    // One admitted (NotReady hand-4 + hand-1 = 2); the other waits although every node is
    // cordoned: a node cordoned by hand is not counted.
    let message = eventually("one admitted, one queued by the NotReady node", || async {
        let first = get(&client, &names[0]).await?;
        let second = get(&client, &names[1]).await?;
        let (s1, _, _) = admitted(&first)?;
        let (s2, r2, m2) = admitted(&second)?;
        (s1 == "True" && s2 == "False" && r2 == "BudgetExhausted").then_some(m2)
    })
    .await;
    assert!(message.contains("hand-4: NotReady"), "{message}");
    let status = eventually("the budget lists the cordoned nodes", || async {
        let b = Api::<MaintenanceBudget>::all(client.clone())
            .get("hand")
            .await
            .ok()?;
        let s = b.status?;
        (s.current_unavailable == 2).then_some(s)
    })
    .await;
    assert_eq!(status.cordoned_nodes, [nodes[1].clone(), nodes[2].clone()]);
    // The node comes back: the second is admitted.
    support::fixtures::set_node_ready(&client, &nodes[3], true).await;
    eventually("the second admitted once the node is Ready", || async {
        let second = get(&client, &names[1]).await?;
        (admitted(&second)?.0 == "True").then_some(())
    })
    .await;
    for n in &names {
        set_stage(&client, n, Stage::Complete).await;
    }
}

#[tokio::test]
async fn a_maintenance_too_large_for_its_budget_is_warned_about_and_skipped() {
    let client = setup().await;
    let c = support::cluster().await;
    let nodes = pool(&client, "large", 4).await;
    budget(&client, "large", "large", json!(2), json!([])).await;
    // Created with kubectl, as a person would: the warning is printed.
    let manifest = json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "large-big"},
        "spec": {
            "nodeSelector": support::budget::by_name(&[&nodes[0], &nodes[1], &nodes[2]]),
            "stage": "Drain",
        },
    })
    .to_string();
    let out = support::tools::kubectl(c, &["create", "-f", "-"], Some(&manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("MaintenanceBudget large allows 2 unavailable nodes at once and this maintenance selects 3 of its nodes: it will never be admitted (rule N7)"),
        "{stderr}"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    maintenance(&client, "large-small", &[nodes[3].as_str()], Stage::Drain).await;
    let (reason, message) = eventually("TooLarge", || async {
        let big = get(&client, "large-big").await?;
        let (s, r, m) = admitted(&big)?;
        (s == "False" && r == "TooLarge").then_some((r, m))
    })
    .await;
    assert_eq!(reason, "TooLarge");
    assert!(message.contains("selects 3 of its nodes"), "{message}");
    // The younger one goes past it.
    eventually("the small one admitted past the large one", || async {
        let small = get(&client, "large-small").await?;
        (admitted(&small)?.0 == "True" && drained(&small)).then_some(())
    })
    .await;
    assert_eq!(cordoned(&client, "large").await, [nodes[3].clone()]);
    set_stage(&client, "large-small", Stage::Complete).await;
    set_stage(&client, "large-big", Stage::Complete).await;
    eventually("nothing cordoned", || async {
        cordoned(&client, "large").await.is_empty().then_some(())
    })
    .await;
}

/// A window that opens at the start of a minute 20-80 s from now, for one minute, in UTC; (schedule, when
/// it opens).
fn next_minute_window() -> (String, jiff::Timestamp) {
    // At least 20 s ahead, so that the queue is seen before it opens.
    let secs = jiff::Timestamp::now().as_second() + 20;
    let opens = jiff::Timestamp::from_second(secs - secs.rem_euclid(60) + 60).unwrap();
    let t = opens.to_zoned(jiff::tz::TimeZone::UTC);
    (format!("{} {} * * *", t.minute(), t.hour()), opens)
}

#[tokio::test]
async fn a_closed_window_admits_nothing_an_admitted_maintenance_carries_on_and_the_opening_admits()
{
    let client = setup().await;
    let nodes = pool(&client, "night", 3).await;
    budget(&client, "night", "night", json!(2), json!([])).await;
    maintenance(&client, "night-early", &[nodes[0].as_str()], Stage::Cordon).await;
    eventually("the early one admitted", || async {
        let nm = get(&client, "night-early").await?;
        (admitted(&nm)?.0 == "True").then_some(())
    })
    .await;
    // The window closes (it opens at the next minute only); the admitted one carries on.
    let (schedule, opens) = next_minute_window();
    Api::<MaintenanceBudget>::all(client.clone())
        .patch(
            "night",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"windows": [{"schedule": schedule, "duration": "1m"}]}})),
        )
        .await
        .unwrap();
    maintenance(&client, "night-late", &[nodes[1].as_str()], Stage::Drain).await;
    set_stage(&client, "night-early", Stage::Drain).await;
    eventually(
        "the early one drained while the late one is queued",
        || async {
            let early = get(&client, "night-early").await?;
            let late = get(&client, "night-late").await?;
            let (s, r, _) = admitted(&late)?;
            (drained(&early) && s == "False" && r == "OutsideWindow").then_some(())
        },
    )
    .await;
    if jiff::Timestamp::now() < opens {
        assert!(!cordoned(&client, "night").await.contains(&nodes[1]));
    }
    // The window opens: the late one is admitted (within a minute of waiting).
    let wait = Duration::try_from(opens.duration_since(jiff::Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(wait).await;
    eventually("the late one admitted when the window opened", || async {
        let late = get(&client, "night-late").await?;
        (admitted(&late)?.0 == "True").then_some(())
    })
    .await;
    let late: NodeMaintenance = get(&client, "night-late").await.unwrap();
    let when = late.status.unwrap().admission.unwrap().nodes[0]
        .admitted_time
        .clone()
        .unwrap()
        .0;
    assert!(
        when >= opens,
        "admitted at {when}, the window opened at {opens}"
    );
    set_stage(&client, "night-early", Stage::Complete).await;
    set_stage(&client, "night-late", Stage::Complete).await;
}

/// The exclusion label of a node (SPEC 6.4): `None` when absent.
async fn exclusion(client: &Client, node: &str) -> Option<String> {
    let n = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(node)
        .await
        .unwrap();
    n.metadata
        .labels
        .unwrap_or_default()
        .get(evictord::api::EXCLUDE_FROM_EXTERNAL_LB_LABEL)
        .cloned()
}

/// SPEC 6.4: a node an admitted maintenance holds is out of external load balancers; Complete
/// gives its label back — absent, or the value it had (kubeadm's empty one) — and keeps a value
/// someone else set meanwhile. A queued maintenance touches nothing.
#[tokio::test]
async fn a_held_node_is_out_of_external_load_balancers_until_complete() {
    let client = setup().await;
    let nodes = pool(&client, "lb", 3).await;
    let label = evictord::api::EXCLUDE_FROM_EXTERNAL_LB_LABEL;
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            &nodes[1],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: ""}}})),
        )
        .await
        .unwrap();
    budget(&client, "lb", "lb", json!(2), json!([])).await;
    for (i, n) in nodes.iter().enumerate() {
        maintenance(
            &client,
            &format!("lb-m{}", i + 1),
            &[n.as_str()],
            Stage::Cordon,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    eventually("the two admitted nodes excluded", || async {
        let a = exclusion(&client, &nodes[0]).await;
        let b = exclusion(&client, &nodes[1]).await;
        (a.as_deref() == Some("true") && b.as_deref() == Some("true")).then_some(())
    })
    .await;
    // The queued one touches nothing.
    assert_eq!(exclusion(&client, &nodes[2]).await, None);
    set_stage(&client, "lb-m1", Stage::Complete).await;
    eventually("the first back to no label, the third excluded", || async {
        let a = exclusion(&client, &nodes[0]).await;
        let c = exclusion(&client, &nodes[2]).await;
        (a.is_none() && c.as_deref() == Some("true")).then_some(())
    })
    .await;
    // Someone changes the third node's label during its maintenance: theirs is kept.
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            &nodes[2],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: "by-hand"}}})),
        )
        .await
        .unwrap();
    set_stage(&client, "lb-m2", Stage::Complete).await;
    set_stage(&client, "lb-m3", Stage::Complete).await;
    eventually(
        "kubeadm's empty value back, a change by hand kept",
        || async {
            let b = exclusion(&client, &nodes[1]).await;
            let c = exclusion(&client, &nodes[2]).await;
            let node = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
                .get(&nodes[2])
                .await
                .ok()?;
            let recorded = node
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key(evictord::api::EXCLUDE_FROM_EXTERNAL_LB_BEFORE_ANNOTATION);
            (b.as_deref() == Some("") && c.as_deref() == Some("by-hand") && !recorded).then_some(())
        },
    )
    .await;
}
