//! The kubectl plugin's share of SPEC 6.2 on a real control plane, run by the real `kubectl`:
//! `drain` refuses a node with a pod no controller recreates and a pod with an emptyDir volume,
//! naming both and the flag for each, before anything is created (DaemonSet, mirror and skipped
//! pods not refused), and drains it with `--force --delete-emptydir-data`; `plan` lists the pods
//! skipped and waited for with the label or rule (of an older maintenance, by namespace and pod
//! selector) that decides, the pods `drain` refuses, and the deadline; the live view shows a
//! node's deadline with the time left, then exceeded; `rollout` refuses before creating its
//! budget, writes the deadline into its maintenances, shows it, and refuses a resume with another.

mod support;

use std::process::Stdio;

use evictord::api::{DRAIN_LABEL, DeadlinePolicy, MaintenanceBudget, NodeMaintenance};
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Namespace, Node, Pod, Volume};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::budget::{admitted, by_name, get};
use support::fixtures::{PodBuilder, blocking_pdb, node, pdb_api, pod};
use support::plugin::{T, log_shows, plugin, plugin_command, setup, text};
use support::process::wait_exit;
use support::wait::until;

/// Creates the pod with an emptyDir volume and marks it Running.
async fn create_with_empty_dir(client: &Client, ns: &str, b: PodBuilder) -> Pod {
    let mut p = b.build();
    let name = p.metadata.name.clone().unwrap_or_default();
    p.spec.get_or_insert_default().volumes = Some(vec![Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }]);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &p)
        .await
        .unwrap_or_else(|e| panic!("creating pod {name}: {e}"));
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status of pod {name}: {e}"))
}

async fn pod_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

fn is_cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// Runs `kubectl evictord ARGS` in the background, its output in `log`.
async fn start(args: &[&str], log: &std::path::Path) -> std::process::Child {
    let file = std::fs::File::create(log).unwrap();
    plugin_command(args)
        .await
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("kubectl evictord")
}

#[tokio::test]
async fn drain_refuses_bare_and_emptydir_pods_until_told_and_then_drains() {
    let (client, ns) = setup("safety-drain").await;
    let n = "safety-n1";
    node(n).create(&client).await;
    pod("bare").on_node(n).create(&client, &ns).await;
    create_with_empty_dir(&client, &ns, pod("scratch").on_node(n).replicaset("web")).await;
    // Not refused: a bare pod the rules skip (it stays), a DaemonSet pod with an emptyDir (SPEC
    // 5.3: it leaves through daemonset.apps.k8s.io) and a mirror pod (the kubelet runs it).
    pod("kept")
        .on_node(n)
        .label(DRAIN_LABEL, "skip")
        .create(&client, &ns)
        .await;
    create_with_empty_dir(&client, &ns, pod("logs").on_node(n).daemonset("logs")).await;
    pod("etcd-safety-n1")
        .on_node(n)
        .mirror()
        .create(&client, &ns)
        .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let maintenances: Api<NodeMaintenance> = Api::all(client.clone());

    let out = plugin(&["drain", n, "--name", "safety-nm"]).await;
    let t = text(&out);
    println!("--- kubectl evictord drain (refused) ---\n{t}");
    assert_eq!(out.status.code(), Some(1), "{t}");
    for needle in [
        "refused, as kubectl drain refuses them; nothing was created:".to_string(),
        format!(
            "1 pod no controller recreates, gone for good once evicted (use --force to override): {ns}/bare"
        ),
        format!(
            "1 pod with emptyDir volumes, whose data is lost when they leave (use --delete-emptydir-data to override): {ns}/scratch"
        ),
    ] {
        assert!(t.contains(&needle), "{needle:?} in:\n{t}");
    }
    for other in ["kept", "logs", "etcd-"] {
        assert!(!t.contains(other), "{other} is not refused:\n{t}");
    }
    assert!(maintenances.get_opt("safety-nm").await.unwrap().is_none());
    assert!(
        !is_cordoned(&nodes.get(n).await.unwrap()),
        "nothing written"
    );

    // --force lets the bare pod through, not the emptyDir one.
    let out = plugin(&["drain", n, "--name", "safety-nm", "--force"]).await;
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("{ns}/scratch")) && !t.contains(&format!("{ns}/bare")),
        "{t}"
    );
    assert!(maintenances.get_opt("safety-nm").await.unwrap().is_none());

    // plan says the same, without refusing.
    let out = plugin(&["plan", n, "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["unsafePods"],
        json!({"unmanaged": [format!("{ns}/bare")], "localData": [format!("{ns}/scratch")]}),
        "{report:#}"
    );

    // Both flags: the drain goes on; the skipped pod stays and is named once.
    let out = plugin(&[
        "drain",
        n,
        "--name",
        "safety-nm",
        "--force",
        "--delete-emptydir-data",
        "--timeout",
        "90s",
    ])
    .await;
    let t = text(&out);
    println!("--- kubectl evictord drain --force --delete-emptydir-data ---\n{t}");
    assert_eq!(out.status.code(), Some(0), "{t}");
    for needle in [
        format!("node {n}: skipped, they stay on the node: {ns}/kept"),
        "maintenance safety-nm: Drained".to_string(),
    ] {
        assert!(t.contains(&needle), "{needle:?} in:\n{t}");
    }
    assert_eq!(
        t.matches("skipped, they stay").count(),
        1,
        "said once:\n{t}"
    );
    for gone in ["bare", "scratch"] {
        assert!(!pod_exists(&client, &ns, gone).await, "{gone} evicted");
    }
    assert!(
        pod_exists(&client, &ns, "kept").await,
        "the skipped pod stays"
    );
    let out = plugin(&["complete", "safety-nm"]).await;
    assert!(out.status.success(), "{}", text(&out));
}

