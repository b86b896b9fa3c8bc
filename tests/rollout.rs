//! `kubectl evictord rollout` on a real control plane (SPEC 6.3), run by the real `kubectl`:
//! a pool of 4 fake Ready nodes rolled 2 at a time with a step that records each node it runs
//! for and a "reboot" the test plays (a new boot ID), the plugin killed mid-rollout and run again
//! (it resumes: no finished step runs twice), never more than 2 nodes cordoned (sampled every
//! 100 ms), every node uncordoned and the rollout's objects gone at the end; and a failing step
//! with `--cordon-first` (the other nodes given back, the failed one left cordoned, a resume with
//! other options refused, `drain` refused as TooLarge, then the same command carrying on).

#[path = "rollout/ctrl_c.rs"]
mod ctrl_c;
#[path = "rollout/refusals.rs"]
mod refusals;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use evictord::api::{
    MaintenanceBudget, NodeMaintenance, ROLLOUT_STEP_ANNOTATION, UNSCHEDULABLE_BEFORE_ANNOTATION,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::{node, pod};
use support::plugin::{T, plugin, plugin_command, setup, text};
use support::process::wait_exit;
use support::wait::until;

/// The plugin's setup, with this binary's control plane writing kube-apiserver's audit log of
/// every request (each test starts with it, so whichever comes first starts the control plane so).
async fn audited_setup(prefix: &str) -> (Client, String) {
    support::control_plane::cluster_with_request_audit().await;
    setup(prefix).await
}

/// The plugin's requests received between `from` and `to`.
fn plugin_requests(
    c: &support::TestCluster,
    from: SystemTime,
    to: SystemTime,
) -> Vec<support::audit::AuditedRequest> {
    let agent = format!("evictord/{} (plugin)", env!("CARGO_PKG_VERSION"));
    let log = c.request_audit.as_ref().expect("the request audit log");
    support::audit::requests(log)
        .into_iter()
        .filter(|r| r.user_agent == agent && r.received >= from && r.received <= to)
        .collect()
}

/// How long a whole rollout run may take.
const RUN: Duration = Duration::from_secs(180);

/// Sets the node's status as a kubelet would: `Ready` and the boot ID.
async fn set_status(client: &Client, name: &str, ready: bool, boot: &str) {
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"status": {
        "conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": "KubeletReady",
            "message": "set by the test",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }],
        "nodeInfo": {
            "machineID": "m", "systemUUID": "u", "bootID": boot, "kernelVersion": "6.1",
            "osImage": "test", "containerRuntimeVersion": "none", "kubeletVersion": "v1.20.2",
            "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux", "architecture": "amd64",
        },
    }});
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap_or_else(|e| panic!("status of node {name}: {e}"));
}

/// Creates Ready nodes `<pool>-1`..`<pool>-n` labelled `pool=<pool>` on boot `boot-1`, each with
/// one pod of a ReplicaSet in `ns`.
async fn pool(client: &Client, ns: &str, name: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 1..=n {
        let node_name = format!("{name}-{i}");
        node(&node_name).label("pool", name).create(client).await;
        set_status(client, &node_name, true, "boot-1").await;
        pod(&format!("web-{i}"))
            .on_node(&node_name)
            .replicaset("web")
            .create(client, ns)
            .await;
        names.push(node_name);
    }
    names
}

fn is_cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

async fn pool_nodes(client: &Client, pool: &str) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("pool={pool}")))
        .await
        .expect("list nodes")
        .items
}

