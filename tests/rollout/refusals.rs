//! A rollout run by a user kube-apiserver refuses part of what a rollout needs: it says so at
//! once, with the refusal and the permission it needs, or gets what it needs another way.

use super::*;

/// A kubeconfig of user `user`, whom a ClusterRole of that name with `rules` is bound to.
fn kubeconfig_of(
    c: &support::TestCluster,
    user: &str,
    rules: serde_json::Value,
) -> std::path::PathBuf {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": user},
        "rules": rules,
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    });
    for manifest in [role, binding] {
        let out = support::tools::kubectl(c, &["apply", "-f", "-"], Some(&manifest.to_string()));
        assert!(out.status.success(), "{}", text(&out));
    }
    c.kubeconfig_as(user)
}

/// A user who may do everything a rollout does but watch nodes: the rollout stops before it
/// writes a maintenance, with kube-apiserver's refusal and the permission it needs (before, its
/// first list succeeded, the watch was refused and retried for ever in the background, and the
/// rollout went on with the nodes as they were at that list).
#[tokio::test]
async fn a_rollout_refused_the_watch_of_the_nodes_says_so_at_once() {
    let (client, ns) = audited_setup("rollout-rbac").await;
    let nodes = pool(&client, &ns, "roll-r", 1).await;
    let c = support::cluster().await;
    let kubeconfig = kubeconfig_of(
        c,
        "rollout-without-node-watch",
        json!([
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update", "delete"]},
            {"apiGroups": [""],
             "resources": ["pods", "pods/eviction", "namespaces", "events", "services", "endpoints",
                           "configmaps", "persistentvolumeclaims", "replicationcontrollers"],
             "verbs": ["*"]},
            {"apiGroups": ["evictord.dev", "apps", "policy", "coordination.k8s.io",
                           "events.k8s.io"],
             "resources": ["*"], "verbs": ["*"]},
        ]),
    );
    let out = plugin_command(&[
        "rollout",
        "roll-r",
        &nodes[0],
        "--max-unavailable",
        "1",
        "--exec",
        "true",
    ])
    .await
    .env("KUBECONFIG", &kubeconfig)
    .stdin(Stdio::null())
    .output()
    .expect("kubectl evictord rollout");
    let t = text(&out);
    println!("--- refused run ---\n{t}");
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("kube-apiserver refuses this user the watch of the nodes")
            && t.contains("kubectl auth can-i watch nodes"),
        "{t}"
    );
    assert!(!t.contains("within 60 s"), "{t}");
    // Nothing drained: the node was never cordoned.
    let node = Api::<Node>::all(client.clone())
        .get(&nodes[0])
        .await
        .unwrap();
    assert!(!is_cordoned(&node), "{node:?}");
    // What the refused run left behind goes, as the plugin's stop hint says.
    let out = support::tools::kubectl(
        c,
        &[
            "delete",
            "nodemaintenances,maintenancebudgets",
            "-l",
            "evictord.dev/rollout=roll-r",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// A user who may do everything a rollout does but list and watch MaintenanceBudgets: the
/// rollout reads its budget with a GET while its watch is refused, instead of waiting for the
/// watch, and rolls the node.
#[tokio::test]
async fn a_rollout_refused_the_watch_of_its_budget_gets_it_instead() {
    let (client, ns) = audited_setup("rollout-budget-rbac").await;
    let nodes = pool(&client, &ns, "roll-w", 1).await;
    let c = support::cluster().await;
    let kubeconfig = kubeconfig_of(
        c,
        "rollout-without-budget-watch",
        json!([
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["*"]},
            {"apiGroups": [""],
             "resources": ["pods", "pods/eviction", "namespaces", "events", "services", "endpoints",
                           "configmaps", "persistentvolumeclaims", "replicationcontrollers"],
             "verbs": ["*"]},
            {"apiGroups": ["evictord.dev"],
             "resources": ["nodemaintenances", "nodemaintenances/status", "evictionrequests",
                           "evictionrequests/status", "evictioninterceptors"],
             "verbs": ["*"]},
            {"apiGroups": ["evictord.dev"], "resources": ["maintenancebudgets"],
             "verbs": ["get", "create", "patch", "update", "delete"]},
            {"apiGroups": ["apps", "policy", "coordination.k8s.io", "events.k8s.io",
                           "authorization.k8s.io"],
             "resources": ["*"], "verbs": ["*"]},
        ]),
    );
    let began = std::time::Instant::now();
    let out = plugin_command(&[
        "rollout",
        "roll-w",
        &nodes[0],
        "--max-unavailable",
        "1",
        "--exec",
        "true",
        "--timeout",
        "120s",
    ])
    .await
    .env("KUBECONFIG", &kubeconfig)
    .stdin(Stdio::null())
    .output()
    .expect("kubectl evictord rollout");
    let t = text(&out);
    println!(
        "--- run without the budget's watch ({:?}) ---\n{t}",
        began.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("rollout roll-w is done"), "{t}");
    // Not held up by the watch that never lists (a wait for it was a minute once).
    assert!(began.elapsed() < Duration::from_secs(45), "{t}");
    assert!(
        t.contains("MaintenanceBudget roll-w: 1/1 unavailable"),
        "{t}"
    );
}
