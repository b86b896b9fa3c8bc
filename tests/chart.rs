//! The Helm chart `charts/evictord` with real `helm` and `kubectl`: `helm lint --strict` and
//! `helm template` with the default values and with `ci/full-values.yaml`; the manifests rendered
//! for Kubernetes 1.20 applied to the real control plane (`--dry-run=server` for everything, for
//! real everything but the Deployment and the webhook configurations, which would make
//! kube-apiserver resolve the Service through the machine's DNS); and the RBAC test: `evictord
//! serve` with the Deployment's own flags, authenticated as the chart's ServiceAccount, runs every
//! flow without a single `Forbidden`. API Priority and Fairness: the FlowSchemas and
//! PriorityLevelConfigurations in the flowcontrol version each Kubernetes release serves, and on
//! the real control plane kube-apiserver classifying the chart's accounts into them.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use evictord::api::EvictionRequest;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde::Deserialize;
use serde_json::json;
use support::evictord::SpawnOptions;
use support::fixtures::pod;
use support::tools::{kubectl, run};
use support::wait::until;
use support::{Evictord, TestCluster};
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

/// `evictord serve` as the chart's ServiceAccount, with the chart's RBAC applied for real and the
/// Deployment's own flags: certificate Secret created, caBundle patched, lease acquired, an
/// EvictionRequest evicts its pod, SIGTERM releases the lease, and the log holds no `Forbidden`.
#[tokio::test]
async fn chart_rbac_is_enough_for_every_call_of_serve() {
    let c = support::cluster().await;
    let (release, ns) = ("rbac", "rbac-system");
    let fullname = "rbac-evictord";
    let docs = apply_chart(c, release, ns, None).await;
    let sa = format!("system:serviceaccount:{ns}:{fullname}");
    let kubeconfig = c.kubeconfig_as(&sa);

    // The chart's own flags, minus the listen addresses (the test picks loopback ports).
    let chart_args: Vec<String> = deployment_args(&docs)
        .into_iter()
        .filter(|a| {
            a != "serve" && !a.starts_with("--webhook-addr=") && !a.starts_with("--probe-addr=")
        })
        .collect();
    for flag in [
        format!("--tls-secret={fullname}-tls"),
        format!("--service-name={fullname}"),
        format!("--service-namespace={ns}"),
        format!("--webhook-config-name={fullname}"),
        "--leader-election".to_string(),
        format!("--leader-election-namespace={ns}"),
        format!("--leader-election-id={fullname}-leader"),
    ] {
        assert!(chart_args.contains(&flag), "{flag} not in {chart_args:?}");
    }
    let mut args: Vec<&str> = chart_args.iter().map(String::as_str).collect();
    args.push("--cert-check-interval=1s");

    // The chart's webhook configurations, by URL: caBundle patching must find them by name. The
    // placeholder CA (the control plane's) is what evictord must replace.
    let port = support::control_plane::free_port();
    Evictord::register_webhooks_at(c, fullname, port, &c.dir.join("ca.crt")).await;

    let mut e = Evictord::spawn(
        c,
        &args,
        SpawnOptions {
            kubeconfig: Some(kubeconfig),
            webhook_port: Some(port),
            ..Default::default()
        },
    );
    e.ready().await;
    let client = c.client().await;

    // The certificate Secret, created by the ServiceAccount.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets
        .get(&format!("{fullname}-tls"))
        .await
        .expect("the certificate Secret");
    let data = secret.data.unwrap();
    let ca = data.get("ca.crt").expect("ca.crt").clone();
    assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));

    // caBundle patched into both configurations.
    let vwc = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(fullname)
        .await
        .unwrap();
    for w in vwc.webhooks.unwrap() {
        assert_eq!(w.client_config.ca_bundle.as_ref(), Some(&ca), "{}", w.name);
    }
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(fullname)
        .await
        .unwrap();
    for w in mwc.webhooks.unwrap() {
        assert_eq!(w.client_config.ca_bundle.as_ref(), Some(&ca), "{}", w.name);
    }

    // The lease.
    let identity = format!("evictord-{}", e.pid().unwrap());
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    until(T, "the lease held by evictord", || async {
        let l = leases.get_opt(&format!("{fullname}-leader")).await.ok()??;
        (l.spec?.holder_identity? == identity).then_some(())
    })
    .await;

    // An EvictionRequest evicts its pod (webhook lookups, SubjectAccessReviews, label and status
    // patches, the Eviction API, events).
    let test_ns = c.namespace("rbac-flow").await;
    let p = pod("victim")
        .label("app", "victim")
        .create(&client, &test_ns)
        .await;
    let uid = p.metadata.uid.clone().unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), &test_ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "victim", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er)
        .await
        .expect("create EvictionRequest");
    until(T, "Evicted=True", || async {
        let r = ers.get(&uid).await.ok()?;
        r.status
            .as_ref()
            .is_some_and(|s| s.is_true("Evicted"))
            .then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &test_ns);
    assert!(pods.get_opt("victim").await.unwrap().is_none());
    let labelled = ers.get(&uid).await.unwrap();
    assert!(
        labelled.metadata.labels.is_some_and(|l| !l.is_empty()),
        "the controller's label patch went through"
    );

    surge_as_the_chart_account(&client, &test_ns).await;
    hpa_surge_as_the_chart_account(&client, &test_ns).await;
    endpoints_as_the_chart_account(&client, &test_ns).await;

    // SIGTERM: graceful stop, lease released.
    let status = e.stop().expect("exit status");
    assert!(status.success(), "exit: {status}\n{}", e.logs());
    let logs = e.logs();
    assert!(
        logs.contains("released the leader lease"),
        "lease not released:\n{logs}"
    );
    for bad in [
        "Forbidden",
        "forbidden",
        "denied the request",
        "could not patch caBundle",
        // The interceptors' watch caches (DaemonSets, ReplicaSets, a surged workload's pods)
        // need list and watch.
        "may not list and watch",
    ] {
        assert!(
            !logs.contains(bad),
            "{bad:?} in the log of serve running as {sa}:\n{logs}"
        );
    }

    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(fullname, &Default::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(fullname, &Default::default())
        .await;
    c.delete_namespace(&test_ns).await;
}

/// The Deployment interceptor's calls as the chart's ServiceAccount: pod → ReplicaSet →
/// Deployment, the HorizontalPodAutoscaler list, the surge patch, and the settler's watch and
/// restore patch. There is no kube-controller-manager in this binary: the test writes the
/// Deployment's status and owner chain itself.
async fn surge_as_the_chart_account(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use kube::api::{Patch, PatchParams};
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = deployments
        .create(
            &PostParams::default(),
            &support::fixtures::deployment("web", 1, 1, 0, &["deployment.apps.k8s.io"]),
        )
        .await
        .expect("create Deployment");
    let settled = |generation: i64, n: i32| {
        json!({"status": {"observedGeneration": generation, "replicas": n, "updatedReplicas": n,
            "availableReplicas": n, "readyReplicas": n}})
    };
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&settled(1, 1)),
        )
        .await
        .expect("Deployment status");
    let owner = |kind: &str, name: &str, uid: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}]);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "ownerReferences": owner("Deployment", "web", d.metadata.uid.as_deref().unwrap())},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}},
    }))
    .unwrap();
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &rs)
        .await
        .expect("create ReplicaSet");
    let mut web = pod("web-1-a")
        .label("app", "web")
        .interceptors(&["deployment.apps.k8s.io"])
        .build();
    web.metadata.owner_references = serde_json::from_value(owner(
        "ReplicaSet",
        "web-1",
        rs.metadata.uid.as_deref().unwrap(),
    ))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let web = pods.create(&PostParams::default(), &web).await.unwrap();
    let uid = web.metadata.uid.clone().unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "web-1-a", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er).await.unwrap();
    let generation = until(T, "the Deployment surged to 2", || async {
        let d = deployments.get("web").await.ok()?;
        (d.spec.replicas == Some(2)).then_some(d.metadata.generation?)
    })
    .await;
    // The "deployment controller" and the "kubelet": the surge pod runs, Ready, and the
    // Deployment's status counts it (the interceptor checks the pods as well as the status).
    let mut surge = pod("web-1-b").label("app", "web").build();
    surge.metadata.owner_references = web.metadata.owner_references.clone();
    pods.create(&PostParams::default(), &surge)
        .await
        .expect("create the surge pod");
    pods.patch_status(
        "web-1-b",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("the surge pod Ready");
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&settled(generation, 2)),
        )
        .await
        .unwrap();
    until(
        T,
        "the pod evicted and the Deployment back at 1",
        || async {
            let d = deployments.get("web").await.ok()?;
            let gone = pods.get_opt("web-1-a").await.ok()?.is_none();
            (gone && d.spec.replicas == Some(1)).then_some(())
        },
    )
    .await;
}