#[tokio::test]
async fn plan_shows_skipped_and_waited_for_pods_what_decides_and_the_deadline() {
    let (client, ns) = setup("safety-plan").await;
    let n = "safety-n2";
    node(n).create(&client).await;
    // The rule below selects this namespace by a label: the plugin must read namespaces.
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"evictord-test/batch": "yes"}}})),
        )
        .await
        .unwrap();
    pod("web")
        .on_node(n)
        .replicaset("web")
        .create(&client, &ns)
        .await;
    pod("job")
        .on_node(n)
        .label(DRAIN_LABEL, "wait-completed")
        .create(&client, &ns)
        .await;
    pod("batch-1")
        .on_node(n)
        .replicaset("batch")
        .label("role", "batch")
        .create(&client, &ns)
        .await;
    pod("kept")
        .on_node(n)
        .label(DRAIN_LABEL, "skip")
        .create(&client, &ns)
        .await;
    // An older maintenance holding the node: its rules apply there.
    let rules: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "safety-rules"},
        "spec": {"nodeSelector": by_name(&[n]), "stage": "Cordon", "podRules": [{
            "namespaceSelector": {"matchLabels": {"evictord-test/batch": "yes"}},
            "podSelector": {"matchLabels": {"role": "batch"}},
            "behavior": "WaitCompleted",
        }]},
    }))
    .unwrap();
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &rules)
        .await
        .unwrap();
    until(T, "safety-rules admitted", || async {
        let nm = get(&client, "safety-rules").await?;
        (admitted(&nm)?.0 == "True").then_some(())
    })
    .await;

    let out = plugin(&[
        "plan",
        n,
        "--drain-deadline",
        "30m",
        "--deadline-policy",
        "force",
        "-o",
        "json",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["deadline"],
        json!({"seconds": 1800, "policy": "Force"}),
        "{report:#}"
    );
    let rows: Vec<(String, Value, String, Value)> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["step"].clone(),
                p["behavior"].as_str().unwrap().to_string(),
                p.get("decidedBy").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("web".to_string(), json!(0), "Drain".into(), Value::Null),
            (
                "batch-1".into(),
                json!(0),
                "WaitCompleted".into(),
                json!("podRules[0] of maintenance safety-rules")
            ),
            (
                "job".into(),
                json!(0),
                "WaitCompleted".into(),
                json!("label evictord.dev/drain=wait-completed")
            ),
            (
                "kept".into(),
                Value::Null,
                "Skip".into(),
                json!("label evictord.dev/drain=skip")
            ),
        ],
        "{report:#}"
    );
    // Under a Force deadline the bare pod waited for is deleted at the deadline: drain refuses
    // it without --force; the bare pod skipped stays and is not refused.
    assert_eq!(
        report["unsafePods"],
        json!({"unmanaged": [format!("{ns}/job")]}),
        "{report:#}"
    );

    let out = plugin(&["plan", n, "--drain-deadline", "30m"]).await;
    let t = text(&out);
    println!("--- kubectl evictord plan --drain-deadline 30m ---\n{t}");
    assert!(out.status.success(), "{t}");
    for needle in [
        "Drain deadline: 30m per node, counted from the start of its drain",
        "forces nothing (deadlinePolicy Report)",
        "stays: skipped by label evictord.dev/drain=skip; does not hold the drain",
        "waited for to complete, not evicted (podRules[0] of maintenance safety-rules)",
        "waited for to complete, not evicted (label evictord.dev/drain=wait-completed)",
    ] {
        assert!(t.contains(needle), "{needle:?} in:\n{t}");
    }
    assert!(
        !t.contains("refuse these nodes"),
        "nothing refused under Report:\n{t}"
    );

    for (args, needle) in [
        (
            vec!["plan", n, "--deadline-policy", "force"],
            "--deadline-policy needs --drain-deadline",
        ),
        (
            vec!["plan", n, "--drain-deadline", "30s"],
            "--drain-deadline 30s: at least 1m (rule N8)",
        ),
    ] {
        let out = plugin(&args).await;
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(needle), "{}", text(&out));
    }

    // The deadline goes into the maintenance drain creates (the server's dry run shows it).
    let out = plugin(&[
        "drain",
        n,
        "--drain-deadline",
        "2m",
        "--deadline-policy",
        "force",
        "--force",
        "--dry-run",
        "-o",
        "json",
    ])
    .await;
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json_end = stdout.find("\n# dry run").unwrap_or(stdout.len());
    let nm: Value = serde_json::from_str(&stdout[..json_end]).unwrap();
    assert_eq!(nm["spec"]["drainDeadlineSeconds"], 120, "{t}");
    assert_eq!(nm["spec"]["deadlinePolicy"], "Force", "{t}");

    let out = plugin(&["complete", "safety-rules"]).await;
    assert!(out.status.success(), "{}", text(&out));
}

