//! The Helm chart `charts/evictord` with real `helm` and `kubectl`: `helm lint --strict` and
//! `helm template` with the default values and with `ci/full-values.yaml`; the manifests rendered
//! for Kubernetes 1.20 applied to the real control plane (`--dry-run=server` for everything, for
//! real everything but the Deployment and the webhook configurations, which would make
//! kube-apiserver resolve the Service through the machine's DNS); and the RBAC test: `evictord
//! serve` with the Deployment's own flags, authenticated as the chart's ServiceAccount, runs every
//! flow without a single `Forbidden`. API Priority and Fairness: the FlowSchemas and
//! PriorityLevelConfigurations in the flowcontrol version each Kubernetes release serves, and on
//! the real control plane kube-apiserver classifying the chart's accounts into them.

#[path = "chart/apf.rs"]
mod apf;
#[path = "chart/rbac.rs"]
mod rbac;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use support::TestCluster;
use support::tools::{kubectl, run};
use tokio::sync::OnceCell;

const T: Duration = Duration::from_secs(60);

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/evictord")
}

fn full_values() -> String {
    chart().join("ci/full-values.yaml").display().to_string()
}

fn ok(what: &str, out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `helm template` of the chart; `values` is an extra values file, `kube_version` the
/// `--kube-version` to render for.
fn render(release: &str, ns: &str, values: Option<&str>, kube_version: Option<&str>) -> String {
    let mut extra = Vec::new();
    if let Some(v) = values {
        extra.extend(["--values", v]);
    }
    if let Some(k) = kube_version {
        extra.extend(["--kube-version", k]);
    }
    ok(
        &format!(
            "helm template {release} (namespace {ns}) {}",
            extra.join(" ")
        ),
        &render_with(release, ns, &extra),
    )
}

/// `helm template` of the chart with more arguments (`--set`, `--api-versions`...); the output of
/// helm, successful or not.
fn render_with(release: &str, ns: &str, extra: &[&str]) -> std::process::Output {
    let chart = chart().display().to_string();
    let mut args = vec!["template", release, &chart, "--namespace", ns];
    args.extend(extra);
    run("helm", &args, None, None)
}

/// The documents of a multi-document YAML stream (empty ones dropped).
fn documents(yaml: &str) -> Vec<serde_norway::Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| serde_norway::Value::deserialize(d).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind(doc: &serde_norway::Value) -> &str {
    doc.get("kind").and_then(|k| k.as_str()).unwrap_or("")
}

fn to_yaml(docs: &[&serde_norway::Value]) -> String {
    docs.iter()
        .map(|d| format!("---\n{}", serde_norway::to_string(d).expect("yaml")))
        .collect()
}

/// Needs a kubelet (the Deployment) or would make kube-apiserver call a Service (the webhooks).
fn applied_for_real(doc: &serde_norway::Value) -> bool {
    !matches!(
        kind(doc),
        "Deployment" | "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration"
    )
}

/// The chart's CRDs for real (once per test binary), plus open-schema stand-ins for the
/// prometheus-operator CRDs so that the optional ServiceMonitor and PrometheusRule validate.
async fn install_crds(c: &TestCluster) {
    static DONE: OnceCell<()> = OnceCell::const_new();
    DONE.get_or_init(|| async {
        let crds = chart().join("crds/evictord.dev_crds.yaml");
        ok(
            "kubectl apply crds/",
            &kubectl(c, &["apply", "-f", crds.to_str().unwrap()], None),
        );
        let stub = |plural: &str, kind: &str| {
            format!(
                "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
                 metadata:\n  name: {plural}.monitoring.coreos.com\nspec:\n  group: monitoring.coreos.com\n  \
                 scope: Namespaced\n  names:\n    plural: {plural}\n    kind: {kind}\n  versions:\n  \
                 - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        \
                 type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
            )
        };
        let stubs = stub("servicemonitors", "ServiceMonitor") + &stub("prometheusrules", "PrometheusRule");
        ok(
            "kubectl apply monitoring CRD stand-ins",
            &kubectl(c, &["apply", "-f", "-"], Some(&stubs)),
        );
        ok(
            "kubectl wait crds established",
            &kubectl(
                c,
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/evictionrequests.evictord.dev",
                    "crd/nodemaintenances.evictord.dev",
                    "crd/servicemonitors.monitoring.coreos.com",
                    "crd/prometheusrules.monitoring.coreos.com",
                ],
                None,
            ),
        );
    })
    .await;
}