/// Samples every 100 ms how many nodes of the pool are cordoned, until stopped; the largest
/// count and the nodes then.
fn sample_cordoned(
    client: Client,
    pool: &str,
) -> (
    Arc<AtomicBool>,
    tokio::task::JoinHandle<(usize, Vec<String>)>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let pool = pool.to_string();
    let task = tokio::spawn(async move {
        let mut worst: Vec<String> = Vec::new();
        // Bounded: ten minutes of samples.
        for _ in 0..6000 {
            if s.load(Ordering::SeqCst) {
                break;
            }
            let now: Vec<String> = pool_nodes(&client, &pool)
                .await
                .into_iter()
                .filter(is_cordoned)
                .filter_map(|n| n.metadata.name)
                .collect();
            if now.len() > worst.len() {
                worst = now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (worst.len(), worst)
    });
    (stop, task)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The test's kubelets: while `open`, a node listed in `ran` (its step ran) comes back on a new
/// boot ID, as after a reboot.
fn reboot_stepped(
    client: Client,
    ran: PathBuf,
    open: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let rebooted = AtomicUsize::new(0);
        let mut done: Vec<String> = Vec::new();
        // Bounded: ten minutes.
        for _ in 0..6000 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if open.load(Ordering::SeqCst) {
                for n in lines(&ran) {
                    if !done.contains(&n) {
                        set_status(&client, &n, true, "boot-2").await;
                        done.push(n);
                        rebooted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rebooted.load(Ordering::SeqCst)
    })
}

/// Starts `kubectl evictord ARGS` in the background, its output in `log`.
async fn start(args: &[&str], log: &Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    plugin_command(args)
        .await
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("kubectl evictord rollout")
}

/// The step states recorded on the rollout's maintenances, by maintenance.
async fn step_states(client: &Client, rollout: &str) -> BTreeMap<String, String> {
    Api::<NodeMaintenance>::all(client.clone())
        .list(&ListParams::default().labels(&format!("evictord.dev/rollout={rollout}")))
        .await
        .expect("list maintenances")
        .items
        .into_iter()
        .filter_map(|m| {
            let record = m
                .metadata
                .annotations
                .as_ref()?
                .get(ROLLOUT_STEP_ANNOTATION)?;
            let v: serde_json::Value = serde_json::from_str(record).ok()?;
            Some((m.metadata.name?, v["state"].as_str()?.to_string()))
        })
        .collect()
}

async fn rollout_objects(client: &Client, rollout: &str) -> (bool, usize) {
    let budget = Api::<MaintenanceBudget>::all(client.clone())
        .get_opt(rollout)
        .await
        .unwrap()
        .is_some();
    let maintenances = Api::<NodeMaintenance>::all(client.clone())
        .list(&ListParams::default().labels(&format!("evictord.dev/rollout={rollout}")))
        .await
        .unwrap()
        .items
        .len();
    (budget, maintenances)
}

#[tokio::test]
async fn a_pool_rolls_two_at_a_time_and_resumes_after_the_plugin_is_killed() {
    let (client, ns) = audited_setup("rollout").await;
    let nodes = pool(&client, &ns, "roll-a", 4).await;
    let c = support::cluster().await;
    let dir = tempfile::tempdir_in(&c.dir).unwrap();
    let ran = dir.path().join("ran");
    let exec = format!("echo \"$EVICTORD_NODE\" >> {}; echo stepped", ran.display());

    // The preview: two batches, in the order of the names.
    let out = plugin(&[
        "plan",
        "-l",
        "pool=roll-a",
        "--max-unavailable",
        "2",
        "-o",
        "json",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["rollout"]["batches"],
        json!([{"nodes": ["roll-a-1", "roll-a-2"]}, {"nodes": ["roll-a-3", "roll-a-4"]}]),
        "{report:#}"
    );
    let out = plugin(&["plan", "-l", "pool=roll-a", "--max-unavailable", "2"]).await;
    assert!(
        text(&out).contains("  batch 1: roll-a-1, roll-a-2\n  batch 2: roll-a-3, roll-a-4"),
        "{}",
        text(&out)
    );

    let (stop_sampling, sampler) = sample_cordoned(client.clone(), "roll-a");
    let open = Arc::new(AtomicBool::new(false));
    let stop_kubelets = Arc::new(AtomicBool::new(false));
    let kubelets = reboot_stepped(
        client.clone(),
        ran.clone(),
        open.clone(),
        stop_kubelets.clone(),
    );
    let args = [
        "rollout",
        "roll-a",
        "-l",
        "pool=roll-a",
        "--max-unavailable",
        "2",
        "--reboot",
        "--exec",
        &exec,
        "--timeout",
        "170s",
    ];

    // The first run: the first batch is drained and stepped, then waits for its reboot; the
    // plugin is killed there.
    let log1 = c.dir.join("rollout-first.log");
    let began = SystemTime::now();
    let mut first = start(&args, &log1).await;
    until(RUN, "the first batch stepped and recorded", || async {
        let states = step_states(&client, "roll-a").await;
        (lines(&ran).len() >= 2 && states.values().filter(|s| *s == "Succeeded").count() >= 2)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        first.try_wait().unwrap().is_none(),
        "the rollout waits for the reboot:\n{}",
        std::fs::read_to_string(&log1).unwrap_or_default()
    );
    first.kill().unwrap();
    let _ = first.wait();
    let out1 = std::fs::read_to_string(&log1).unwrap();
    println!("--- first run (killed) ---\n{out1}");
    assert_eq!(lines(&ran).len(), 2, "{out1}");
    for needle in [
        "MaintenanceBudget roll-a created: at most 2 of these 4 nodes drained at once",
        "[roll-a-1] stepped",
        "node roll-a-1: step succeeded",
        "node roll-a-1: step done; waiting for the node to boot again and be Ready",
    ] {
        assert!(out1.contains(needle), "{needle:?} in:\n{out1}");
    }

    // The second run resumes: the stepped nodes reboot, and the rest of the pool rolls.
    open.store(true, Ordering::SeqCst);
    let log2 = c.dir.join("rollout-second.log");
    let mut second = start(&args, &log2).await;
    let code = wait_exit(&mut second, &log2, RUN).await;
    let ended = SystemTime::now();
    let out2 = std::fs::read_to_string(&log2).unwrap();
    println!("--- second run ---\n{out2}");
    assert_eq!(code, 0, "{out2}");

    // The plugin reads its maintenances, its budget and the nodes from watches instead of
    // listing and getting them each time it looks (it did: as many lists of its maintenances and
    // gets of its budget as looks, and before that as many lists of every node). The other tests
    // of this binary run plugins at the same time, under the same user agent: the maintenances'
    // and the budget's reads are those of roll-a (by name), the nodes' those of every rollout.
    let requests = plugin_requests(c, began, ended);
    let count = |verb: &str, resource: &str, query: &str| {
        requests
            .iter()
            .filter(|r| r.verb == verb && r.resource == resource && r.uri.contains(query))
            .count()
    };
    let mine = "labelSelector=evictord.dev%2Frollout%3Droll-a";
    let maintenance_lists = count("list", "nodemaintenances", mine);
    let maintenance_watches = count("watch", "nodemaintenances", mine);
    let budget_gets = count("get", "maintenancebudgets", "/maintenancebudgets/roll-a");
    let budget_watches = count("watch", "maintenancebudgets", "metadata.name%3Droll-a");
    let maintenance_gets = count("get", "nodemaintenances", "/nodemaintenances/roll-a-");
    let node_lists = requests
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "nodes" && !r.uri.contains("labelSelector"))
        .count();
    let node_watches = count("watch", "nodes", "");
    let seconds = ended.duration_since(began).unwrap().as_secs_f64();
    println!(
        "roll-a's two runs in {seconds:.1} s: {maintenance_lists} lists and {maintenance_watches} watches of its \
         maintenances, {maintenance_gets} gets of one of them, {budget_gets} gets and {budget_watches} watches \
         of its budget; every plugin's {node_lists} lists and {node_watches} watches of every node"
    );
    // Each run lists them for its set-up, for its watch and for its looks before the watch has
    // listed (and, should the watch not bring a write back within 2 s, once for that look); the
    // gets of the budget are the set-up's, the claim's, the release's, the wait for evictord to
    // observe it and the first looks'.
    assert!(
        maintenance_watches >= 2 && maintenance_lists <= 4 * maintenance_watches,
        "roll-a's maintenances listed {maintenance_lists} times ({maintenance_watches} watches)"
    );
    // A step's end is recorded over the watch's copy of its maintenance (it was a GET per step
    // end: 4 nodes, at least 4); a live read only after a lost race.
    assert!(
        maintenance_gets <= 2,
        "roll-a's maintenances got {maintenance_gets} times by name"
    );
    assert!(
        budget_watches >= 2 && budget_gets <= 8 * budget_watches,
        "roll-a's budget got {budget_gets} times ({budget_watches} watches)"
    );
    assert!(
        node_watches >= 2,
        "the nodes are watched ({node_watches} watches, {node_lists} lists)"
    );
    assert!(out2.contains("resuming rollout roll-a: 4 nodes"), "{out2}");
    assert!(
        out2.contains("rollout roll-a is done: 4 nodes stepped and given back"),
        "{out2}"
    );
    assert!(
        !out2.contains('\u{1b}'),
        "no terminal codes without a terminal"
    );

    // Each step ran once.
    let mut stepped = lines(&ran);
    stepped.sort();
    assert_eq!(stepped, nodes, "each node's step once:\n{out1}\n{out2}");

    // Every node uncordoned, nothing of the rollout left.
    for n in pool_nodes(&client, "roll-a").await {
        let name = n.metadata.name.clone().unwrap_or_default();
        assert!(!is_cordoned(&n), "{name} uncordoned");
        assert!(
            n.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key(UNSCHEDULABLE_BEFORE_ANNOTATION)),
            "{name} given back"
        );
    }
    assert!(
        !rollout_objects(&client, "roll-a").await.0,
        "the budget deleted"
    );
    until(T, "the rollout's maintenances gone", || async {
        (rollout_objects(&client, "roll-a").await.1 == 0).then_some(())
    })
    .await;

    stop_kubelets.store(true, Ordering::SeqCst);
    assert_eq!(kubelets.await.unwrap(), 4);
    stop_sampling.store(true, Ordering::SeqCst);
    let (max, worst) = sampler.await.unwrap();
    assert!(
        max <= 2,
        "never more than 2 of the pool cordoned (the budget's admission), saw {worst:?}:\n{out1}\n{out2}"
    );
}

#[tokio::test]
async fn a_failing_step_stops_the_rollout_and_the_same_command_carries_on() {
    let (client, ns) = audited_setup("rollout-fail").await;
    let nodes = pool(&client, &ns, "roll-b", 3).await;
    let c = support::cluster().await;
    let dir = tempfile::tempdir_in(&c.dir).unwrap();
    let ran = dir.path().join("ran");
    let broken = dir.path().join("broken");
    std::fs::write(&broken, "").unwrap();
    let exec = format!(
        "echo \"$EVICTORD_NODE\" >> {ran}; if [ -e {broken} ]; then echo upgrade failed; exit 3; fi",
        ran = ran.display(),
        broken = broken.display()
    );
    let args = [
        "rollout",
        "roll-b",
        "roll-b-1",
        "roll-b-2",
        "roll-b-3",
        "--max-unavailable",
        "1",
        "--cordon-first",
        "--exec",
        &exec,
        "--timeout",
        "170s",
    ];
    let out = plugin(&args).await;
    let t = text(&out);
    println!("--- failing run ---\n{t}");
    assert_eq!(out.status.code(), Some(1), "{t}");
    for needle in [
        "node roll-b-1: cordoned (--cordon-first)",
        "[roll-b-1] upgrade failed",
        "step failed on node roll-b-1 (exit code 3); the node stays cordoned (maintenance roll-b-roll-b-1 stays in Drain)",
        "deleted the maintenances not admitted yet, so that no other node is drained: roll-b-roll-b-2, roll-b-roll-b-3",
        "gave back the nodes cordoned at the start (--cordon-first): roll-b-2, roll-b-3",
        "kubectl evictord complete roll-b-roll-b-1",
    ] {
        assert!(t.contains(needle), "{needle:?} in:\n{t}");
    }
    assert_eq!(lines(&ran), ["roll-b-1"], "one step ran");
    let states = step_states(&client, "roll-b").await;
    assert_eq!(
        states.get("roll-b-roll-b-1").map(String::as_str),
        Some("Failed")
    );
    until(T, "the maintenances not admitted deleted", || async {
        (rollout_objects(&client, "roll-b").await == (true, 1)).then_some(())
    })
    .await;
    let by_name: BTreeMap<String, bool> = pool_nodes(&client, "roll-b")
        .await
        .iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), is_cordoned(n)))
        .collect();
    assert_eq!(
        by_name,
        BTreeMap::from([
            ("roll-b-1".to_string(), true),
            ("roll-b-2".to_string(), false),
            ("roll-b-3".to_string(), false),
        ])
    );

    // Other options are refused, naming the recorded ones; the drain a budget would never
    // admit is refused before anything is created.
    let mut other = args.to_vec();
    other[9] = "true";
    let out = plugin(&other).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("rollout roll-b was started with --exec"),
        "{}",
        text(&out)
    );
    let out = plugin(&["drain", "roll-b-1", "roll-b-2", "roll-b-3"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("refused: MaintenanceBudget roll-b allows 1 unavailable node and this drain selects 3 of its nodes")
            && text(&out).contains("kubectl evictord rollout NAME roll-b-1 roll-b-2 roll-b-3 --max-unavailable 1"),
        "{}",
        text(&out)
    );

    // Fixed: the same command runs the failed step again and carries on.
    std::fs::remove_file(&broken).unwrap();
    let out = plugin(&args).await;
    let t = text(&out);
    println!("--- resumed run ---\n{t}");
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("node roll-b-1: running the step again (attempt 2)"),
        "{t}"
    );
    let mut stepped = lines(&ran);
    stepped.sort();
    assert_eq!(stepped, [&*nodes[0], &nodes[0], &nodes[1], &nodes[2]]);
    for n in pool_nodes(&client, "roll-b").await {
        assert!(!is_cordoned(&n), "{:?} uncordoned", n.metadata.name);
    }
}

