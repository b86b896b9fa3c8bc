//! The command line: kubectl's connection flags, the output format and the commands.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use evictord::plugin::PLUGIN_REQUESTER;

/// Declarative node drains with live progress, drain previews and eviction requests (evictord).
#[derive(Parser, Debug)]
#[command(name = "kubectl evictord", bin_name = "kubectl evictord", version)]
pub struct Cli {
    #[command(flatten)]
    pub conn: Connection,
    /// Print objects as json or yaml instead of tables and progress.
    #[arg(short = 'o', long, global = true, value_enum)]
    pub output: Option<Output>,
    #[command(subcommand)]
    pub command: Command,
}

/// kubectl's usual connection flags.
#[derive(Args, Debug, Clone, Default)]
pub struct Connection {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true)]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Namespace of the pod (evict, cancel); default: the context's namespace.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// User to impersonate.
    #[arg(long = "as", global = true)]
    pub as_user: Option<String>,
    /// Group to impersonate (repeatable).
    #[arg(long = "as-group", global = true)]
    pub as_group: Vec<String>,
}

/// Machine-readable output.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// The nodes of a drain or a preview.
#[derive(Args, Debug, Clone)]
pub struct Nodes {
    /// Node names.
    pub nodes: Vec<String>,
    /// Label selector of the nodes (instead of names), e.g. `pool=blue`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Priorities at which the drain pauses until the pods up to them are gone (Default pods),
    /// ahead of the default plan, e.g. `--priority-steps 100,1000`.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub priority_steps: Vec<i32>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a NodeMaintenance for the nodes, move it to Cordon and Drain, and show its
    /// progress until Drained.
    Drain {
        #[command(flatten)]
        nodes: Nodes,
        /// Why (recorded in spec.reason).
        #[arg(long)]
        reason: Option<String>,
        /// Stop watching after this long (e.g. 10m), exit 3 with a summary.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
        /// Validate with the server and print the maintenance and the preview; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Name of the maintenance (default: drain-<node>-<time>).
        #[arg(long)]
        name: Option<String>,
    },
    /// Preview a drain of the nodes: pods in the order they would leave, blocking
    /// PodDisruptionBudgets, maintenances already there. Writes nothing.
    Plan {
        #[command(flatten)]
        nodes: Nodes,
    },
    /// Show the progress of a maintenance until Drained.
    Watch {
        /// The NodeMaintenance.
        name: String,
        /// Stop watching after this long, exit 3 with a summary.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Move a maintenance to Complete: evictord uncordons its nodes and withdraws its requests.
    Complete {
        /// The NodeMaintenance.
        name: String,
    },
    /// Ask for a pod's eviction: create its EvictionRequest or join it as a requester.
    Evict {
        /// The pod (in -n NAMESPACE).
        pod: String,
        /// Requester name (a fully qualified name).
        #[arg(long, default_value = PLUGIN_REQUESTER)]
        requester: String,
        /// Follow the request until the pod is gone or the request canceled.
        #[arg(long)]
        wait: bool,
        /// With --wait: stop following after this long, exit 3.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Withdraw a requester from a pod's EvictionRequest (the last one cancels it).
    Cancel {
        /// The pod (in -n NAMESPACE).
        pod: String,
        /// Requester name.
        #[arg(long, default_value = PLUGIN_REQUESTER)]
        requester: String,
    },
    /// Maintenances and open EvictionRequests.
    Status,
    /// Print the book's generated page of these flags (`make reference` writes it).
    #[command(hide = true)]
    Docs,
}

impl Command {
    /// Whether `-o json|yaml` means something for the command: it prints objects.
    pub fn prints_objects(&self) -> bool {
        match self {
            Command::Plan { .. } | Command::Status => true,
            Command::Drain { dry_run, .. } => *dry_run,
            Command::Evict { wait, .. } => !*wait,
            Command::Watch { .. }
            | Command::Complete { .. }
            | Command::Cancel { .. }
            | Command::Docs => false,
        }
    }
}
