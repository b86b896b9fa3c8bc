//! Maintenance budgets across evictord restarts and leader changes (SPEC 6.1): a budget of two
//! over six one-node maintenances is never exceeded (cordoned nodes sampled every 100 ms) while
//! the leader is SIGKILLed, a new leader stops and a fresh replica takes over; two replicas
//! deciding at once without leader election never exceed it either; and an admission decided on
//! a stale copy of a maintenance is refused by its resourceVersion precondition.
//! The webhooks are served by a replica that runs no controller, so that killing the leaders
//! never blocks writes.

mod support;

use std::time::Duration;

use evictord::api::{NodeMaintenance, Stage};
use evictord::controller::node_maintenance::admitted::admitted_status;
use evictord::controller::node_maintenance::writes;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use support::Evictord;
use support::budget::{
    Sampler, admitted, budget, cordoned, drained, get, maintenance, pool, set_stage,
};
use support::evictord::{FAST, SpawnOptions, install_crds};

use support::wait::until;

const T: Duration = Duration::from_secs(90);
const LEADING: &str = "acquired leadership";

/// The tests of this binary run one at a time: each one's controllers would act on the
/// others' maintenances.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The replica serving the webhooks of this binary: no controller, never leads, registered by
/// URL once for all tests.
async fn webhook_server() {
    support::evictord::shared(&["--controllers=none"]).await;
}

fn replica_args(lease_ns: &str) -> Vec<String> {
    let mut args: Vec<String> = FAST.iter().map(|s| s.to_string()).collect();
    args.extend([
        "--leader-election".to_string(),
        "--lease-duration=4s".to_string(),
        "--leader-election-id=evictord-budgets".to_string(),
        format!("--leader-election-namespace={lease_ns}"),
        // Only the node maintenance controller: the other tests of this binary share the
        // control plane.
        "--controllers=nodemaintenance".to_string(),
    ]);
    args
}

fn spawn(c: &support::TestCluster, args: &[String]) -> Evictord {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Evictord::spawn(c, &args, SpawnOptions::default())
}

/// Completes every admitted, drained maintenance still in Drain; returns how many are
/// Complete.
async fn complete_drained(client: &Client, names: &[String]) -> usize {
    let mut complete = 0;
    for n in names {
        let Some(nm) = get(client, n).await else {
            continue;
        };
        match nm.spec.stage() {
            Stage::Complete => complete += 1,
            Stage::Drain if drained(&nm) => set_stage(client, n, Stage::Complete).await,
            _ => {}
        }
    }
    complete
}

/// Six one-node maintenances of the pool in Drain, `spaced` apart.
async fn six(client: &Client, nodes: &[String], prefix: &str, spaced: Duration) -> Vec<String> {
    let mut names = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let name = format!("{prefix}-m{}", i + 1);
        maintenance(client, &name, &[n.as_str()], Stage::Drain).await;
        names.push(name);
        tokio::time::sleep(spaced).await;
    }
    names
}