/// The HorizontalPodAutoscaler interceptor's calls as the chart's ServiceAccount: pod →
/// ReplicaSet → Deployment, the autoscalers' list, the Deployment and its scale subresource, the
/// floor's patch, and the settler's watch and restoring patch. The test plays the deployment and
/// horizontal-pod-autoscaler controllers (there is no kube-controller-manager in this binary).
/// The `endpoints.evictord.dev` interceptor and the keeper of its gate as the chart's account:
/// the pod webhook adds the gate, the keeper sets it `True`, the interceptor reads the budgets and
/// the Services, sets it `False`, waits until the Endpoints (written here, as the endpoints
/// controller would, which this control plane does not run) drop the pod, and lets it go.
async fn endpoints_as_the_chart_account(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use kube::api::{Patch, PatchParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let gated = pod("gated")
        .label("app", "gated")
        .interceptors(&["endpoints.evictord.dev"])
        .annotation("evictord.dev/deregistration-delay", "0s")
        .create(client, ns)
        .await;
    let uid = gated.metadata.uid.clone().unwrap();
    let gates = gated
        .spec
        .clone()
        .unwrap()
        .readiness_gates
        .unwrap_or_default();
    assert_eq!(gates[0].condition_type, "evictord.dev/serving", "rule P9");
    let serving = |p: &Pod| evictord::serving::condition_of(p).map(|c| c.status.clone());
    until(T, "evictord.dev/serving True", || async {
        let p = pods.get("gated").await.ok()?;
        (serving(&p).as_deref() == Some("True")).then_some(())
    })
    .await;
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "gated"},
        "spec": {"selector": {"app": "gated"}, "ports": [{"port": 80}]}}))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let address =
        json!({"ip": "10.9.0.1", "targetRef": {"kind": "Pod", "name": "gated", "uid": uid}});
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    let listed = |ready: bool| {
        let (key, other) = if ready {
            ("addresses", "notReadyAddresses")
        } else {
            ("notReadyAddresses", "addresses")
        };
        json!({"metadata": {"name": "gated"}, "subsets": [{key: [address.clone()], other: null, "ports": [{"port": 80}]}]})
    };
    endpoints
        .create(
            &PostParams::default(),
            &serde_json::from_value(listed(true)).unwrap(),
        )
        .await
        .unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "gated", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er).await.unwrap();
    until(T, "the interceptor waiting for Service gated", || async {
        let s = ers.get(&uid).await.ok()?.status?;
        let m = s.interceptor("endpoints.evictord.dev")?.message.clone()?;
        m.contains("waiting until Service gated drop it")
            .then_some(())
    })
    .await;
    let p = pods.get("gated").await.unwrap();
    assert_eq!(serving(&p).as_deref(), Some("False"));
    endpoints
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(&listed(false)),
        )
        .await
        .unwrap();
    until(T, "the gated pod evicted", || async {
        let r = ers.get(&uid).await.ok()?;
        r.status?.is_true("Evicted").then_some(())
    })
    .await;
}

