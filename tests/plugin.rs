//! The kubectl plugin on a real control plane, run by the real `kubectl` binary from PATH
//! (`kubectl evictord ...`): a drain whose plain output names each blocker while it blocks and
//! that exits 0 once Drained, a preview whose order is the order in which the controller creates
//! the EvictionRequests, `evict`/`cancel`, `status`, `complete`, and errors that read well.
//! The live view under a pseudo-terminal is in `tests/plugin_screen.rs`.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use support::fixtures::{blocking_pdb, node, pdb_api, pod};
use support::interceptor::{now, write_when_active};
use support::plugin::{
    INTERCEPTOR, T, log_shows, plugin, plugin_command, record_request_order, scenario, setup, text,
};
use support::process::wait_exit;
use support::wait::until;

#[tokio::test]
async fn kubectl_evictord_drain_names_each_blocker_and_exits_when_drained() {
    let (client, ns) = setup("plugin-drain").await;
    let uid = scenario(&client, &ns, "plugin-n1").await;
    let steps = "--priority-steps=100,200,300";

    // The preview: nothing written, the pods in plan order, the blocking budget.
    let out = plugin(&["plan", "plugin-n1", steps, "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let planned: Vec<(String, u64)> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["step"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        planned,
        [
            ("plain".to_string(), 0),
            ("annotated".into(), 1),
            ("guarded".into(), 2)
        ],
        "{report:#}"
    );
    assert_eq!(
        report["blockingBudgets"][0]["name"], "guarded-pdb",
        "{report:#}"
    );
    assert_eq!(report["pods"][1]["interceptors"][0], INTERCEPTOR);
    let out = plugin(&["plan", "plugin-n1", steps]).await;
    let table = text(&out);
    assert!(
        out.status.success() && table.contains("guarded-pdb") && table.contains("ReplicaSet/web"),
        "{table}"
    );
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "plan wrote nothing"
    );

    let order = record_request_order(client.clone(), ns.clone(), 3);
    let c = support::cluster().await;
    let log = c.dir.join("plugin-drain.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = plugin_command(&[
        "drain",
        "plugin-n1",
        steps,
        "--name",
        "plugin-nm",
        "--reason",
        "test",
        "--timeout",
        "150s",
    ])
    .await
    .stdin(Stdio::null())
    .stdout(Stdio::from(file.try_clone().unwrap()))
    .stderr(Stdio::from(file))
    .spawn()
    .expect("kubectl evictord drain");

    // The interceptor holds the annotated pod: heartbeats twice, then completes.
    write_when_active(&api, &uid, INTERCEPTOR, |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
        e.message = Some("copying data".into());
    })
    .await;
    log_shows(&log, &format!("interceptor {INTERCEPTOR} active for")).await;
    log_shows(&log, "copying data").await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    write_when_active(&api, &uid, INTERCEPTOR, |e| e.heartbeat_time = Some(now())).await;
    // A new heartbeat is a new line.
    until(T, "a second line for the second heartbeat", || async {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        (out.matches(&format!("interceptor {INTERCEPTOR} active for"))
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    write_when_active(&api, &uid, INTERCEPTOR, |e| e.completion_time = Some(now())).await;

    // The budget holds the guarded pod until it is released.
    log_shows(
        &log,
        "PodDisruptionBudget guarded-pdb allows 0 disruptions (retry",
    )
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the drain waits for the budget"
    );
    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();

    let code = wait_exit(&mut child, &log, T).await;
    let out = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "drained:\n{out}");
    for needle in [
        "maintenance plugin-nm created for plugin-n1 (stage Cordon)",
        "node plugin-n1: pod",
        "node plugin-n1: 3/3 pods evicted",
        "maintenance plugin-nm: Drained",
    ] {
        assert!(out.contains(needle), "{needle:?} in:\n{out}");
    }
    assert!(
        !out.contains('\u{1b}'),
        "no terminal codes without a terminal:\n{out}"
    );
    println!("--- kubectl evictord drain (plain output) ---\n{out}");

    // The controller created the requests in the order of the preview.
    let order = order.await.unwrap();
    let names: Vec<&str> = order.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["plain", "annotated", "guarded"], "{out}");
    assert!(order.windows(2).all(|w| w[0].1.0 <= w[1].1.0), "{order:?}");

    let out = plugin(&["status", "-o", "json"]).await;
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "NodeMaintenance" && i["metadata"]["name"] == "plugin-nm"),
        "{list:#}"
    );
    let out = plugin(&["status"]).await;
    assert!(
        out.status.success() && text(&out).contains("plugin-nm"),
        "{}",
        text(&out)
    );
    let out = plugin(&["complete", "plugin-nm"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let nodes: Api<Node> = Api::all(client.clone());
    until(T, "the node uncordoned by Complete", || async {
        let n = nodes.get("plugin-n1").await.unwrap();
        (!n.spec.and_then(|s| s.unschedulable).unwrap_or(false)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn evict_and_cancel_from_the_terminal() {
    let (client, ns) = setup("plugin-evict").await;
    pod("short").create(&client, &ns).await;
    let out = plugin(&["evict", "short", "-n", &ns, "--wait", "--timeout", "60s"]).await;
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("created for pod short") && t.contains("evicted: the pod is gone"),
        "{t}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert!(pods.get_opt("short").await.unwrap().is_none());

    let held = pod("held")
        .interceptors(&["silent.example.com"])
        .create(&client, &ns)
        .await;
    let uid = held.metadata.uid.unwrap();
    let out = plugin(&["evict", "held", "-n", &ns, "--requester", "me.example.com"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let again = plugin(&["evict", "held", "-n", &ns, "-o", "json"]).await;
    assert!(text(&again).contains("joined"), "{}", text(&again));
    let printed: EvictionRequest = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(printed.spec.requesters.len(), 2, "{}", text(&again));
    let out = plugin(&["watch", "anything", "-o", "json"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "-o means nothing for watch: {}",
        text(&out)
    );
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let r = api.get(&uid).await.unwrap();
    let names: Vec<&str> = r.spec.requesters.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["me.example.com", "kubectl.evictord.dev"]);
    for requester in ["me.example.com", "kubectl.evictord.dev"] {
        let out = plugin(&["cancel", "held", "-n", &ns, "--requester", requester]).await;
        assert!(out.status.success(), "{}", text(&out));
    }
    until(
        T,
        "the request canceled once its last requester left",
        || async {
            api.get(&uid)
                .await
                .unwrap()
                .status
                .filter(|s| s.is_true("Canceled"))
        },
    )
    .await;
    let out = plugin(&["cancel", "held", "-n", &ns]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[tokio::test]
async fn errors_name_the_problem() {
    setup("plugin-errors").await;
    let out = plugin(&["drain", "no-such-node"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("error: no such node: no-such-node"),
        "{}",
        text(&out)
    );

    let out = plugin(&["plan", "-l", "evictord-test=none"]).await;
    assert!(
        text(&out).contains("no node matches the selector"),
        "{}",
        text(&out)
    );

    let out = plugin(&["plan"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    let out = plugin(&[
        "plan",
        "some-node",
        "--as",
        "system:serviceaccount:default:nobody",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("forbidden: you need permission to get nodes"),
        "{}",
        text(&out)
    );
}

/// A timeout and Ctrl-C stop watching only: the maintenance stays, and the plugin says how to
/// resume or undo.
#[tokio::test]
async fn watch_stops_on_timeout_and_ctrl_c_without_undoing() {
    let (client, _ns) = setup("plugin-watch").await;
    node("plugin-w1")
        .label("evictord-test", "plugin-w")
        .create(&client)
        .await;
    let nm = evictord::plugin::maintenance::maintenance_for(
        "plugin-watch-nm",
        &["plugin-w1".to_string()],
        &[],
        None,
        evictord::api::Stage::Cordon,
    );
    let api: Api<evictord::api::NodeMaintenance> = Api::all(client.clone());

    // A dry run goes through the webhook (the default plan is filled in) and writes nothing.
    let out = plugin(&["drain", "plugin-w1", "--dry-run", "--name", "plugin-dry"]).await;
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("kind: NodeMaintenance") && t.contains("podPriority: 2147483647"),
        "{t}"
    );
    assert!(api.get_opt("plugin-dry").await.unwrap().is_none(), "{t}");

    api.create(&PostParams::default(), &nm).await.unwrap();

    // The preview by selector names the maintenance already covering the node.
    let out = plugin(&["plan", "-l", "evictord-test=plugin-w", "-o", "yaml"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_norway::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["nodes"],
        serde_json::json!(["plugin-w1"]),
        "{report:#}"
    );
    assert_eq!(
        report["maintenances"],
        serde_json::json!([{"name": "plugin-watch-nm", "stage": "Cordon", "nodes": ["plugin-w1"]}]),
        "{report:#}"
    );

    let out = plugin(&["watch", "plugin-watch-nm", "--timeout", "2s"]).await;
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains("node plugin-w1: 0/0 pods evicted; stage Cordon"),
        "{t}"
    );
    assert!(
        t.contains("resume watching: kubectl evictord watch plugin-watch-nm"),
        "{t}"
    );

    let c = support::cluster().await;
    let log = c.dir.join("plugin-watch.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = plugin_command(&["watch", "plugin-watch-nm"])
        .await
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    log_shows(&log, "stage Cordon").await;
    // kubectl execs the plugin in its own process, so the signal reaches the plugin.
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let code = wait_exit(&mut child, &log, T).await;
    let t = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 130, "{t}");
    assert!(
        t.contains("nothing was undone")
            && t.contains(
                "undo (uncordon, withdraw requests): kubectl evictord complete plugin-watch-nm"
            ),
        "{t}"
    );
    assert!(api.get_opt("plugin-watch-nm").await.unwrap().is_some());
    let out = plugin(&["complete", "plugin-watch-nm"]).await;
    assert!(out.status.success(), "{}", text(&out));
}

/// A node that waits for another node of the same drain names the maintenances sharing that
/// node.
#[tokio::test]
async fn a_waiting_node_names_the_maintenance_it_shares_with() {
    let (client, ns) = setup("plugin-shared").await;
    node("plugin-s1").create(&client).await;
    node("plugin-s2").create(&client).await;
    pod("guarded")
        .on_node("plugin-s2")
        .replicaset("guarded")
        .label("app", "guarded")
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "guarded-pdb", "app", "guarded", 1).await;
    let other = evictord::plugin::maintenance::maintenance_for(
        "plugin-other-nm",
        &["plugin-s2".to_string()],
        &[],
        None,
        evictord::api::Stage::Drain,
    );
    let api: Api<evictord::api::NodeMaintenance> = Api::all(client.clone());
    api.create(&PostParams::default(), &other).await.unwrap();

    let c = support::cluster().await;
    let log = c.dir.join("plugin-shared.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = plugin_command(&[
        "drain",
        "plugin-s1",
        "plugin-s2",
        "--name",
        "plugin-shared-nm",
        "--timeout",
        "120s",
    ])
    .await
    .stdin(Stdio::null())
    .stdout(Stdio::from(file.try_clone().unwrap()))
    .stderr(Stdio::from(file))
    .spawn()
    .unwrap();
    log_shows(
        &log,
        "node plugin-s1: 0/0 pods evicted; waiting for node plugin-s2: shared with maintenance plugin-other-nm",
    )
    .await;
    log_shows(&log, "PodDisruptionBudget guarded-pdb allows 0 disruptions").await;
    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();
    let code = wait_exit(&mut child, &log, T).await;
    let out = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("node plugin-s2: 1/1 pods evicted"), "{out}");
    for name in ["plugin-shared-nm", "plugin-other-nm"] {
        let out = plugin(&["complete", name]).await;
        assert!(out.status.success(), "{}", text(&out));
    }
}