#[tokio::test]
async fn the_budget_holds_while_leaders_are_killed_stopped_and_replaced() {
    let _serial = SERIAL.lock().await;
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("failover").await;
    webhook_server().await;
    let args = replica_args(&ns);
    let mut a = spawn(c, &args);
    let mut b = spawn(c, &args);
    a.ready().await;
    b.ready().await;
    let nodes = pool(&client, "failover", 6).await;
    budget(&client, "failover", "failover", json!(2), json!([])).await;
    let sampler = Sampler::start(client.clone(), "failover", &[]);
    let names = six(&client, &nodes, "failover", Duration::from_millis(1100)).await;
    let mut replaced = false;
    let mut killed = false;
    let mut third: Option<Evictord> = None;
    // Complete the drained maintenances as they come, with the faults between rounds.
    for round in 0..60 {
        let complete = complete_drained(&client, &names).await;
        if complete == 6 {
            break;
        }
        if complete >= 1 && !killed {
            // SIGKILL whichever leads: the standby takes over once the lease expires.
            let leader = if a.logs().contains(LEADING) {
                &mut a
            } else {
                &mut b
            };
            leader.kill();
            killed = true;
        } else if complete >= 3 && !replaced {
            // SIGTERM the survivor (it releases the lease) and start a fresh replica.
            let survivor = if a.running() { &mut a } else { &mut b };
            let _ = survivor.stop();
            let fresh = spawn(c, &args);
            fresh.ready().await;
            third = Some(fresh);
            replaced = true;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(round < 59, "the roll did not finish");
    }
    until(T, "every node uncordoned", || async {
        let left = cordoned(&client, "failover").await;
        let done = complete_drained(&client, &names).await == 6;
        (left.is_empty() && done).then_some(())
    })
    .await;
    let (max, worst, samples) = sampler.finish().await;
    assert!(killed && replaced, "the faults were injected");
    assert!(samples > 20, "{samples} samples");
    assert!(
        max <= 2,
        "{max} nodes cordoned at once: {worst:?}\n--- third replica ---\n{}",
        third.as_ref().map(Evictord::logs).unwrap_or_default()
    );
    if let Some(mut t) = third {
        let _ = t.stop();
    }
}

#[tokio::test]
async fn two_replicas_deciding_at_once_never_exceed_the_budget() {
    let _serial = SERIAL.lock().await;
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    webhook_server().await;
    // No leader election: both replicas decide on every change, at the same moments.
    let args: Vec<String> = FAST
        .iter()
        .map(|s| s.to_string())
        .chain(["--controllers=nodemaintenance".to_string()])
        .collect();
    let mut a = spawn(c, &args);
    let mut b = spawn(c, &args);
    a.ready().await;
    b.ready().await;
    let nodes = pool(&client, "split", 6).await;
    budget(&client, "split", "split", json!(2), json!([])).await;
    let sampler = Sampler::start(client.clone(), "split", &[]);
    // Created all at once: both replicas see the same burst.
    let names = six(&client, &nodes, "split", Duration::ZERO).await;
    for round in 0..60 {
        if complete_drained(&client, &names).await == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(round < 59, "the roll did not finish");
    }
    until(T, "every node uncordoned", || async {
        cordoned(&client, "split").await.is_empty().then_some(())
    })
    .await;
    let (max, worst, _) = sampler.finish().await;
    let raced = [a.logs(), b.logs()]
        .iter()
        .map(|l| l.matches("admission raced another write").count())
        .sum::<usize>();
    eprintln!("admission write conflicts between the two replicas: {raced}");
    assert!(max <= 2, "{max} nodes cordoned at once: {worst:?}");
    let _ = a.stop();
    let _ = b.stop();
}

#[tokio::test]
async fn an_admission_decided_on_a_stale_copy_is_refused() {
    let _serial = SERIAL.lock().await;
    let c = support::cluster().await;
    install_crds(c).await;
    let client = c.client().await;
    webhook_server().await;
    let nodes = pool(&client, "stale", 1).await;
    // No controller runs: the test plays a decider whose copy goes stale.
    maintenance(&client, "stale-m1", &[nodes[0].as_str()], Stage::Drain).await;
    let stale: NodeMaintenance = get(&client, "stale-m1").await.unwrap();
    // Someone else writes meanwhile (another decider, or any writer of the object).
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            "stale-m1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let status = admitted_status(
        &stale,
        &[],
        &[nodes[0].clone()],
        &["stale".into()],
        jiff::Timestamp::now(),
    );
    let err = writes::write_status(&client, &Default::default(), &stale, &status)
        .await
        .expect_err("a write decided on a stale copy is refused");
    assert!(err.is_conflict(), "{err}");
    let now = get(&client, "stale-m1").await.unwrap();
    assert!(
        admitted(&now).is_none_or(|(s, _, _)| s != "True"),
        "not admitted"
    );
    assert!(cordoned(&client, "stale").await.is_empty());
    // Decided again on the current copy, it is written.
    let status = admitted_status(
        &now,
        &[],
        &[nodes[0].clone()],
        &["stale".into()],
        jiff::Timestamp::now(),
    );
    writes::write_status(&client, &Default::default(), &now, &status)
        .await
        .unwrap();
    set_stage(&client, "stale-m1", Stage::Complete).await;
}
