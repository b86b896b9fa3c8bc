//! `evictord serve`: wiring of the webhook server (HTTPS, rustls), the probe/metrics server
//! (plain HTTP), the shared caches, the certificates and the controllers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admission::http::AdmissionState;
use crate::cli::{KubeApiArgs, ServeArgs};
use crate::cluster::{Authorizer, Caches, LiveContext};
use crate::kube_client::{Component, KubeClients, replica_identity};
use crate::metrics::metrics;

/// Connects to the cluster, with clients whose user agents name `identity` (see
/// [`crate::kube_client`]) and whose requests `api` limits; `probe_as` is the component that
/// asks for kube-apiserver's version first. An explicit `--kubeconfig` must work; otherwise the inferred configuration is tried
/// and, when it fails, `None` means offline mode.
///
/// # Errors
/// When an explicitly given kubeconfig cannot be loaded or its server cannot be reached.
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
    identity: Option<String>,
    api: &KubeApiArgs,
    probe_as: Component,
) -> anyhow::Result<Option<KubeClients>> {
    let explicit = kubeconfig.is_some();
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .context("loading kubeconfig")?
        }
        None => match kube::Config::infer().await {
            Ok(c) => c,
            Err(e) => {
                info!(reason = %e, "no cluster configuration found");
                return Ok(None);
            }
        },
    };
    // kube-rs retries 429/503/504 inside the client by default (up to 15 times, minutes apart).
    // An Eviction API 429 is a PodDisruptionBudget verdict that the controller must see at once
    // (it counts failures and backs off on its own schedule, which survives restarts), and every
    // other caller here has its own retry: requeue with backoff, watcher backoff, or the
    // webhook's failurePolicy.
    let mut config = config;
    config.default_retry = false;
    let clients = KubeClients::new(config, identity, api.rate_limit())
        .context("building the Kubernetes client")?;
    let client = clients.client(probe_as);
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(v)) => {
            info!(version = %v.git_version, "connected to kube-apiserver");
            crate::recorder::learn_server_version(&v);
            Ok(Some(clients))
        }
        Ok(Err(e)) if explicit => {
            Err(e).context("kube-apiserver from --kubeconfig is not reachable")
        }
        Err(_) if explicit => {
            anyhow::bail!("kube-apiserver from --kubeconfig did not answer within 10s")
        }
        Ok(Err(e)) => {
            info!(reason = %e, "the inferred cluster is not reachable");
            Ok(None)
        }
        Err(_) => {
            info!("the inferred cluster did not answer within 10s");
            Ok(None)
        }
    }
}

struct ProbeState {
    caches: Option<Arc<Caches>>,
    /// Set on SIGTERM: `/readyz` answers 503 and the webhook's HTTP/1 answers close their
    /// connections ([`crate::webhook_server::close_when_stopping`]).
    shutting_down: Arc<AtomicBool>,
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<Arc<ProbeState>>) -> impl IntoResponse {
    if s.shutting_down.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    match &s.caches {
        Some(c) if !c.synced() => (StatusCode::SERVICE_UNAVAILABLE, "watch caches not synced\n"),
        _ => (StatusCode::OK, "ok\n"),
    }
}

/// `/metrics`: every metric of the process in the OpenMetrics text format.
pub async fn metrics_text() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics().encode(),
    )
}