fn create_namespace(c: &TestCluster, ns: &str) {
    let yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
    ok(
        "kubectl apply namespace",
        &kubectl(c, &["apply", "-f", "-"], Some(&yaml)),
    );
}

/// Renders for Kubernetes 1.20, applies everything with `--dry-run=server`, then everything but
/// the Deployment and the webhook configurations for real; returns the rendered documents.
async fn apply_chart(
    c: &TestCluster,
    release: &str,
    ns: &str,
    values: Option<&str>,
) -> Vec<serde_norway::Value> {
    install_crds(c).await;
    create_namespace(c, ns);
    let docs = documents(&render(release, ns, values, Some("1.20.2")));
    let all: Vec<&serde_norway::Value> = docs.iter().collect();
    let out = ok(
        "kubectl apply --dry-run=server (everything)",
        &kubectl(
            c,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&to_yaml(&all)),
        ),
    );
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            out.contains(&format!("/{name} ")),
            "{} {name} missing from the dry run:\n{out}",
            kind(d)
        );
    }
    let real: Vec<&serde_norway::Value> = docs.iter().filter(|d| applied_for_real(d)).collect();
    ok(
        "kubectl apply (for real)",
        &kubectl(c, &["apply", "-f", "-"], Some(&to_yaml(&real))),
    );
    docs
}

#[test]
fn helm_lint_strict_default_and_full_values() {
    let chart = chart().display().to_string();
    let full = full_values();
    for args in [
        vec!["lint", "--strict", &chart],
        vec!["lint", "--strict", &chart, "--values", &full],
        vec!["lint", "--strict", &chart, "--kube-version", "1.20.2"],
        vec![
            "lint",
            "--strict",
            &chart,
            "--values",
            &full,
            "--kube-version",
            "1.20.2",
        ],
        // Each flowcontrol.apiserver.k8s.io version the APF objects are rendered in.
        vec!["lint", "--strict", &chart, "--kube-version", "1.23.0"],
        vec!["lint", "--strict", &chart, "--kube-version", "1.26.0"],
        vec!["lint", "--strict", &chart, "--kube-version", "1.29.0"],
        vec![
            "lint",
            "--strict",
            &chart,
            "--values",
            &full,
            "--kube-version",
            "1.31.0",
        ],
    ] {
        let out = ok(
            &format!("helm {}", args.join(" ")),
            &run("helm", &args, None, None),
        );
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "helm {} is not clean:\n{out}",
            args.join(" ")
        );
    }
}

