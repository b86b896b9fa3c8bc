//! A recorded pod list/watch, replayed to `evictord serve` at sizes the control plane cannot
//! hold (the memory part's 150 000 pods).
//!
//! Recording: one real `GET /api/v1/namespaces/{ns}/pods?limit=N` answered by kube-apiserver,
//! kept byte for byte (`pods-recording.json` next to the report). Replay: a plain-HTTP proxy on
//! loopback in front of the same kube-apiserver. Every request is forwarded unchanged (through
//! the admin client: discovery, leases, nodes, custom resources, events) except the cluster-wide
//! pod list and watch (`GET /api/v1/pods`), which it answers itself:
//!
//! - the list holds `pods` items, the recorded ones cycled, each copy renamed (`…-r000042`) with
//!   its own uid and resourceVersion, everything else as recorded (labels, owner, node, managed
//!   fields, status); like kube-apiserver v1.20's watch cache, `resourceVersion=0` is answered
//!   whole (`limit` ignored), otherwise `limit`/`continue` paginate;
//! - the watch stays open without events until its `timeoutSeconds`.
//!
//! evictord gets a kubeconfig that points at the proxy, so it runs exactly as against the real
//! server; the memory part also replays the largest real level, to compare the two feeds.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::Client;
use serde_json::Value;

/// The recorded pods.
pub struct Recording {
    /// The list's `metadata.resourceVersion`.
    pub resource_version: String,
    pub items: Vec<Value>,
    /// Where the raw response was saved.
    pub path: PathBuf,
    /// Size of the raw response.
    pub bytes: usize,
}

/// Records up to `n` pods of namespace `ns` as kube-apiserver lists them, saving the raw
/// response to `dir/pods-recording.json`.
pub async fn record(client: &Client, ns: &str, n: usize, dir: &Path) -> anyhow::Result<Recording> {
    let raw = client
        .request_text(
            http::Request::get(format!("/api/v1/namespaces/{ns}/pods?limit={n}")).body(vec![])?,
        )
        .await?;
    let path = dir.join("pods-recording.json");
    std::fs::write(&path, &raw)?;
    let list: Value = serde_json::from_str(&raw)?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    anyhow::ensure!(!items.is_empty(), "namespace {ns} has no pods to record");
    Ok(Recording {
        resource_version: list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        items,
        path,
        bytes: raw.len(),
    })
}

struct Shared {
    upstream: Client,
    recording: Arc<Recording>,
    pods: usize,
}

/// A running replay proxy; stops when dropped.
pub struct Replay {
    pub kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a proxy that serves `pods` replayed pods and forwards everything else to `upstream`;
/// writes its kubeconfig into `dir`.
pub async fn start(
    upstream: Client,
    recording: Arc<Recording>,
    pods: usize,
    dir: &Path,
) -> anyhow::Result<Replay> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(Arc::new(Shared {
            upstream,
            recording,
            pods,
        }));
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("[replay] proxy stopped: {e}");
        }
    });
    let kubeconfig = dir.join(format!("kubeconfig-replay-{}", addr.port()));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: http://{addr}\nusers:\n- name: replay\n  user: {{}}\ncontexts:\n- name: replay\n  context:\n    cluster: replay\n    user: replay\ncurrent-context: replay\n"
        ),
    )?;
    Ok(Replay { kubeconfig, task })
}

async fn handle(State(s): State<Arc<Shared>>, req: Request) -> Response {
    if req.method() == Method::GET && req.uri().path() == "/api/v1/pods" {
        let query = parse_query(req.uri().query().unwrap_or(""));
        return if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
            watch(&query)
        } else {
            list(&s, &query)
        };
    }
    match forward(&s.upstream, req).await {
        Ok(r) => r,
        Err(e) => (StatusCode::BAD_GATEWAY, format!("replay proxy: {e:#}")).into_response(),
    }
}

/// Query parameters (the ones used here carry no escaped characters).
fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The range of items a list request gets, and the continue token of the rest.
fn page(query: &HashMap<String, String>, total: usize) -> (std::ops::Range<usize>, Option<usize>) {
    let limit = query.get("limit").and_then(|l| l.parse::<usize>().ok());
    let whole = query.get("resourceVersion").is_some_and(|rv| rv == "0");
    let start = query
        .get("continue")
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or(0)
        .min(total);
    match limit.filter(|l| *l > 0 && !whole) {
        Some(l) if start + l < total => (start..start + l, Some(start + l)),
        _ => (start..total, None),
    }
}

/// Replayed pod `i`: recorded item `i mod len`, renamed, with its own uid and resourceVersion.
fn replayed(rec: &Recording, i: usize) -> Value {
    let mut pod = rec.items[i % rec.items.len()].clone();
    let meta = &mut pod["metadata"];
    let name = meta["name"].as_str().unwrap_or("pod");
    let stem = name.rsplit_once('-').map_or(name, |(s, _)| s);
    meta["name"] = Value::String(format!("{stem}-r{i:06}"));
    meta["uid"] = Value::String(format!("00000000-0000-4000-8000-{i:012}"));
    meta["resourceVersion"] = Value::String((1_000_000 + i).to_string());
    pod
}

fn list(s: &Shared, query: &HashMap<String, String>) -> Response {
    let (range, next) = page(query, s.pods);
    let mut metadata = serde_json::json!({ "resourceVersion": s.recording.resource_version });
    if let Some(n) = next {
        metadata["continue"] = Value::String(n.to_string());
        metadata["remainingItemCount"] = Value::from(s.pods - n);
    }
    let head =
        format!("{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{metadata},\"items\":[");
    let rec = s.recording.clone();
    let (first, end) = (range.start, range.end);
    // Items are serialized in chunks as the body is read, never the whole list at once.
    let chunks = range.step_by(CHUNK).map(move |from| {
        let mut buf = Vec::with_capacity(CHUNK * 4096);
        for i in from..(from + CHUNK).min(end) {
            if i > first {
                buf.push(b',');
            }
            serde_json::to_writer(&mut buf, &replayed(&rec, i)).expect("serializing a pod");
        }
        Ok::<_, Infallible>(Bytes::from(buf))
    });
    let body = futures::stream::iter(
        std::iter::once(Ok(Bytes::from(head)))
            .chain(chunks)
            .chain(std::iter::once(Ok(Bytes::from_static(b"]}")))),
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(body))
        .expect("response")
}

/// Items per body chunk.
const CHUNK: usize = 256;

/// An open watch without events, closed at `timeoutSeconds` (the client then watches again).
fn watch(query: &HashMap<String, String>) -> Response {
    let secs = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(300)
        .min(600);
    let body = futures::stream::once(async move {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Ok::<_, Infallible>(Bytes::new())
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(body))
        .expect("response")
}

async fn forward(upstream: &Client, req: Request) -> anyhow::Result<Response> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20).await?;
    let mut out = http::Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string(),
    );
    for (k, v) in &parts.headers {
        if k != header::HOST && k != header::CONNECTION && k != header::TRANSFER_ENCODING {
            out = out.header(k, v);
        }
    }
    let res = upstream
        .send(out.body(kube::client::Body::from(body.to_vec()))?)
        .await?;
    let (mut parts, body) = res.into_parts();
    // The server side frames the body itself.
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.remove(header::CONNECTION);
    Ok(Response::from_parts(parts, Body::new(body)))
}
