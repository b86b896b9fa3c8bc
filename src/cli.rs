//! The command line (clap): `serve`, `crds`, `webhook-config`, `review`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

/// evictord: cooperative, observable and safe pod eviction and node maintenance.
#[derive(Debug, Parser)]
#[command(name = "evictord", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook and run the controllers.
    Serve(Box<ServeArgs>),
    /// Print the CustomResourceDefinitions (apiextensions.k8s.io/v1) as YAML.
    Crds,
    /// Print webhook configurations that register a locally running server by URL.
    WebhookConfig(WebhookConfigArgs),
    /// Review one AdmissionReview offline, exactly as the server would, and print the response.
    Review(ReviewArgs),
}

/// Parses `90s`, `20m`, `1h`, `1h30m`.
///
/// # Errors
/// When the text is not a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 90s, 20m or 1h: {e}"))
}

/// Rule settings shared by `serve` and `review`.
#[derive(Debug, Clone, Args)]
pub struct RuleArgs {
    /// Heartbeat deadline of an interceptor when `spec.heartbeatDeadlineSeconds` is unset.
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    pub interceptor_deadline: Duration,
    /// Minimum step between two heartbeats of an interceptor.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub min_heartbeat_interval: Duration,
    /// `*.k8s.io` interceptor names accepted besides the built-in allowlist (comma-separated).
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub extra_k8s_io_interceptors: Vec<String>,
    /// How long the Eviction API bridge keeps its requester (`eviction-api.evictord.dev`) on a
    /// request after the last intercepted call; then the requester is removed, and the request
    /// canceled if it was the only one.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub eviction_api_requester_ttl: Duration,
}

impl RuleArgs {
    /// The admission settings these flags describe.
    pub fn settings(&self) -> crate::admission::Settings {
        crate::admission::Settings {
            extra_k8s_io_interceptors: self
                .extra_k8s_io_interceptors
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
            min_heartbeat_interval: self.min_heartbeat_interval,
            interceptor_deadline: self.interceptor_deadline,
            eviction_api_requester_ttl: self.eviction_api_requester_ttl,
            ..Default::default()
        }
    }
}

/// `evictord serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Kubeconfig file. Default: in-cluster configuration or `$KUBECONFIG`/`~/.kube/config`;
    /// when none works, offline mode (only the rules that need no cluster are served).
    #[arg(long, env = "EVICTORD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the HTTPS admission webhook server.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,
    /// Address of the plain-HTTP server for `/livez`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub probe_addr: SocketAddr,
    /// Directory with `tls.crt`, `tls.key`, `ca.crt`; generated with rcgen when missing.
    #[arg(long, default_value = "certs")]
    pub cert_dir: PathBuf,
    /// Secret (in `--service-namespace`) holding the certificates; takes precedence over
    /// `--cert-dir` when connected to a cluster. Created when missing.
    #[arg(long)]
    pub tls_secret: Option<String>,
    /// Service name of the webhook (for the certificate's DNS names).
    #[arg(long)]
    pub service_name: Option<String>,
    /// Namespace of the Service, the Secret and the lease.
    #[arg(long, env = "POD_NAMESPACE")]
    pub service_namespace: Option<String>,
    /// Name of evictord's Validating/MutatingWebhookConfiguration whose `caBundle` to patch.
    #[arg(long)]
    pub webhook_config_name: Option<String>,
    /// Patch the generated CA into the webhook configurations' `caBundle`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub patch_ca_bundle: bool,
    /// Validity of generated serving certificates (renewed at two thirds).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// How often certificates are checked for rotation (files or Secret changed, renewal due).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,
    /// Controllers to run: `all`, `none`, or a comma list of `evictionrequest`, `nodemaintenance`.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub controllers: Vec<String>,
    /// First retry delay after a failed Eviction API call (doubles up to the cap).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub eviction_backoff_base: Duration,
    /// Largest retry delay after failed Eviction API calls.
    #[arg(long, default_value = "1000s", value_parser = parse_duration)]
    pub eviction_backoff_cap: Duration,
    /// How long an EvictionRequest is kept after it ended (`Evicted` or `Canceled`) before the
    /// controller deletes it, like a Job's `ttlSecondsAfterFinished` (`0s`: at once).
    #[arg(long, default_value = "4h", value_parser = parse_duration)]
    pub ended_request_retention: Duration,
    /// Run the controllers only on the replica holding the coordination.k8s.io Lease.
    #[arg(long, default_value_t = false)]
    pub leader_election: bool,
    /// Namespace of the leader election Lease (default: `--service-namespace`, else `default`).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "evictord-controllers")]
    pub leader_election_id: String,
    /// Lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Run the `deployment.apps.k8s.io` interceptor (surge Deployments before their pods are
    /// evicted) with the controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub deployment_interceptor: bool,
    /// Run the `daemonset.apps.k8s.io` interceptor with the controllers: a node maintenance in
    /// Drain removes DaemonSet pods in plan order and keeps them off the node (the
    /// `evictord.dev/maintenance` taint) until it completes. `=false`: DaemonSet pods stay, as
    /// with `kubectl drain --ignore-daemonsets`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub daemonset_interceptor: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Rule settings.
    #[command(flatten)]
    pub rules: RuleArgs,
}

impl ServeArgs {
    /// True when the named controller is enabled.
    pub fn controller_enabled(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c == "all" || c == name)
    }
}

/// `evictord webhook-config`.
#[derive(Debug, Clone, Args)]
pub struct WebhookConfigArgs {
    /// Base URL of the running server, e.g. `https://127.0.0.1:8443`.
    #[arg(long)]
    pub url_base: String,
    /// PEM file of the CA that signed the server's certificate.
    #[arg(long)]
    pub ca_file: PathBuf,
    /// Name of both configurations.
    #[arg(long, default_value = "evictord")]
    pub name: String,
    /// Emit the Pod webhook's `matchConditions` (needs Kubernetes ≥ 1.28; older servers
    /// reject or drop the field).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub match_conditions: bool,
}

/// `evictord review`.
#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    /// AdmissionReview file (JSON or YAML); standard input when absent.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Multi-document YAML/JSON of Pods, Nodes, EvictionRequests and NodeMaintenances that
    /// forms the cluster view; without it, lookups are unknown.
    #[arg(long)]
    pub objects: Option<PathBuf>,
    /// The time of the review (RFC 3339); default now.
    #[arg(long)]
    pub now: Option<jiff::Timestamp>,
    /// Rule settings.
    #[command(flatten)]
    pub rules: RuleArgs,
}