/// The live view shows a node's drain deadline with the time left, and again once exceeded.
#[tokio::test]
async fn the_drain_view_shows_the_deadline_then_exceeded() {
    let (client, ns) = setup("safety-deadline").await;
    let n = "safety-n3";
    node(n).create(&client).await;
    pod("guarded")
        .on_node(n)
        .replicaset("guarded")
        .label("app", "guarded")
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "guarded-pdb", "app", "guarded", 1).await;
    let c = support::cluster().await;
    let log = c.dir.join("plugin-safety-deadline.log");
    let mut child = start(
        &[
            "drain",
            n,
            "--name",
            "safety-deadline-nm",
            "--drain-deadline",
            "1m",
            "--timeout",
            "150s",
        ],
        &log,
    )
    .await;
    log_shows(&log, &format!("node {n}: drain deadline in ")).await;
    let nm = get(&client, "safety-deadline-nm").await.unwrap();
    assert_eq!(nm.spec.drain_deadline_seconds, Some(60));
    // A minute, then evictord marks it exceeded (Report: the pod stays).
    log_shows(&log, &format!("node {n}: drain deadline exceeded ")).await;
    assert!(pod_exists(&client, &ns, "guarded").await);
    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();
    let code = wait_exit(&mut child, &log, T).await;
    let out = std::fs::read_to_string(&log).unwrap();
    println!("--- kubectl evictord drain --drain-deadline 1m (plain output) ---\n{out}");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("reported, nothing forced"), "{out}");
    assert_eq!(out.matches("drain deadline in").count(), 1, "once:\n{out}");
    assert_eq!(
        out.matches("drain deadline exceeded").count(),
        1,
        "once:\n{out}"
    );
    let out = plugin(&["complete", "safety-deadline-nm"]).await;
    assert!(out.status.success(), "{}", text(&out));
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
async fn rollout_refuses_first_then_writes_shows_and_keeps_its_deadline() {
    let (client, ns) = setup("safety-rollout").await;
    let n = "safety-r1";
    node(n).ready().create(&client).await;
    pod("bare").on_node(n).create(&client, &ns).await;
    pod("guarded")
        .on_node(n)
        .replicaset("guarded")
        .label("app", "guarded")
        .create(&client, &ns)
        .await;
    blocking_pdb(&client, &ns, "guarded-pdb", "app", "guarded", 1).await;
    let base = [
        "rollout",
        "safety-r",
        n,
        "--max-unavailable",
        "1",
        "--drain-deadline",
        "1m",
        "--timeout",
        "120s",
    ];

    let out = plugin(&base).await;
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("(use --force to override): {ns}/bare"))
            && t.contains("nothing was created"),
        "{t}"
    );
    assert_eq!(rollout_objects(&client, "safety-r").await, (false, 0));

    let mut forced = base.to_vec();
    forced.push("--force");
    let c = support::cluster().await;
    let log = c.dir.join("plugin-safety-rollout.log");
    let mut child = start(&forced, &log).await;
    let nm = until(T, "the rollout's maintenance", || async {
        get(&client, &format!("safety-r-{n}")).await
    })
    .await;
    assert_eq!(nm.spec.drain_deadline_seconds, Some(60));
    assert_eq!(nm.spec.deadline_policy, Some(DeadlinePolicy::Report));
    log_shows(&log, "; drain deadline ").await;

    // Another deadline is another rollout: refused, naming the recorded one.
    let mut other = forced.clone();
    other[6] = "2m";
    let out = plugin(&other).await;
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("rollout safety-r was started with --drain-deadline 1m --deadline-policy report, not --drain-deadline 2m --deadline-policy report"),
        "{t}"
    );

    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();
    let code = wait_exit(&mut child, &log, T).await;
    let out = std::fs::read_to_string(&log).unwrap();
    println!("--- kubectl evictord rollout --drain-deadline 1m --force ---\n{out}");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("node {n}: draining:")) && out.contains("then reported"),
        "{out}"
    );
    until(T, "the rollout's objects deleted", || async {
        (rollout_objects(&client, "safety-r").await == (false, 0)).then_some(())
    })
    .await;
}
