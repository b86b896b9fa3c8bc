//! The chart's node agent: its DaemonSet as rendered (every node and taint, the static pod
//! directory, root without capabilities, labels of its own, arguments the binary accepts), and its
//! ServiceAccount and ClusterRole applied for real and used by `evictord node-agent` through a
//! hold, a conflict and a restore without a single `Forbidden`.

mod support;

use std::process::Command;

use evictord::api::EvictionInterceptor;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use support::node_agent::{Agent, TIMEOUT, world};
use support::static_kubelet::StaticKubelet;
use support::tools::{kubectl, run};
use support::wait::until;

/// `helm template` of the chart with the node agent on; `values` is an extra values file.
fn render_agent(release: &str, ns: &str, values: Option<&str>) -> Vec<serde_norway::Value> {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/evictord");
    let mut args = vec![
        "template",
        release,
        chart,
        "--namespace",
        ns,
        "--kube-version",
        "1.20.2",
        "--set",
        "nodeAgent.enabled=true",
    ];
    if let Some(v) = values {
        args.extend(["--values", v]);
    }
    let out = run("helm", &args, None, None);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_norway::Deserializer::from_str(&text)
        .map(|d| <serde_norway::Value as serde::Deserialize>::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [serde_norway::Value], kind: &str) -> &'a serde_norway::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// The chart's DaemonSet: every node and taint, the static pod directory from the host, root
/// without any capability on a read-only root filesystem, pod labels that neither the webhook's
/// Service nor its PodDisruptionBudget select; and its arguments are accepted by the binary.
#[test]
fn the_charts_daemonset() {
    let full = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/evictord/ci/full-values.yaml"
    );
    for values in [None, Some(full)] {
        let docs = render_agent("evictord", "evictord-system", values);
        let ds = find(&docs, "DaemonSet");
        let pod = &ds["spec"]["template"];
        let c = &pod["spec"]["containers"][0];
        let path = if values.is_some() {
            "/var/lib/kubelet/static-pods"
        } else {
            "/etc/kubernetes/manifests"
        };
        assert_eq!(pod["spec"]["volumes"][0]["hostPath"]["path"], path);
        assert_eq!(c["volumeMounts"][0]["mountPath"], path);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert!(c["securityContext"]["capabilities"]["add"].is_null());
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 0);
        if values.is_none() {
            assert_eq!(pod["spec"]["tolerations"][0]["operator"], "Exists");
            assert!(pod["spec"]["tolerations"][0]["key"].is_null());
            assert_eq!(pod["spec"]["priorityClassName"], "system-node-critical");
        }
        let service = docs.iter().find(|d| d["kind"] == "Service").unwrap();
        let labels = pod["metadata"]["labels"].as_mapping().unwrap();
        let selector = service["spec"]["selector"].as_mapping().unwrap();
        assert!(
            selector.iter().any(|(k, v)| labels.get(k) != Some(v)),
            "the webhook Service selects the agent's pods"
        );
        let args: Vec<String> = c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let out = Command::new(support::evictord::BIN)
            .args(&args)
            .env("EVICTORD_KUBECONFIG", "/nonexistent/kubeconfig")
            .env("NODE_NAME", "n")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "evictord {args:?}: {stderr}");
        assert!(stderr.contains("reading kubeconfig"), "{stderr}");
    }
}

/// The agent as the chart's own ServiceAccount, with the chart's ClusterRole applied for real:
/// it announces itself, registers its interceptor, holds and restores a manifest, reports a conflict (events, series) and
/// never meets a `Forbidden`.
#[tokio::test]
async fn the_charts_rbac_is_enough_for_the_agent() {
    let w = world("agent-rbac").await;
    let docs = render_agent(&w.ns, &w.ns, None);
    let rbac: String = docs
        .iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("ServiceAccount" | "ClusterRole" | "ClusterRoleBinding")
            )
        })
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("node-agent"))
        })
        .map(|d| format!("---\n{}", serde_norway::to_string(d).unwrap()))
        .collect();
    assert_eq!(rbac.matches("\nkind: ").count(), 3, "{rbac}");
    let out = kubectl(w.c, &["apply", "-f", "-"], Some(&rbac));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sa = find(&docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig =
        w.c.kubeconfig_as(&format!("system:serviceaccount:{}:{sa}", w.ns));

    let etcd = w.manifest("etcd", "registry.invalid/etcd:1");
    std::fs::write(w.dir.join("etcd.yaml"), &etcd).unwrap();
    let _kubelet = StaticKubelet::start(w.client.clone(), &w.dir, &w.node);
    let agent = Agent::start_as(w.c, &w.node, &w.dir, &kubeconfig);
    agent.ready().await;
    // The runner registers kubelet.k8s.io as the chart's ServiceAccount (create, then the status
    // heartbeat).
    until(TIMEOUT, "kubelet.k8s.io registered", || async {
        Api::<EvictionInterceptor>::all(w.client.clone())
            .get_opt("kubelet.k8s.io")
            .await
            .unwrap()?
            .status?
            .heartbeat_time
            .map(drop)
    })
    .await;
    let maintenance = w.hold_etcd().await;
    w.wait_event("StaticPodManifestHeld").await;
    // A conflict, told as a Warning event; resolved, and back: the same event again (a series,
    // patched).
    for _ in 0..2 {
        std::fs::write(w.held_copy("etcd.yaml"), "edited").unwrap();
        w.wait_event("HeldStaticPodManifestConflict").await;
        until(TIMEOUT, "the conflict counted", || async {
            (agent.metric("evictord_node_agent_conflicts").await == 1.0).then_some(())
        })
        .await;
        std::fs::write(w.held_copy("etcd.yaml"), &etcd).unwrap();
        until(TIMEOUT, "the conflict resolved", || async {
            (agent.metric("evictord_node_agent_conflicts").await == 0.0).then_some(())
        })
        .await;
    }
    until(TIMEOUT, "the conflict event repeated", || async {
        Api::<Event>::all(w.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("HeldStaticPodManifestConflict")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&w.node)
            })?
            .series
            .filter(|s| s.count >= 2)
            .map(drop)
    })
    .await;
    w.complete(&maintenance).await;
    w.wait_restored(&etcd).await;
    w.wait_event("StaticPodManifestRestored").await;
    let log = agent.full_log();
    // Not a bare "403": the log's timestamps contain it (04:35:07.403883Z failed CI once).
    for denied in ["Forbidden", "forbidden", "code: 403"] {
        assert!(
            !log.contains(denied),
            "the agent met {denied}:\n{}",
            agent.logs()
        );
    }
}