#[test]
fn helm_template_default_and_full_values() {
    let full = full_values();
    for (values, kube_version) in [
        (None, None),
        (Some(full.as_str()), None),
        (None, Some("1.20.2")),
        (Some(full.as_str()), Some("1.20.2")),
    ] {
        let docs = documents(&render("evictord", "evictord-system", values, kube_version));
        let kinds: Vec<&str> = docs.iter().map(kind).collect();
        for k in [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            assert!(
                kinds.contains(&k),
                "{k} not rendered ({values:?}, {kube_version:?})"
            );
        }
        let monitoring = kinds.contains(&"ServiceMonitor") && kinds.contains(&"PrometheusRule");
        assert_eq!(monitoring, values.is_some(), "monitoring objects");
        // The node agent (off by default, on in full-values; tests/node_agent_chart.rs checks it).
        assert_eq!(kinds.contains(&"DaemonSet"), values.is_some(), "node agent");

        let vwc = docs
            .iter()
            .find(|d| kind(d) == "ValidatingWebhookConfiguration")
            .unwrap();
        let pods = vwc["webhooks"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "pods.validate.evictord.dev")
            .unwrap();
        assert_eq!(pods["failurePolicy"], "Ignore");
        // The Eviction API bridge: on by default (full-values turns it off), never fail-closed.
        let bridge = vwc["webhooks"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "pods-eviction.validate.evictord.dev");
        assert_eq!(
            bridge.is_some(),
            values.is_none(),
            "bridge webhook ({values:?})"
        );
        if let Some(b) = bridge {
            assert_eq!(b["failurePolicy"], "Ignore");
            assert_eq!(b["sideEffects"], "NoneOnDryRun");
            assert_eq!(b["rules"][0]["resources"][0], "pods/eviction");
            assert_eq!(b["timeoutSeconds"], 3);
        }
        // matchConditions only where the server has them (and the values ask for them).
        let expect_mc = values.is_none() && kube_version.is_none();
        assert_eq!(
            !pods["matchConditions"].is_null(),
            expect_mc,
            "pod webhook matchConditions ({values:?}, {kube_version:?})"
        );
        // The readiness gate of endpoints.evictord.dev (on by default, off in full-values):
        // pod CREATE only, never fail-closed, matchConditions as the pod validating webhook.
        let mwc = docs
            .iter()
            .find(|d| kind(d) == "MutatingWebhookConfiguration")
            .unwrap();
        let gate = mwc["webhooks"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "pods.mutate.evictord.dev");
        assert_eq!(
            gate.is_some(),
            values.is_none(),
            "pod mutating webhook ({values:?})"
        );
        if let Some(g) = gate {
            assert_eq!(g["failurePolicy"], "Ignore");
            assert_eq!(g["rules"][0]["operations"][0], "CREATE");
            assert_eq!(g["rules"][0]["resources"][0], "pods");
            assert_eq!(g["clientConfig"]["service"]["path"], "/mutate/pods");
            assert_eq!(!g["matchConditions"].is_null(), expect_mc);
            assert!(!g["namespaceSelector"].is_null());
        }
        let pdb = docs
            .iter()
            .find(|d| kind(d) == "PodDisruptionBudget")
            .unwrap();
        let pdb_version = if kube_version.is_some() {
            "policy/v1beta1"
        } else {
            "policy/v1"
        };
        assert_eq!(pdb["apiVersion"], pdb_version);

        // The pod must be able to delete pods (rules E8/U5 apply to evictord's own writes).
        // (evictord's own ClusterRole, not the node agent's.)
        let cr = docs
            .iter()
            .find(|d| {
                kind(d) == "ClusterRole"
                    && !d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.ends_with("-node-agent"))
            })
            .unwrap();
        let pod_rule = cr["rules"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|r| {
                r["resources"]
                    .as_sequence()
                    .is_some_and(|s| s.iter().any(|x| x == "pods"))
            })
            .unwrap();
        assert!(
            pod_rule["verbs"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|v| v == "delete"),
            "the ClusterRole must allow delete on pods: {pod_rule:?}"
        );
    }
}

