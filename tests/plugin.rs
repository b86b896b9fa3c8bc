//! The kubectl plugin on a real control plane, run by the real `kubectl` binary from PATH
//! (`kubectl evictord ...`): a drain whose plain output names each blocker while it blocks and
//! that exits 0 once Drained, a preview whose order is the order in which the controller creates
//! the EvictionRequests, `evict`/`cancel`, `status`, `complete`, and errors that read well.
//! `live_view_under_tmux` (ignored; `make plugin-screen`) captures the live view as a person
//! sees it, in a tmux pseudo-terminal.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use support::fixtures::{blocking_pdb, node, pdb_api, pod, priority_class};
use support::interceptor::{now, write_when_active};
use support::process::wait_exit;
use support::tools::kubectl_command;
use support::wait::until;

const T: Duration = Duration::from_secs(90);
const FLAGS: &[&str] = &[
    "--interceptor-deadline=60s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=2s",
];
const INTERCEPTOR: &str = "hold.example.com";

async fn setup(prefix: &str) -> (Client, String) {
    support::evictord::shared(FLAGS).await;
    let c = support::cluster().await;
    (c.client().await, c.namespace(prefix).await)
}

/// A directory holding only the plugin, put in front of PATH: kubectl finds it there.
fn plugin_path() -> String {
    let dir = std::env::temp_dir().join(format!("evictord-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl-evictord");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubectl-evictord"), &link).unwrap();
    }
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `kubectl evictord ARGS` through the real kubectl.
async fn plugin_command(args: &[&str]) -> Command {
    let c = support::cluster().await;
    let mut full = vec!["evictord"];
    full.extend_from_slice(args);
    let mut cmd = kubectl_command(c, &full);
    cmd.env("PATH", plugin_path());
    cmd
}

async fn plugin(args: &[&str]) -> Output {
    plugin_command(args)
        .await
        .stdin(Stdio::null())
        .output()
        .expect("kubectl evictord")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits until the log file contains `needle`.
async fn log_shows(log: &std::path::Path, needle: &str) {
    until(
        T,
        &format!("the plugin's output to show {needle:?}"),
        || async {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .contains(needle)
                .then_some(())
        },
    )
    .await;
}

/// The drain scenario: on `node`, `plain` (priority 100), `annotated` (200, waits for
/// [`INTERCEPTOR`]) and `guarded` (300, blocked by PodDisruptionBudget `guarded-pdb`).
async fn scenario(client: &Client, ns: &str, node_name: &str) -> String {
    node(node_name).create(client).await;
    priority_class(client, "plugin-100", 100).await;
    priority_class(client, "plugin-200", 200).await;
    priority_class(client, "plugin-300", 300).await;
    pod("plain")
        .on_node(node_name)
        .replicaset("web")
        .priority_class("plugin-100")
        .create(client, ns)
        .await;
    let annotated = pod("annotated")
        .on_node(node_name)
        .priority_class("plugin-200")
        .interceptors(&[INTERCEPTOR])
        .create(client, ns)
        .await;
    pod("guarded")
        .on_node(node_name)
        .label("app", "guarded")
        .priority_class("plugin-300")
        .create(client, ns)
        .await;
    blocking_pdb(client, ns, "guarded-pdb", "app", "guarded", 1).await;
    annotated.metadata.uid.unwrap()
}

/// Records the order in which EvictionRequests appear in `ns` (by target pod), until `n` did.
fn record_request_order(
    client: Client,
    ns: String,
    n: usize,
) -> tokio::task::JoinHandle<Vec<(String, Time)>> {
    tokio::spawn(async move {
        let api: Api<EvictionRequest> = Api::namespaced(client, &ns);
        let mut seen: Vec<(String, Time)> = Vec::new();
        // 150 s at most, 100 ms apart.
        for _ in 0..1500 {
            if let Ok(list) = api.list(&ListParams::default()).await {
                let mut new: Vec<&EvictionRequest> = list
                    .items
                    .iter()
                    .filter(|r| !seen.iter().any(|(p, _)| *p == r.spec.target.pod.name))
                    .collect();
                new.sort_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0));
                for r in new {
                    seen.push((
                        r.spec.target.pod.name.clone(),
                        r.metadata.creation_timestamp.clone().unwrap(),
                    ));
                }
            }
            if seen.len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    })
}

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
    let again = plugin(&["evict", "held", "-n", &ns]).await;
    assert!(text(&again).contains("joined"), "{}", text(&again));
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
    node("plugin-w1").create(&client).await;
    let nm = evictord::plugin::preview::maintenance_for(
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

/// Where the screen capture goes: `$CARGO_TARGET_DIR` (or `target`) `/plugin-screen.txt`.
fn capture_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("plugin-screen.txt")
}

fn tmux(args: &[&str]) -> Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux (install it: tests/tools/tmux.sh)")
}

