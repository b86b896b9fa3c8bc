//! kube-apiserver's own counters (its `/metrics`): requests by verb, resource and status code,
//! and admission webhook calls, so tests and benchmarks can say what a workload cost it.

use std::collections::BTreeMap;

use kube::Client;

/// Requests served, by verb, resource, subresource and code.
pub const REQUESTS: &str = "apiserver_request_total";
/// Admission webhook calls, by webhook and operation.
pub const WEBHOOK_CALLS: &str = "apiserver_admission_webhook_admission_duration_seconds_count";

/// kube-apiserver's request and webhook-call counters, keyed `metric|VERB resource[/sub] code` and
/// `metric|webhook name`.
pub async fn counters(client: &Client) -> anyhow::Result<BTreeMap<String, f64>> {
    let text = client
        .request_text(http::Request::get("/metrics").body(vec![])?)
        .await?;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
        let label = |k: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.trim_start_matches(',').strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches(['"', '}']).to_string())
                .unwrap_or_default()
        };
        let key = match metric {
            REQUESTS => {
                let sub = label("subresource");
                let resource = if sub.is_empty() {
                    label("resource")
                } else {
                    format!("{}/{sub}", label("resource"))
                };
                format!("{metric}|{} {resource} {}", label("verb"), label("code"))
            }
            WEBHOOK_CALLS => format!("{metric}|{} ({})", label("name"), label("operation")),
            _ => continue,
        };
        *out.entry(key).or_insert(0.0) += value;
    }
    Ok(out)
}
