//! Histograms from a Prometheus text exposition (evictord's or kube-apiserver's `/metrics`), and
//! what they gained between two scrapes: count, mean, and p50/p99 read from the buckets (the
//! upper bound of the bucket the quantile falls in, so "at most"); the kube-apiserver series
//! that say where an EvictionRequest write's time goes; and what kube-apiserver's request
//! counters ([`crate::support::apiserver::counters`]) gained over a run: every request and the
//! writes among them ([`request_totals`]), each series per evicted pod ([`per_pod`]).

use std::collections::BTreeMap;

use kube::Client;
use serde::Serialize;

use crate::support;

/// One histogram series: cumulative buckets (upper bound, count), sum and count.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

/// Every histogram series of a scrape, keyed `name{labels without le}`.
pub fn histograms(text: &str) -> BTreeMap<String, Series> {
    let mut out: BTreeMap<String, Series> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (metric, labels) = match series.split_once('{') {
            Some((m, l)) => (m, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut le = None;
        let rest: Vec<&str> = split_labels(labels)
            .into_iter()
            .filter(|kv| match kv.strip_prefix("le=") {
                Some(v) => {
                    le = Some(v.trim_matches('"').to_string());
                    false
                }
                None => true,
            })
            .collect();
        let key = |name: &str| {
            if rest.is_empty() {
                name.to_string()
            } else {
                format!("{name}{{{}}}", rest.join(","))
            }
        };
        if let Some(name) = metric.strip_suffix("_bucket") {
            let bound = match le.as_deref() {
                Some("+Inf") => f64::INFINITY,
                Some(v) => match v.parse() {
                    Ok(b) => b,
                    Err(_) => continue,
                },
                None => continue,
            };
            out.entry(key(name))
                .or_default()
                .buckets
                .push((bound, value));
        } else if let Some(name) = metric.strip_suffix("_sum") {
            out.entry(key(name)).or_default().sum = value;
        } else if let Some(name) = metric.strip_suffix("_count") {
            out.entry(key(name)).or_default().count = value;
        }
    }
    // Only histograms (a `_count` or `_sum` alone belongs to a summary or a counter).
    out.retain(|_, s| !s.buckets.is_empty());
    for s in out.values_mut() {
        s.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(labels: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&labels[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < labels.len() {
        out.push(&labels[start..]);
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// What one histogram series gained between two scrapes.
#[derive(Clone, Debug, Serialize)]
pub struct Delta {
    pub series: String,
    pub count: f64,
    pub mean_ms: f64,
    /// Upper bound of the bucket holding the median, in milliseconds.
    pub p50_le_ms: f64,
    /// Upper bound of the bucket holding the 99th percentile, in milliseconds.
    pub p99_le_ms: f64,
}

/// The series of `after` whose count grew since `before` and whose name passes `keep`.
/// Values are taken as seconds (the Prometheus convention for durations).
pub fn deltas(
    before: &BTreeMap<String, Series>,
    after: &BTreeMap<String, Series>,
    keep: impl Fn(&str) -> bool,
) -> Vec<Delta> {
    let mut out = Vec::new();
    for (key, a) in after {
        if !keep(key) {
            continue;
        }
        let b = before.get(key).cloned().unwrap_or_default();
        let count = a.count - b.count;
        if count <= 0.0 {
            continue;
        }
        let buckets: Vec<(f64, f64)> = a
            .buckets
            .iter()
            .map(|(le, n)| {
                let was = b
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |(_, n)| *n);
                (*le, n - was)
            })
            .collect();
        let quantile = |q: f64| {
            buckets
                .iter()
                .find(|(_, n)| *n >= q * count)
                .map_or(f64::INFINITY, |(le, _)| le * 1000.0)
        };
        out.push(Delta {
            series: key.clone(),
            count,
            mean_ms: (a.sum - b.sum) / count * 1000.0,
            p50_le_ms: quantile(0.5),
            p99_le_ms: quantile(0.99),
        });
    }
    out
}

/// kube-apiserver's histograms (its own `/metrics`); empty when it cannot be read.
pub async fn scrape_apiserver(client: &Client) -> BTreeMap<String, Series> {
    let request = match http::Request::get("/metrics").body(vec![]) {
        Ok(r) => r,
        Err(_) => return BTreeMap::new(),
    };
    match client.request_text(request).await {
        Ok(text) => histograms(&text),
        Err(e) => {
            eprintln!("[bench] kube-apiserver /metrics: {e}");
            BTreeMap::new()
        }
    }
}

/// The value of label `name` in a series key `metric{a="x",b="y"}`.
fn label<'a>(series: &'a str, name: &str) -> &'a str {
    let needle = format!("{name}=\"");
    series
        .split_once('{')
        .map_or("", |(_, labels)| labels)
        .split(['{', ','])
        .find_map(|kv| kv.strip_prefix(needle.as_str()))
        .map_or("", |v| v.trim_end_matches('}').trim_end_matches('"'))
}

/// The kube-apiserver series that say where an EvictionRequest write's time goes, under a short
/// name: its request duration by verb (`PATCH evictionrequests/status`: from the request's
/// arrival to its answer, admission and etcd included), its calls of evictord's EvictionRequest
/// webhook (`webhook evictionrequests.validate.evictord.dev UPDATE`), and etcd's part for custom
/// objects (`etcd update`). `None` for every other series.
pub fn apiserver_series(series: &str) -> Option<String> {
    let metric = series.split_once('{').map_or(series, |(m, _)| m);
    match metric {
        "apiserver_request_duration_seconds"
            if label(series, "resource") == "evictionrequests"
                && ["POST", "PUT", "PATCH", "DELETE"].contains(&label(series, "verb")) =>
        {
            let sub = label(series, "subresource");
            Some(format!(
                "{} evictionrequests{}{sub}",
                label(series, "verb"),
                if sub.is_empty() { "" } else { "/" }
            ))
        }
        "apiserver_admission_webhook_admission_duration_seconds"
            if label(series, "name").starts_with("evictionrequests.") =>
        {
            Some(format!(
                "webhook {} {}",
                label(series, "name"),
                label(series, "operation")
            ))
        }
        "etcd_request_duration_seconds"
            if label(series, "type").contains("nstructured")
                && ["create", "update", "get"].contains(&label(series, "operation")) =>
        {
            Some(format!(
                "etcd {} (custom objects)",
                label(series, "operation")
            ))
        }
        _ => None,
    }
}

/// What kube-apiserver's [`apiserver_series`] gained between two scrapes, under their short
/// names (series with the same short name merged: counts and sums add up, the bucket bounds
/// are dropped as they would no longer be exact).
pub fn apiserver_deltas(
    before: &BTreeMap<String, Series>,
    after: &BTreeMap<String, Series>,
) -> Vec<Delta> {
    let mut merged: BTreeMap<String, Delta> = BTreeMap::new();
    for d in deltas(before, after, |k| apiserver_series(k).is_some()) {
        let Some(name) = apiserver_series(&d.series) else {
            continue;
        };
        match merged.get_mut(&name) {
            None => {
                merged.insert(name.clone(), Delta { series: name, ..d });
            }
            Some(m) => {
                let count = m.count + d.count;
                m.mean_ms = (m.mean_ms * m.count + d.mean_ms * d.count) / count;
                m.count = count;
                m.p50_le_ms = f64::NAN;
                m.p99_le_ms = f64::NAN;
            }
        }
    }
    merged.into_values().collect()
}

/// The increase of every request series, and of the writes among them.
pub fn request_totals(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> (f64, f64) {
    const WRITES: [&str; 6] = [
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "DELETECOLLECTION",
        "APPLY",
    ];
    let mut total = 0.0;
    let mut writes = 0.0;
    for (k, a) in after {
        let Some(series) = k
            .strip_prefix(support::apiserver::REQUESTS)
            .and_then(|s| s.strip_prefix('|'))
        else {
            continue;
        };
        let d = a - before.get(k).copied().unwrap_or(0.0);
        total += d;
        if series
            .split_whitespace()
            .next()
            .is_some_and(|verb| WRITES.contains(&verb))
        {
            writes += d;
        }
    }
    (total, writes)
}

/// The increase of each series of `metric` per evicted pod, largest first, above 0.01.
pub fn per_pod(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    metric: &str,
    evicted: usize,
) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = after
        .iter()
        .filter_map(|(k, a)| {
            let name = k.strip_prefix(metric)?.strip_prefix('|')?;
            let d = a - before.get(k).copied().unwrap_or(0.0);
            let per = d / evicted.max(1) as f64;
            (per >= 0.01).then(|| (name.to_string(), per))
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}