/// `webhook.url` registers every webhook at that URL instead of through the Service (for
/// hostNetwork beside an API server that reaches no pod or endpoint address, as in `make e2e`);
/// anything but an https URL is refused by the values schema.
#[test]
fn webhook_url_replaces_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("url.yaml");
    std::fs::write(&values, "webhook:\n  url: https://127.0.0.1:8443/\n").unwrap();
    let docs = documents(&render(
        "evictord",
        "evictord-system",
        Some(&values.display().to_string()),
        None,
    ));
    let mut urls = Vec::new();
    for doc in docs
        .iter()
        .filter(|d| kind(d).ends_with("WebhookConfiguration"))
    {
        for w in doc["webhooks"].as_sequence().unwrap() {
            assert!(w["clientConfig"]["service"].is_null(), "{w:?}");
            urls.push(w["clientConfig"]["url"].as_str().unwrap().to_string());
        }
    }
    urls.sort();
    assert_eq!(
        urls,
        [
            "https://127.0.0.1:8443/mutate/nodemaintenances",
            "https://127.0.0.1:8443/mutate/pods",
            "https://127.0.0.1:8443/validate/evictioninterceptors",
            "https://127.0.0.1:8443/validate/evictionrequests",
            "https://127.0.0.1:8443/validate/maintenancebudgets",
            "https://127.0.0.1:8443/validate/nodemaintenances",
            "https://127.0.0.1:8443/validate/pods",
            "https://127.0.0.1:8443/validate/pods-eviction",
        ]
    );
    std::fs::write(&values, "webhook:\n  url: http://127.0.0.1:8443\n").unwrap();
    let chart = chart().display().to_string();
    let v = values.display().to_string();
    let out = run(
        "helm",
        &["template", "x", &chart, "--values", &v],
        None,
        None,
    );
    assert!(
        !out.status.success(),
        "a plain-http webhook.url must be refused"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/webhook/url"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Deployment's container arguments are accepted by the real binary (a clap error exits 2;
/// anything later — here an unreadable kubeconfig — exits 1).
#[test]
fn deployment_args_are_accepted_by_the_binary() {
    let full = full_values();
    for values in [None, Some(full.as_str())] {
        let docs = documents(&render("evictord", "evictord-system", values, None));
        let args = deployment_args(&docs);
        let out = std::process::Command::new(support::evictord::BIN)
            .args(&args)
            .env("EVICTORD_KUBECONFIG", "/nonexistent/kubeconfig")
            .output()
            .expect("running evictord");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "evictord {args:?} ({values:?}):\n{stderr}"
        );
        assert!(
            stderr.contains("reading kubeconfig"),
            "expected to get as far as the kubeconfig: {stderr}"
        );
    }
}

