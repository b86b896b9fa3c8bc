//! `evictord node-agent`: wiring of the NodeMaintenance watch, the probe/metrics server, the
//! `kubelet.k8s.io` runner and the keeper.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::NodeMaintenance;
use crate::cli::NodeAgentArgs;
use crate::interceptor::kubelet::interceptor::KubeletInterceptor;
use crate::interceptor::kubelet::report::Context;
use crate::interceptor::kubelet::store::Store;
use crate::interceptor::kubelet::{POLL, keeper};
use crate::interceptor::{Runner, Settings};
use crate::kube_client::Component;
use crate::serve::{connect, metrics_text, wait_for_signal};

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(ready): State<Arc<AtomicBool>>) -> (StatusCode, &'static str) {
    if ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "NodeMaintenances not synced or node not announced yet\n",
        )
    }
}

/// Runs the node agent until SIGTERM/SIGINT.
///
/// # Errors
/// When no cluster is reachable, the static pod directory cannot be used or the probe address
/// cannot be bound.
pub async fn run(args: NodeAgentArgs) -> anyhow::Result<()> {
    // The user agent names the node: the agents share a ServiceAccount.
    let client = connect(
        args.kubeconfig.as_deref(),
        Some(args.node_name.clone()),
        &args.kube_api,
        Component::NodeAgent,
    )
    .await?
    .context("the node agent needs a cluster: no kubeconfig or in-cluster configuration works")?
    .client(Component::NodeAgent);
    let store = Store::new(&args.static_pod_path);
    // Fail early on a directory the agent cannot write (creates the held directory).
    let dir = store.clone();
    tokio::task::spawn_blocking(move || dir.lock().map(drop))
        .await?
        .with_context(|| format!("using {}", args.static_pod_path.display()))?;
    let shutdown = CancellationToken::new();
    let ready = Arc::new(AtomicBool::new(false));

    let probes = Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(ready.clone());
    let listener = tokio::net::TcpListener::bind(args.probe_addr)
        .await
        .with_context(|| format!("binding {}", args.probe_addr))?;
    info!(addr = %args.probe_addr, "serving /livez, /readyz and /metrics over HTTP");
    let probe_shutdown = shutdown.clone();
    let probe_task = tokio::spawn(async move {
        axum::serve(listener, probes)
            .with_graceful_shutdown(async move { probe_shutdown.cancelled().await })
            .await
    });

    let (reader, writer) = reflector::store::<NodeMaintenance>();
    let ctx = Arc::new(Context::new(
        client.clone(),
        args.node_name.clone(),
        args.agent_name.clone(),
        store,
        reader.clone(),
    ));
    let wake = ctx.wake.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(
            Api::<NodeMaintenance>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer);
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => wake.notify_one(),
                Err(e) => warn!(error = %e, "NodeMaintenance watch error; retrying with backoff"),
            }
        }
    });

    // Nothing is decided before every maintenance is known: an empty store would read as "no
    // maintenance holds the node" and put every held manifest back.
    info!(node = %args.node_name, dir = %args.static_pod_path.display(), "waiting for the NodeMaintenances");
    tokio::select! {
        r = reader.wait_until_ready() => r.context("the NodeMaintenance watch ended")?,
        () = wait_for_signal() => {
            watch.abort();
            return Ok(());
        }
    }
    // Announced before serving: the controller gives the node's mirror pods kubelet.k8s.io from then on.
    let mut tries = 0u32;
    while let Err(e) = async {
        let node = keeper::read_node(&ctx).await?;
        keeper::announce(&ctx, &node).await
    }
    .await
    {
        tries += 1;
        warn!(error = %e, tries, "announcing the node agent on the node failed; retrying");
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            () = wait_for_signal() => {
                watch.abort();
                return Ok(());
            }
        }
    }
    ready.store(true, Ordering::Release);
    info!(node = %args.node_name, "node agent ready: serving kubelet.k8s.io");

    let settings = Settings {
        min_heartbeat_interval: args.min_heartbeat_interval,
        default_deadline: args.interceptor_deadline,
        poll_interval: POLL,
        ..Settings::default()
    };
    let token = shutdown.clone();
    let runner = tokio::spawn(
        Runner::new(ctx.client.clone(), settings)
            // Its ClusterRole grants `get` on pods only: no watch cache of pods.
            .pods(crate::interceptor::PodCache::live_only(ctx.client.clone()))
            .run(KubeletInterceptor::new(ctx.clone()), async move {
                token.cancelled().await
            }),
    );
    let keeper = tokio::spawn(keeper::run(ctx, args.check_interval, shutdown.clone()));

    wait_for_signal().await;
    info!("shutting down");
    ready.store(false, Ordering::Release);
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), runner).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), keeper).await;
    watch.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), probe_task).await;
    info!("stopped");
    Ok(())
}