async fn hpa_surge_as_the_chart_account(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
    use kube::ResourceExt;
    use kube::api::{Patch, PatchParams};
    const HPA: &str = "horizontalpodautoscaler.autoscaling.k8s.io";
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = deployments
        .create(
            &PostParams::default(),
            &support::fixtures::deployment("api", 1, 1, 0, &[HPA]),
        )
        .await
        .expect("create Deployment");
    let settled = |generation: i64, n: i32| {
        json!({"status": {"observedGeneration": generation, "replicas": n, "updatedReplicas": n,
            "availableReplicas": n, "readyReplicas": n}})
    };
    deployments
        .patch_status(
            "api",
            &PatchParams::default(),
            &Patch::Merge(&settled(1, 1)),
        )
        .await
        .expect("Deployment status");
    let owner = |kind: &str, name: &str, uid: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}]);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "api-1", "ownerReferences": owner("Deployment", "api", d.metadata.uid.as_deref().unwrap())},
        "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": {"metadata": {"labels": {"app": "api"}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}},
    }))
    .unwrap();
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &rs)
        .await
        .expect("create ReplicaSet");
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "api-hpa"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                 "minReplicas": 1, "maxReplicas": 3},
    }))
    .unwrap();
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("create HorizontalPodAutoscaler");
    let mut api_pod = pod("api-1-a")
        .label("app", "api")
        .interceptors(&[HPA])
        .build();
    api_pod.metadata.owner_references = serde_json::from_value(owner(
        "ReplicaSet",
        "api-1",
        rs.metadata.uid.as_deref().unwrap(),
    ))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let api_pod = pods.create(&PostParams::default(), &api_pod).await.unwrap();
    let uid = api_pod.metadata.uid.clone().unwrap();
    let ers: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let er: EvictionRequest = serde_json::from_value(json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": uid},
        "spec": {"target": {"pod": {"name": "api-1-a", "uid": uid}}, "requesters": [{"name": "rbac.example.com"}]}
    }))
    .unwrap();
    ers.create(&PostParams::default(), &er).await.unwrap();
    until(T, "the autoscaler's floor raised to 2", || async {
        let h = hpas.get("api-hpa").await.ok()?;
        (h.spec.min_replicas == Some(2)).then_some(())
    })
    .await;
    // evictord brings the Deployment up to the raised floor itself, through its scale
    // subresource (no autoscaler runs here to do it).
    until(
        T,
        "the Deployment scaled to the raised floor by evictord",
        || async {
            let d = deployments.get("api").await.ok()?;
            (d.spec.replicas == Some(2)).then_some(())
        },
    )
    .await;
    // The "deployment controller" and the "kubelet"
    // start a Ready pod and make it available (the interceptor checks the pods as well as the
    // status).
    let mut surge = pod("api-1-b").label("app", "api").build();
    surge.metadata.owner_references = api_pod.metadata.owner_references.clone();
    pods.create(&PostParams::default(), &surge)
        .await
        .expect("create the surge pod");
    pods.patch_status(
        "api-1-b",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("the surge pod Ready");
    let d = deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    deployments
        .patch_status(
            "api",
            &PatchParams::default(),
            &Patch::Merge(&settled(d.metadata.generation.unwrap(), 2)),
        )
        .await
        .unwrap();
    until(
        T,
        "the pod evicted and the autoscaler's floor back at 1",
        || async {
            let h = hpas.get("api-hpa").await.ok()?;
            let gone = pods.get_opt("api-1-a").await.ok()?.is_none();
            let recorded = h.annotations().contains_key("evictord.dev/hpa-surge");
            (gone && h.spec.min_replicas == Some(1) && !recorded).then_some(())
        },
    )
    .await;
}