/// Runs `evictord serve` until SIGTERM/SIGINT.
///
/// # Errors
/// When the cluster from `--kubeconfig` is unreachable, the certificates cannot be obtained, or
/// an address cannot be bound.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let clients = connect(
        args.kubeconfig.as_deref(),
        Some(replica_identity()),
        &args.kube_api,
        Component::Webhook,
    )
    .await?;
    // One client per component, on one connection pool.
    let client = clients.as_ref().map(|c| c.client(Component::Webhook));
    let controller_client = clients.as_ref().map(|c| c.client(Component::Controller));
    if client.is_none() {
        warn!(
            "OFFLINE MODE: no cluster configuration works; serving only the admission rules that need no cluster \
             (lookups answer \"unknown\" and never deny on their own); controllers are not running"
        );
    }
    let shutdown = CancellationToken::new();

    let tls = crate::certs::obtain(&args, client.as_ref()).await?;
    let rustls = RustlsConfig::from_config(tls.server_config()?);

    let registration = args.rules.interceptor_registration;
    // The watch caches are the controllers' (CONVENTIONS 4); the webhook reads them.
    let caches = controller_client
        .as_ref()
        .map(|c| Caches::start_with(c, registration.reports()));
    let mut settings = args.rules.settings();
    // Offline, nothing would set a gate's condition: pods would never become Ready.
    settings.serving_gate = args.endpoints_interceptor && client.is_some();
    if settings.own_user.is_none() && client.is_some() {
        settings.own_user = crate::cluster::identity::own_user(args.kubeconfig.as_deref()).await;
    }
    if registration.enforces() && client.is_some() && settings.own_user.is_none() {
        anyhow::bail!(
            "--interceptor-registration=enforce needs evictord's own user name (rule S7 admits its \
             writes) and it cannot be read from the credentials: set --own-user"
        );
    }
    info!(mode = %registration, own_user = settings.own_user.as_deref().unwrap_or("-"), "interceptor registration");
    let live = match (&client, &caches) {
        (Some(c), Some(caches)) => Some(Arc::new(LiveContext {
            client: c.clone(),
            caches: caches.clone(),
            authorizer: Authorizer::new(c.clone()),
        })),
        _ => None,
    };
    let state = Arc::new(AdmissionState { settings, live });
    let stopping = Arc::new(AtomicBool::new(false));
    let app =
        crate::admission::webhooks::router(state).layer(axum::middleware::from_fn_with_state(
            stopping.clone(),
            crate::webhook_server::close_when_stopping,
        ));

    let probe_state = Arc::new(ProbeState {
        caches: caches.clone(),
        shutting_down: stopping,
    });
    let probes = Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(probe_state.clone());
    let probe_listener = tokio::net::TcpListener::bind(args.probe_addr)
        .await
        .with_context(|| format!("binding {}", args.probe_addr))?;
    info!(addr = %args.probe_addr, "serving /livez, /readyz and /metrics over HTTP");
    // The probes answer until the webhook has closed its connections: `/readyz` says 503
    // "shutting down" meanwhile.
    let probes_done = CancellationToken::new();
    let probe_shutdown = probes_done.clone();
    let probe_task = tokio::spawn(async move {
        axum::serve(probe_listener, probes)
            .with_graceful_shutdown(async move { probe_shutdown.cancelled().await })
            .await
    });

    let handle = Handle::new();
    let webhook_listener = std::net::TcpListener::bind(args.webhook_addr)
        .with_context(|| format!("binding {}", args.webhook_addr))?;
    webhook_listener.set_nonblocking(true)?;
    info!(addr = %args.webhook_addr, "serving the admission webhook over HTTPS");
    let server = crate::webhook_server::webhook_server(webhook_listener, rustls.clone())?
        .handle(handle.clone())
        .serve(app.into_make_service());
    let server_task = tokio::spawn(server);

    let cert_task = tokio::spawn(crate::certs::keep_fresh(tls, rustls, shutdown.clone()));

    // On every replica: a gated pod must never wait for a leader to become Ready (SPEC 6.4).
    let keeper = match (&controller_client, &caches) {
        (Some(c), Some(caches)) => Some(tokio::spawn(crate::controller::serving_keeper::run(
            Arc::new(crate::controller::serving_keeper::Context {
                client: c.clone(),
                caches: caches.clone(),
                recorder: crate::recorder::Recorder::new(
                    c.clone(),
                    crate::recorder::reporter("evictord"),
                ),
                restore_after: args.serving_restore_after,
            }),
            shutdown.clone(),
        ))),
        _ => None,
    };
    let controllers = match (&clients, &caches) {
        (Some(c), Some(caches)) => Some(tokio::spawn(crate::controller::run(
            c.clone(),
            caches.clone(),
            args.clone(),
            shutdown.clone(),
        ))),
        _ => None,
    };

    wait_for_signal().await;
    probe_state.shutting_down.store(true, Ordering::Release);
    shutdown.cancel();
    info!(
        delay = ?args.shutdown_delay,
        "shutting down: not ready, controllers stopping; the webhook serves on for the delay"
    );
    tokio::select! {
        () = tokio::time::sleep(args.shutdown_delay) => {}
        () = wait_for_signal() => info!("second signal: closing the webhook's connections now"),
    }
    info!("closing the webhook's connections: refusing new ones, finishing in-flight requests");
    handle.graceful_shutdown(Some(Duration::from_secs(20)));
    if let Some(c) = controllers {
        let _ = tokio::time::timeout(Duration::from_secs(10), c).await;
    }
    if let Some(k) = keeper {
        let _ = tokio::time::timeout(Duration::from_secs(5), k).await;
    }
    let _ = server_task.await;
    cert_task.abort();
    probes_done.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), probe_task).await;
    info!("stopped");
    Ok(())
}

/// Waits for SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
