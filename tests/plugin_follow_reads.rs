//! `kubectl evictord drain` following its maintenance reads from watches (issue 44): a drain of 3
//! nodes (2 pods each) held 8 s by a PodDisruptionBudget, its requests counted from
//! kube-apiserver's audit log by the plugin's user agent. While it follows, the plugin sends
//! (almost) no LIST or GET: reading the cluster once a second sent about 9 (the maintenance, every
//! maintenance, every node, the pods of each node, every EvictionRequest, the budgets in two
//! versions). It still exits 0 once the maintenance is Drained. And a user who may list the
//! nodes but not watch them is stopped with the permission named, instead of shown the nodes as
//! they were.

mod support;

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::fixtures::{blocking_pdb, node, pdb_api, pod};
use support::plugin::{T, log_shows, plugin, plugin_command, plugin_requests, setup, text};
use support::process::wait_exit;
use support::wait::until;

/// How long the budget holds the drain while the requests are counted.
const HELD: Duration = Duration::from_secs(8);
/// The user who may list the nodes but not watch them (the other test's counts leave it out).
const NO_NODE_WATCH: &str = "follow-reads-no-node-watch";

#[tokio::test]
async fn following_a_drain_does_not_list_every_second() {
    support::control_plane::cluster_with_request_audit().await;
    let (client, ns) = setup("follow-reads").await;
    for i in 1..=3 {
        let n = format!("follow-reads-{i}");
        node(&n)
            .label("evictord-test", "follow-reads")
            .create(&client)
            .await;
        for j in 1..=2 {
            let mut p = pod(&format!("web-{i}-{j}"))
                .on_node(&n)
                .replicaset(&format!("web-{i}"));
            if i == 3 && j == 2 {
                p = p.label("app", "guarded");
            }
            p.create(&client, &ns).await;
        }
    }
    blocking_pdb(&client, &ns, "guarded-pdb", "app", "guarded", 1).await;

    let c = support::cluster().await;
    let log = c.dir.join("follow-reads.log");
    let file = std::fs::File::create(&log).unwrap();
    let began = SystemTime::now();
    let mut child = plugin_command(&[
        "drain",
        "-l",
        "evictord-test=follow-reads",
        "--name",
        "follow-reads-nm",
        "--timeout",
        "150s",
    ])
    .await
    .stdin(Stdio::null())
    .stdout(Stdio::from(file.try_clone().unwrap()))
    .stderr(Stdio::from(file))
    .spawn()
    .expect("kubectl evictord drain");

    // Following: the budget holds the last pod; the requests of these seconds are counted.
    log_shows(
        &log,
        "PodDisruptionBudget guarded-pdb allows 0 disruptions (retry",
    )
    .await;
    let from = SystemTime::now();
    tokio::time::sleep(HELD).await;
    let to = SystemTime::now();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the drain waits for the budget:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();
    let code = wait_exit(&mut child, &log, T).await;
    let ended = SystemTime::now();
    let out = std::fs::read_to_string(&log).unwrap();
    println!("--- kubectl evictord drain ---\n{out}");
    assert_eq!(code, 0, "drained:\n{out}");
    for needle in [
        "node follow-reads-3: 2/2 pods evicted",
        "maintenance follow-reads-nm: Drained",
    ] {
        assert!(out.contains(needle), "{needle:?} in:\n{out}");
    }

    let reads = |from: SystemTime, to: SystemTime| -> Vec<String> {
        plugin_requests(c, from, to)
            .into_iter()
            .filter(|r| r.user != NO_NODE_WATCH && (r.verb == "list" || r.verb == "get"))
            .map(|r| format!("{} {}", r.verb, r.uri))
            .collect()
    };
    let held = reads(from, to);
    let run = reads(began, ended);
    let watches = plugin_requests(c, began, ended)
        .iter()
        .filter(|r| r.user != NO_NODE_WATCH && r.verb == "watch")
        .count();
    println!(
        "the plugin's reads: {} LIST/GET in the {} s held, {} LIST/GET and {watches} watches in the whole run ({:.1} s)",
        held.len(),
        HELD.as_secs(),
        run.len(),
        ended.duration_since(began).unwrap().as_secs_f64()
    );
    for r in &run {
        println!("  {r}");
    }
    // A redraw reads the watches' stores; a read in these seconds is a watch that re-listed.
    assert!(
        held.len() <= 4,
        "the plugin read {} times in {} s while following:\n{}",
        held.len(),
        HELD.as_secs(),
        held.join("\n")
    );
    assert!(
        run.len() <= 40,
        "the plugin read {} times in the whole drain:\n{}",
        run.len(),
        run.join("\n")
    );

    let out = plugin(&["complete", "follow-reads-nm"]).await;
    assert!(out.status.success(), "{}", text(&out));
}

#[tokio::test]
async fn a_refused_watch_of_the_nodes_names_the_permission() {
    support::control_plane::cluster_with_request_audit().await;
    let (client, _ns) = setup("follow-refused").await;
    node("follow-refused-1").create(&client).await;
    let nm = evictord::plugin::maintenance::maintenance_for(
        "follow-refused-nm",
        &["follow-refused-1".to_string()],
        &[],
        None,
        evictord::api::Stage::Cordon,
    );
    let maintenances: Api<evictord::api::NodeMaintenance> = Api::all(client.clone());
    maintenances
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    let all = ["get", "list", "watch"];
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": NO_NODE_WATCH},
        "rules": [
            {"apiGroups": ["evictord.dev"], "resources": ["nodemaintenances", "evictionrequests"], "verbs": all},
            {"apiGroups": [""], "resources": ["pods"], "verbs": all},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        ],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": NO_NODE_WATCH},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NO_NODE_WATCH},
        "subjects": [{"kind": "User", "name": NO_NODE_WATCH, "apiGroup": "rbac.authorization.k8s.io"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // Until the authorizer has seen the binding, the plugin is refused its first GET.
    let wanted = "forbidden: you need permission to watch nodes";
    let t = until(T, "the watch of the nodes refused, by name", || async {
        let out = plugin(&[
            "watch",
            "follow-refused-nm",
            "--as",
            NO_NODE_WATCH,
            "--timeout",
            "60s",
        ])
        .await;
        let t = text(&out);
        (out.status.code() == Some(1) && t.contains(wanted)).then_some(t)
    })
    .await;
    println!("{t}");

    Api::<ClusterRoleBinding>::all(client.clone())
        .delete(NO_NODE_WATCH, &Default::default())
        .await
        .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .delete(NO_NODE_WATCH, &Default::default())
        .await
        .unwrap();
    maintenances
        .delete("follow-refused-nm", &Default::default())
        .await
        .unwrap();
}