const FLOWCONTROL: &str = "flowcontrol.apiserver.k8s.io";

/// The chart's flowcontrol object of `kind` named `name` (panics if missing).
fn flow_object<'a>(
    docs: &'a [serde_norway::Value],
    kind_name: &str,
    name: &str,
) -> &'a serde_norway::Value {
    docs.iter()
        .find(|d| kind(d) == kind_name && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind_name} {name} not rendered"))
}

fn is_flowcontrol(doc: &serde_norway::Value) -> bool {
    matches!(kind(doc), "FlowSchema" | "PriorityLevelConfiguration")
}

/// What a values file asks of the APF objects (the defaults, or ci/full-values.yaml's).
struct ApfValues {
    fullname: &'static str,
    namespace: &'static str,
    accounts: &'static [&'static str],
    lease_precedence: i64,
    lease_shares: i64,
    precedence: i64,
    shares: i64,
    lendable: i64,
    queuing: [i64; 3],
}

/// The four APF objects as rendered for a server serving `version` of the API: the version's
/// fields (assuredConcurrencyShares until v1beta2; nominalConcurrencyShares and lendablePercent
/// from v1beta3), the Leases' FlowSchema matched first into a level of its own that lends nothing,
/// the other FlowSchema matching every request of the same accounts into a queuing level.
fn check_apf_objects(docs: &[serde_norway::Value], version: &str, v: &ApfValues, what: &str) {
    let api_version = format!("{FLOWCONTROL}/{version}");
    let lease_name = format!("{}-leader-election", v.fullname);
    let flow: Vec<&serde_norway::Value> = docs.iter().filter(|d| is_flowcontrol(d)).collect();
    assert_eq!(flow.len(), 4, "{what}: {flow:?}");
    for d in &flow {
        assert_eq!(d["apiVersion"], api_version.as_str(), "{what}: {d:?}");
    }
    let subjects: Vec<(String, String)> = v
        .accounts
        .iter()
        .map(|a| (a.to_string(), v.namespace.to_string()))
        .collect();
    let subjects_of = |fs: &serde_norway::Value| -> Vec<(String, String)> {
        fs["spec"]["rules"][0]["subjects"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s["kind"], "ServiceAccount");
                (
                    s["serviceAccount"]["name"].as_str().unwrap().to_string(),
                    s["serviceAccount"]["namespace"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect()
    };
    let nominal = matches!(version, "v1beta3" | "v1");
    let check_level = |name: &str, shares: i64, lendable: i64, queuing: [i64; 3]| {
        let pl = flow_object(docs, "PriorityLevelConfiguration", name);
        assert_eq!(pl["spec"]["type"], "Limited", "{what}: {name}");
        let limited = &pl["spec"]["limited"];
        let (present, absent) = if nominal {
            ("nominalConcurrencyShares", "assuredConcurrencyShares")
        } else {
            ("assuredConcurrencyShares", "nominalConcurrencyShares")
        };
        assert_eq!(limited[present], shares, "{what}: {name} {present}");
        assert!(limited[absent].is_null(), "{what}: {name} has {absent}");
        if nominal {
            assert_eq!(limited["lendablePercent"], lendable, "{what}: {name}");
        } else {
            assert!(
                limited["lendablePercent"].is_null(),
                "{what}: {name}: lendablePercent before v1beta3"
            );
        }
        let lr = &limited["limitResponse"];
        assert_eq!(lr["type"], "Queue", "{what}: {name}");
        let q = &lr["queuing"];
        assert_eq!(
            [&q["queues"], &q["handSize"], &q["queueLengthLimit"]],
            queuing.each_ref(),
            "{what}: {name} queuing"
        );
    };
    check_level(&lease_name, v.lease_shares, 0, [16, 4, 50]);
    check_level(v.fullname, v.shares, v.lendable, v.queuing);

    let lease_fs = flow_object(docs, "FlowSchema", &lease_name);
    let fs = flow_object(docs, "FlowSchema", v.fullname);
    assert_eq!(
        lease_fs["spec"]["priorityLevelConfiguration"]["name"],
        lease_name.as_str()
    );
    assert_eq!(fs["spec"]["priorityLevelConfiguration"]["name"], v.fullname);
    assert_eq!(lease_fs["spec"]["matchingPrecedence"], v.lease_precedence);
    assert_eq!(fs["spec"]["matchingPrecedence"], v.precedence);
    assert!(
        v.lease_precedence < v.precedence,
        "the Leases' FlowSchema must be matched first"
    );
    for f in [lease_fs, fs] {
        assert_eq!(subjects_of(f), subjects, "{what}: subjects");
        assert_eq!(f["spec"]["distinguisherMethod"]["type"], "ByUser");
        assert_eq!(f["spec"]["rules"].as_sequence().unwrap().len(), 1);
    }
    let lease_rules = &lease_fs["spec"]["rules"][0];
    let leases: serde_norway::Value = serde_norway::from_str(
        "[{apiGroups: [coordination.k8s.io], resources: [leases], verbs: ['*'], namespaces: ['*']}]",
    )
    .unwrap();
    assert_eq!(lease_rules["resourceRules"], leases, "{what}");
    assert!(lease_rules["nonResourceRules"].is_null(), "{what}");
    let everything: serde_norway::Value = serde_norway::from_str(
        "[{apiGroups: ['*'], resources: ['*'], verbs: ['*'], clusterScope: true, namespaces: ['*']}]",
    )
    .unwrap();
    let rules = &fs["spec"]["rules"][0];
    assert_eq!(rules["resourceRules"], everything, "{what}");
    let non_resource: serde_norway::Value =
        serde_norway::from_str("[{nonResourceURLs: ['*'], verbs: ['*']}]").unwrap();
    assert_eq!(rules["nonResourceRules"], non_resource, "{what}");
}

const DEFAULT_APF: ApfValues = ApfValues {
    fullname: "evictord",
    namespace: "evictord-system",
    accounts: &["evictord"],
    lease_precedence: 190,
    lease_shares: 5,
    precedence: 850,
    shares: 20,
    lendable: 50,
    queuing: [16, 4, 100],
};

const FULL_APF: ApfValues = ApfValues {
    fullname: "evictord-full",
    namespace: "evictord-system",
    accounts: &["evictord-sa", "evictord-agent-sa"],
    lease_precedence: 180,
    lease_shares: 8,
    precedence: 800,
    shares: 30,
    lendable: 25,
    queuing: [32, 6, 64],
};

/// The API version of FlowSchema and PriorityLevelConfiguration follows the server: from the API
/// list when helm has one (`helm install`; here `--api-versions` with kinds, as discovery gives
/// them), else from `--kube-version` (`helm template` alone holds every version helm knows in its
/// default list, so a group/version there says nothing about the server).
#[test]
fn apf_objects_follow_the_servers_flowcontrol_version() {
    let served = |versions: &[&str]| -> Vec<String> {
        versions
            .iter()
            .flat_map(|v| {
                ["FlowSchema", "PriorityLevelConfiguration"]
                    .map(|k| format!("{FLOWCONTROL}/{v}/{k}"))
            })
            .collect()
    };
    let cases: &[(&str, Vec<String>, &str)] = &[
        ("1.20.2", vec![], "v1beta1"),
        ("1.22.17", vec![], "v1beta1"),
        ("1.23.0", vec![], "v1beta2"),
        ("1.25.16", vec![], "v1beta2"),
        ("1.26.0", vec![], "v1beta3"),
        ("1.28.15", vec![], "v1beta3"),
        ("1.29.0", vec![], "v1"),
        ("1.31.0", vec![], "v1"),
        // What servers discover: the newest of them, never v1alpha1.
        ("1.20.2", served(&["v1alpha1", "v1beta1"]), "v1beta1"),
        ("1.23.0", served(&["v1beta1", "v1beta2"]), "v1beta2"),
        ("1.26.0", served(&["v1beta2", "v1beta3"]), "v1beta3"),
        ("1.31.0", served(&["v1beta3", "v1"]), "v1"),
        // The list wins over the version: a 1.26 server with v1beta3 turned off
        // (--runtime-config), a 1.29 server with v1 turned off.
        ("1.26.0", served(&["v1beta1", "v1beta2"]), "v1beta2"),
        ("1.29.0", served(&["v1beta3"]), "v1beta3"),
    ];
    let full = full_values();
    for (kube_version, api_versions, expected) in cases {
        for (values, apf) in [(None, &DEFAULT_APF), (Some(full.as_str()), &FULL_APF)] {
            let mut extra = vec!["--kube-version", kube_version];
            for a in api_versions {
                extra.extend(["--api-versions", a.as_str()]);
            }
            if let Some(v) = values {
                extra.extend(["--values", v]);
            }
            let what = format!("helm template {}", extra.join(" "));
            let docs = documents(&ok(&what, &render_with("evictord", apf.namespace, &extra)));
            check_apf_objects(&docs, expected, apf, &what);
        }
    }
}

/// `apf.enabled: false` renders no flowcontrol object (and the rest of the chart as before).
#[test]
fn apf_disabled_renders_no_flowcontrol_object() {
    for kube_version in ["1.20.2", "1.26.0", "1.31.0"] {
        for (set, expected) in [(None, 4), (Some("apf.enabled=false"), 0)] {
            let mut extra = vec!["--kube-version", kube_version];
            if let Some(s) = set {
                extra.extend(["--set", s]);
            }
            let what = format!("helm template {}", extra.join(" "));
            let docs = documents(&ok(
                &what,
                &render_with("evictord", "evictord-system", &extra),
            ));
            assert_eq!(
                docs.iter().filter(|d| is_flowcontrol(d)).count(),
                expected,
                "{what}"
            );
            assert!(docs.iter().any(|d| kind(d) == "Deployment"), "{what}");
        }
    }
}

/// Values that would make the Leases' flow useless or that kube-apiserver would refuse are
/// refused by `helm template` already, with the value named.
#[test]
fn apf_values_kube_apiserver_would_refuse_are_refused() {
    assert_refused(&[
        (
            "apf.leaderElection.matchingPrecedence=900",
            "apf.leaderElection.matchingPrecedence (900) must be below apf.requests.matchingPrecedence (850)",
        ),
        (
            "apf.requests.handSize=20",
            "apf.requests.handSize (20) must not exceed apf.requests.queues (16)",
        ),
        (
            "apf.requests.matchingPrecedence=10000",
            "/apf/requests/matchingPrecedence",
        ),
        (
            "apf.requests.lendablePercent=101",
            "/apf/requests/lendablePercent",
        ),
        (
            "apf.leaderElection.concurrencyShares=0",
            "/apf/leaderElection/concurrencyShares",
        ),
    ]);
}

/// The chart's FlowSchemas and PriorityLevelConfigurations on the real control plane
/// (kube-apiserver 1.20, flowcontrol.apiserver.k8s.io/v1beta1, APF on by default): `helm
/// template --dry-run=server`, with the server's discovery and version as `helm install` has them,
/// renders v1beta1, and that discovery lists the kinds the chart asks for; kube-apiserver accepts
/// the objects, its APF
/// configuration controller digests them (Dangling False), and it classifies requests made as
/// the chart's ServiceAccount into them: a Lease into the Leases' flow, anything else into the
/// other (the X-Kubernetes-PF-* response headers name the FlowSchema and the level by UID).
#[tokio::test]
async fn apf_objects_classify_the_chart_accounts_on_the_real_control_plane() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let c = support::cluster().await;
    let (release, ns) = ("apf", "apf-system");
    let fullname = "apf-evictord";
    let lease_flow = format!("{fullname}-leader-election");

    let chart_dir = chart().display().to_string();
    let discovered = ok(
        "helm template --dry-run=server",
        &run(
            "helm",
            &[
                "template",
                release,
                &chart_dir,
                "--namespace",
                ns,
                "--dry-run=server",
            ],
            Some(&c.kubeconfig),
            None,
        ),
    );
    let discovered = documents(&discovered);
    // The helper asks the API list for "<group>/<version>/<Kind>": discovery names kinds (helm's
    // built-in list, without a cluster, does not), so on a real server the list decides.
    let probe = tempfile::tempdir().unwrap();
    std::fs::create_dir(probe.path().join("templates")).unwrap();
    std::fs::write(
        probe.path().join("Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        probe.path().join("templates/probe.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  \
             v1beta1: \"{{{{ .Capabilities.APIVersions.Has \"{FLOWCONTROL}/v1beta1/FlowSchema\" }}}}\"\n  \
             v1beta2: \"{{{{ .Capabilities.APIVersions.Has \"{FLOWCONTROL}/v1beta2/FlowSchema\" }}}}\"\n"
        ),
    )
    .unwrap();
    let probe_dir = probe.path().display().to_string();
    let probed = ok(
        "helm template --dry-run=server (probe)",
        &run(
            "helm",
            &["template", "probe", &probe_dir, "--dry-run=server"],
            Some(&c.kubeconfig),
            None,
        ),
    );
    let probed = &documents(&probed)[0]["data"];
    assert_eq!(
        (&probed["v1beta1"], &probed["v1beta2"]),
        (&"true".into(), &"false".into()),
        "discovered kinds"
    );
    let versions: std::collections::BTreeSet<&str> = discovered
        .iter()
        .filter(|d| is_flowcontrol(d))
        .map(|d| d["apiVersion"].as_str().unwrap())
        .collect();
    assert_eq!(
        versions.into_iter().collect::<Vec<_>>(),
        [format!("{FLOWCONTROL}/v1beta1").as_str()],
        "from the server's discovery"
    );

    let docs = apply_chart(c, release, ns, None).await;
    assert_eq!(docs.iter().filter(|d| is_flowcontrol(d)).count(), 4);
    let client = c.client().await;
    let api = |kind: &str| {
        Api::<DynamicObject>::all_with(
            client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(FLOWCONTROL, "v1beta1", kind)),
        )
    };
    let (schemas, levels) = (api("FlowSchema"), api("PriorityLevelConfiguration"));
    let mut uids = std::collections::BTreeMap::new();
    for name in [fullname, lease_flow.as_str()] {
        let pl = levels
            .get(name)
            .await
            .expect("the PriorityLevelConfiguration");
        uids.insert(("level", name), pl.metadata.uid.unwrap());
        let fs = until(T, &format!("FlowSchema {name} Dangling=False"), || async {
            let fs = schemas.get(name).await.ok()?;
            let dangling = fs.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Dangling")?
                .clone();
            (dangling["status"] == "False").then_some(fs)
        })
        .await;
        assert_eq!(fs.data["spec"]["priorityLevelConfiguration"]["name"], name);
        uids.insert(("schema", name), fs.metadata.uid.unwrap());
    }

    // Requests as the chart's ServiceAccount (impersonated: APF classifies after impersonation);
    // whatever their answer (the Lease does not exist, the account may not list pods), they
    // are classified first.
    let sa = format!("system:serviceaccount:{ns}:{fullname}");
    let as_sa = c.client_as(&sa, &[]).await;
    for (path, flow) in [
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{fullname}-leader"),
            lease_flow.as_str(),
        ),
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            lease_flow.as_str(),
        ),
        (
            format!("/api/v1/namespaces/{ns}/secrets/{fullname}-tls"),
            fullname,
        ),
        ("/api/v1/pods?limit=1".to_string(), fullname),
        ("/apis".to_string(), fullname),
    ] {
        let request = http::Request::get(&path)
            .body(kube::client::Body::from(Vec::new()))
            .unwrap();
        let response = as_sa.send(request).await.expect("request as the account");
        let header = |h: &str| {
            response
                .headers()
                .get(h)
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(
            header("X-Kubernetes-PF-FlowSchema-UID").as_deref(),
            Some(uids[&("schema", flow)].as_str()),
            "GET {path} ({}) not in FlowSchema {flow}",
            response.status()
        );
        assert_eq!(
            header("X-Kubernetes-PF-PriorityLevel-UID").as_deref(),
            Some(uids[&("level", flow)].as_str()),
            "GET {path} not in PriorityLevelConfiguration {flow}"
        );
    }
    // And kube-apiserver's metrics count them by FlowSchema and level (two Lease requests, three
    // others above), as the book tells operators to check.
    let metrics = ok(
        "kubectl get --raw /metrics",
        &kubectl(c, &["get", "--raw", "/metrics"], None),
    );
    for (flow, at_least) in [(lease_flow.as_str(), 2.0), (fullname, 3.0)] {
        let series = format!(
            "apiserver_flowcontrol_dispatched_requests_total{{flow_schema=\"{flow}\",priority_level=\"{flow}\"}} "
        );
        let n: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .unwrap_or_else(|| panic!("no {series}in kube-apiserver's metrics"))
            .trim()
            .parse()
            .unwrap();
        assert!(n >= at_least, "{series}{n}");
    }
}