/// The live view in a pseudo-terminal (tmux, 120×16), captured while the budget and the
/// interceptor hold the drain up and again once it is drained; the first capture is written to
/// [`capture_path`] for the README. `make plugin-screen` runs it.
#[tokio::test]
#[ignore = "needs tmux; run by `make plugin-screen`"]
async fn live_view_under_tmux() {
    let (client, ns) = setup("plugin-tmux").await;
    let uid = scenario(&client, &ns, "plugin-tty").await;
    let c = support::cluster().await;
    let session = format!("evictord-plugin-{}", std::process::id());
    let command = format!(
        "env PATH='{}' KUBECONFIG='{}' kubectl evictord drain plugin-tty --name plugin-tty-nm --priority-steps 100,200,300 --timeout 150s; echo exit=$?; sleep 600",
        plugin_path(),
        c.kubeconfig.display()
    );
    let kubectl_dir = kubectl_command(c, &[]).get_program().to_owned();
    let kubectl_dir = PathBuf::from(kubectl_dir).parent().unwrap().to_path_buf();
    let command = command.replace(
        "env PATH='",
        &format!("env PATH='{}:", kubectl_dir.display()),
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "16",
        &command,
    ]);
    assert!(started.status.success(), "{}", text(&started));
    let screen = || tmux(&["capture-pane", "-p", "-t", &session]);
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    write_when_active(&api, &uid, INTERCEPTOR, |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
        e.message = Some("copying data".into());
    })
    .await;
    until(T, "the live view showing the interceptor", || async {
        let s = String::from_utf8_lossy(&screen().stdout).to_string();
        s.contains("interceptor hold.example.com active")
            .then_some(s)
    })
    .await;
    // A few seconds on, as a person would look at it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let shot = String::from_utf8_lossy(&screen().stdout).to_string();
    write_when_active(&api, &uid, INTERCEPTOR, |e| e.completion_time = Some(now())).await;
    let shot2 = until(T, "the live view showing the budget", || async {
        let s = String::from_utf8_lossy(&screen().stdout).to_string();
        s.contains("PodDisruptionBudget guarded-pdb allows 0")
            .then_some(s)
    })
    .await;
    assert!(
        shot.contains("pods evicted") && shot.contains("plugin-tty"),
        "{shot}"
    );
    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();
    let done = until(T, "the live view showing Drained", || async {
        let s = String::from_utf8_lossy(&screen().stdout).to_string();
        s.contains("exit=0").then_some(s)
    })
    .await;
    let _ = tmux(&["kill-session", "-t", &session]);
    assert!(
        done.contains("3/3 pods evicted") && done.contains("is Drained"),
        "{done}"
    );
    let capture = format!(
        "# while the interceptor holds the drain\n{}\n# while the budget holds it\n{}\n# drained\n{}\n",
        shot.trim_end(),
        shot2.trim_end(),
        done.trim_end()
    );
    std::fs::write(capture_path(), &capture).unwrap();
    println!("{capture}");
}
