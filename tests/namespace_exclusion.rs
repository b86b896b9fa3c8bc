//! `webhook.excludedNamespaces` on a real kube-apiserver v1.20, which does not set the
//! `kubernetes.io/metadata.name` label the chart's namespaceSelector matches on: the pod webhook,
//! registered with the chart's own selector, still reviews the excluded namespace's pods until
//! the namespace is labelled with the command the install notes print for 1.20; then it does
//! not. Controllers are off.

mod support;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::fixtures::pod;
use support::tools::{kubectl, run};

const ARGS: &[&str] = &["--controllers=none"];
const LABEL: &str = "kubernetes.io/metadata.name";
const POD_WEBHOOK: &str = "pods.validate.evictord.dev";

fn chart() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/charts/evictord").to_string()
}

/// The chart's pod webhook namespaceSelector with `excluded` as `webhook.excludedNamespaces`.
fn chart_namespace_selector(excluded: &str) -> serde_json::Value {
    let set = format!("webhook.excludedNamespaces={{{excluded}}}");
    let chart = chart();
    let out = run(
        "helm",
        &[
            "template",
            "evictord",
            &chart,
            "--namespace",
            "evictord",
            "--set",
            &set,
            "--show-only",
            "templates/webhooks.yaml",
        ],
        None,
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc).expect("yaml");
        for w in value["webhooks"].as_array().into_iter().flatten() {
            if w["name"] == POD_WEBHOOK {
                return w["namespaceSelector"].clone();
            }
        }
    }
    panic!("no {POD_WEBHOOK} in the chart:\n{text}");
}

async fn create_bad_pod(client: &kube::Client, ns: &str, name: &str) -> Result<Pod, String> {
    // "drain" is not a fully qualified name: rule P2 denies it when the webhook sees it.
    let p = pod(name)
        .annotation("evictord.dev/eviction-interceptors", "drain")
        .build();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn excluded_namespaces_on_1_20_need_the_label_the_notes_print() {
    support::evictord::shared(ARGS).await;
    let c = support::cluster().await;
    let client = c.client().await;
    let ns = c.namespace("excluded").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let labels = namespaces
        .get(&ns)
        .await
        .expect("namespace")
        .metadata
        .labels;
    assert!(
        !labels.unwrap_or_default().contains_key(LABEL),
        "a 1.20 server does not set {LABEL}"
    );

    // The test evictord's pod webhook gets the chart's selector excluding `ns`.
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc = configs
        .get("evictord")
        .await
        .expect("webhook configuration");
    let i = vwc
        .webhooks
        .unwrap_or_default()
        .iter()
        .position(|w| w.name == POD_WEBHOOK)
        .expect("pod webhook");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": format!("/webhooks/{i}/namespaceSelector"), "value": chart_namespace_selector(&ns)}
    ]))
    .unwrap();
    configs
        .patch(
            "evictord",
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .expect("patch the namespaceSelector");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let denied = create_bad_pod(&client, &ns, "before").await;
    assert!(
        denied.as_ref().is_err_and(|e| e.contains("rule P2")),
        "without the label the excluded namespace is reviewed: {denied:?}"
    );

    // The install notes on this server print the commands; run them.
    let notes = run(
        "helm",
        &[
            "install",
            "notes",
            &chart(),
            "--namespace",
            &ns,
            "--dry-run=server",
            "--set",
            &format!("webhook.excludedNamespaces={{{ns}}}"),
        ],
        Some(&c.kubeconfig),
        None,
    );
    let notes_text = String::from_utf8_lossy(&notes.stdout).into_owned();
    assert!(
        notes.status.success(),
        "helm install --dry-run=server: {}",
        String::from_utf8_lossy(&notes.stderr)
    );
    let command = format!("kubectl label namespace {ns} {LABEL}={ns} --overwrite");
    assert!(notes_text.contains(&command), "{command} in:\n{notes_text}");
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let out = kubectl(c, &args, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let admitted = create_bad_pod(&client, &ns, "after").await;
    assert!(
        admitted.is_ok(),
        "a labelled excluded namespace is not reviewed: {admitted:?}"
    );
}