/// The container arguments of the first rendered object of `workload` kind.
fn container_args(docs: &[serde_norway::Value], workload: &str) -> Vec<String> {
    let d = docs.iter().find(|d| kind(d) == workload).unwrap();
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn deployment_args(docs: &[serde_norway::Value]) -> Vec<String> {
    container_args(docs, "Deployment")
}

/// The container arguments of the node agent's DaemonSet.
fn node_agent_args(docs: &[serde_norway::Value]) -> Vec<String> {
    container_args(docs, "DaemonSet")
}

fn rate_limit_flags(args: &[String]) -> Vec<&str> {
    args.iter()
        .map(String::as_str)
        .filter(|a| a.starts_with("--kube-api-"))
        .collect()
}

/// `kubernetesAPI.qps` / `.burst` and `nodeAgent.kubernetesAPI.qps` / `.burst` become
/// `--kube-api-qps` / `--kube-api-burst` of `evictord serve` and `evictord node-agent`, only when
/// a qps is set (the defaults leave the binary's: no limit); a qps from `--set` (a string when it
/// has a fraction) renders as given and the binary takes it; nonsense is refused by the schema.
#[test]
fn kube_api_rate_limit_values_become_the_flags() {
    let agent_on = ["--set", "nodeAgent.enabled=true"];
    let out = render_with("evictord", "evictord-system", &agent_on);
    let docs = documents(&ok("helm template (defaults, node agent on)", &out));
    assert_eq!(
        rate_limit_flags(&deployment_args(&docs)),
        Vec::<&str>::new()
    );
    assert_eq!(
        rate_limit_flags(&node_agent_args(&docs)),
        Vec::<&str>::new()
    );

    let full = full_values();
    let docs = documents(&render("evictord", "evictord-system", Some(&full), None));
    assert_eq!(
        rate_limit_flags(&deployment_args(&docs)),
        ["--kube-api-qps=50", "--kube-api-burst=200"]
    );
    assert_eq!(
        rate_limit_flags(&node_agent_args(&docs)),
        ["--kube-api-qps=2.5", "--kube-api-burst=10"]
    );

    let set = [
        "--set",
        "nodeAgent.enabled=true",
        "--set",
        "kubernetesAPI.qps=0.5",
        "--set",
        "nodeAgent.kubernetesAPI.qps=3",
        "--set",
        "nodeAgent.kubernetesAPI.burst=1000",
    ];
    let docs = documents(&ok(
        "helm template --set ...qps",
        &render_with("evictord", "evictord-system", &set),
    ));
    let serve = deployment_args(&docs);
    assert_eq!(
        rate_limit_flags(&serve),
        ["--kube-api-qps=0.5", "--kube-api-burst=100"]
    );
    assert_eq!(
        rate_limit_flags(&node_agent_args(&docs)),
        ["--kube-api-qps=3", "--kube-api-burst=1000"]
    );
    // The binary takes them (a clap error exits 2; the unreadable kubeconfig exits 1).
    let out = std::process::Command::new(support::evictord::BIN)
        .args(&serve)
        .env("EVICTORD_KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("running evictord");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "evictord {serve:?}:\n{stderr}");
    assert!(stderr.contains("reading kubeconfig"), "{stderr}");

    assert_refused(&[
        ("kubernetesAPI.qps=-1", "/kubernetesAPI/qps"),
        ("kubernetesAPI.qps=fast", "/kubernetesAPI/qps"),
        ("kubernetesAPI.burst=0", "/kubernetesAPI/burst"),
        (
            "nodeAgent.kubernetesAPI.burst=0",
            "/nodeAgent/kubernetesAPI/burst",
        ),
    ]);
}

/// Each `--set` is refused by the chart's schema or templates, with its message.
fn assert_refused(cases: &[(&str, &str)]) {
    for (set, message) in cases {
        let out = render_with("evictord", "evictord-system", &["--set", set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} was accepted");
        assert!(stderr.contains(message), "--set {set}: {stderr}");
    }
}

#[tokio::test]
async fn default_values_apply_to_the_real_control_plane() {
    let c = support::cluster().await;
    let docs = apply_chart(c, "evictord", "evictord-system", None).await;
    for d in docs.iter().filter(|d| applied_for_real(d)) {
        let name = d["metadata"]["name"].as_str().unwrap();
        let mut args = vec!["get", kind(d), name, "-o", "name"];
        if !d["metadata"]["namespace"].is_null() {
            args.extend(["-n", "evictord-system"]);
        }
        ok(
            &format!("kubectl {}", args.join(" ")),
            &kubectl(c, &args, None),
        );
    }
}

#[tokio::test]
async fn full_values_apply_to_the_real_control_plane() {
    let c = support::cluster().await;
    let full = full_values();
    // ci/full-values.yaml puts the dashboard ConfigMap where Grafana's sidecar watches.
    create_namespace(c, "monitoring");
    let docs = apply_chart(c, "t", "evictord-full-ns", Some(&full)).await;
    let real: Vec<&str> = docs
        .iter()
        .filter(|d| applied_for_real(d))
        .map(kind)
        .collect();
    assert!(real.contains(&"ServiceMonitor") && real.contains(&"PrometheusRule"));
    ok(
        "kubectl get the dashboard ConfigMap",
        &kubectl(
            c,
            &[
                "get",
                "configmap",
                "-n",
                "monitoring",
                "evictord-full-dashboard",
            ],
            None,
        ),
    );
    ok(
        "kubectl get the PrometheusRule",
        &kubectl(
            c,
            &[
                "get",
                "prometheusrules.monitoring.coreos.com",
                "-n",
                "evictord-full-ns",
                "evictord-full",
            ],
            None,
        ),
    );
}