/// The live view in a pseudo-terminal (tmux, 120×20): a pool of 4 rolled 2 at a time with a
/// step that takes a few seconds, captured while the first batch is in its step, the rest queued
/// behind the budget, and at the end. Ignored by `make test` (it needs tmux); run it with
/// `cargo test --test rollout -- --ignored live_view` to see it.
#[tokio::test]
#[ignore = "needs tmux"]
async fn live_view_under_tmux() {
    let (client, ns) = audited_setup("rollout-tmux").await;
    pool(&client, &ns, "roll-t", 4).await;
    let c = support::cluster().await;
    let kubectl = support::tools::kubectl_command(c, &[])
        .get_program()
        .to_owned();
    let kubectl_dir = PathBuf::from(kubectl).parent().unwrap().to_path_buf();
    let session = format!("evictord-rollout-{}", std::process::id());
    let command = format!(
        "env PATH='{}:{}' KUBECONFIG='{}' kubectl evictord rollout os-upgrade -l pool=roll-t --max-unavailable 2 --exec 'echo upgrading; sleep 4; echo upgraded'; echo exit=$?; sleep 600",
        kubectl_dir.display(),
        support::plugin::plugin_path(),
        c.kubeconfig.display()
    );
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(args)
            .output()
            .expect("tmux")
    };
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "20",
        &command,
    ]);
    assert!(started.status.success(), "{}", text(&started));
    let screen = || {
        String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout).to_string()
    };
    let during = until(T, "the first batch in its step", || async {
        let s = screen();
        (s.contains("step running for") && s.contains("queued: MaintenanceBudget")).then_some(s)
    })
    .await;
    let done = until(RUN, "the rollout done", || async {
        let s = screen();
        s.contains("exit=").then_some(s)
    })
    .await;
    let _ = tmux(&["kill-session", "-t", &session]);
    println!(
        "# during\n{}\n# done\n{}",
        during.trim_end(),
        done.trim_end()
    );
    assert!(done.contains("exit=0"), "{done}");
}
