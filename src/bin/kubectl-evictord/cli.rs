//! The command line: kubectl's connection flags, the output format and the commands.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use evictord::api::DeadlinePolicy;
use evictord::plugin::maintenance::DrainDeadline;
use evictord::plugin::safety::Overrides;
use evictord::plugin::{Error, PLUGIN_REQUESTER, Result};

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

/// The long help of `rollout`: how it works, resuming, stopping, exit codes, examples.
const ROLLOUT_HELP: &str = "\
How it works:
  1. A MaintenanceBudget named NAME over these nodes (maxUnavailable from --max-unavailable) and
     one NodeMaintenance per node (NAME-NODE, stage Drain), all labelled evictord.dev/rollout=NAME.
     evictord admits the maintenances as the budget allows, oldest first (the nodes in the order
     of their names); the others wait and touch nothing. Other budgets over these nodes count too.
     `kubectl evictord plan NODE... --max-unavailable N` shows the batches first.
     Before anything is created, nodes holding pods that no controller recreates, or pods with
     emptyDir volumes, are refused as kubectl drain refuses them, naming the pods, unless --force
     or --delete-emptydir-data is given (on a resume: the nodes whose maintenance is still to be
     created). --drain-deadline and --deadline-policy go into each maintenance.
  2. Once a node's maintenance is Drained its step runs: --exec CMD runs `sh -c CMD` on this
     machine with EVICTORD_NODE set to the node's name, its output shown prefixed with [node].
     Without --exec there is no step (a drain and uncordon, or with --reboot a reboot done by
     something else).
  3. The rollout waits until the node is Ready again (with --reboot: after its
     status.nodeInfo.bootID changed), then moves the maintenance to Complete: evictord uncordons
     the node, and the budget admits the next one.
  4. When every node is done, the budget and the maintenances are deleted: a budget left behind
     would keep limiting other maintenances of these nodes, and the name can be used again (a
     later run with the same name starts a new rollout).

Live view on a terminal (the rollout, each node: queued and which budget holds it, draining, step
running, waiting to be Ready, done); plain lines otherwise; -o json|yaml prints a summary at the
end (the lines go to standard error).

Resuming: the state is in the cluster. Run the same command again (after Ctrl-C, a failed step, a
lost connection) and it carries on where the cluster is:
  - a step that succeeded is never run again (its state is recorded on the maintenance, annotation
    evictord.dev/rollout-step);
  - a step that failed runs again;
  - a step that was interrupted (the plugin killed, or stopped by a second Ctrl-C) runs again from
    the start, so write steps that can run twice; unless its process still runs on this machine
    (the rollout waits for it), or with --reboot the node booted again since (it counts as done).
The same command means the same nodes (the same names, or the same -l selector: nodes it matches
now that were not part of the rollout are not added) and the same --exec, --reboot,
--cordon-first, --drain-deadline and --deadline-policy (recorded on the budget); anything else is
refused, naming the recorded values.
--max-unavailable may change: the budget is updated. One process drives a rollout at a time.

Stopping:
  Ctrl-C     no new step starts; running steps are waited for (Ctrl-C again stops them: SIGTERM to
             their process group). Nothing is undone: maintenances keep draining or waiting.
  --timeout  the same, after that long.
  a failing step (non-zero exit): no new step starts; the maintenances not admitted yet are
             deleted (with --cordon-first their nodes are uncordoned), so that no other node is
             drained; the failed node stays cordoned, its maintenance in Drain. Fix the cause and
             run the same command to retry the step and carry on, or give that node back without
             its step: kubectl evictord complete NAME-NODE.
  To abandon a rollout and give every node back:
    kubectl delete nodemaintenances,maintenancebudgets -l evictord.dev/rollout=NAME

--cordon-first cordons every node at the start as evictord cordons (recording that it was
schedulable, so that its maintenance's Complete uncordons it). The budget does not count these
nodes (they still run their pods). Pods evicted from a rolled node then land on nodes outside the
rollout and move once, as in a blue-green upgrade, instead of landing on the next node to roll.

Exit codes: 0 every node done; 1 a step failed (or the cluster refused a write); 2 usage, or a
resume with other nodes or options; 3 timed out; 130 Ctrl-C.

Examples:
  kubectl evictord plan -l pool=blue --max-unavailable 2
  kubectl evictord rollout os-upgrade -l pool=blue --max-unavailable 2 --reboot \\
      --exec 'ssh \"$EVICTORD_NODE\" sudo ./upgrade-and-reboot.sh'
  kubectl evictord rollout kernel-6 node-1 node-2 node-3 node-4 --max-unavailable 50% --cordon-first \\
      --exec './upgrade.sh \"$EVICTORD_NODE\"'
";

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

/// What a passed drain deadline does.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlinePolicyArg {
    /// Condition DeadlineExceeded, an event and a metric; nothing else changes.
    Report,
    /// Also delete the node's remaining Default pods (those waited for included), whatever their
    /// PodDisruptionBudgets say.
    Force,
}

/// The drain deadline of the maintenances the command creates (SPEC 6.2).
#[derive(Args, Debug, Clone, Default)]
pub struct Deadline {
    /// How long each node may take to drain (e.g. 30m; at least 1m), counted from the start of its
    /// drain (the later of its admission and the Drain stage); written as
    /// spec.drainDeadlineSeconds. None without it.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub drain_deadline: Option<Duration>,
    /// What a passed deadline does (spec.deadlinePolicy; default report). Needs --drain-deadline.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub deadline_policy: Option<DeadlinePolicyArg>,
}

impl Deadline {
    /// The deadline the flags ask for.
    ///
    /// # Errors
    /// A usage error: a policy without a deadline, a deadline under a minute.
    pub fn resolve(&self) -> Result<Option<DrainDeadline>> {
        let policy = self.deadline_policy.map(|p| match p {
            DeadlinePolicyArg::Report => DeadlinePolicy::Report,
            DeadlinePolicyArg::Force => DeadlinePolicy::Force,
        });
        DrainDeadline::from_flags(self.drain_deadline, policy).map_err(Error::Usage)
    }
}

/// The checks `kubectl drain` makes before it evicts anything, and their overrides.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct Safety {
    /// Go on although pods that no controller recreates (no controller owner, not mirror pods)
    /// are on the nodes: they are evicted and gone for good. As kubectl drain --force.
    #[arg(long)]
    pub force: bool,
    /// Go on although pods with emptyDir volumes are on the nodes: their data is lost when they
    /// leave. As kubectl drain --delete-emptydir-data.
    #[arg(long)]
    pub delete_emptydir_data: bool,
}

impl Safety {
    /// The overrides as the refusal reads them.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            force: self.force,
            delete_emptydir_data: self.delete_emptydir_data,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a NodeMaintenance for the nodes, move it to Cordon and Drain, and show its
    /// progress until Drained. Refuses, before creating anything, nodes with pods no controller
    /// recreates (unless --force) or with emptyDir volumes (unless --delete-emptydir-data), as
    /// kubectl drain does; DaemonSet and static pods, and pods the pod rules skip, are not
    /// refused.
    Drain {
        #[command(flatten)]
        nodes: Nodes,
        #[command(flatten)]
        deadline: Deadline,
        #[command(flatten)]
        safety: Safety,
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
    /// Preview a drain of the nodes: pods in the order they would leave (those the pod rules skip
    /// or wait for, with the label or rule that decides), blocking PodDisruptionBudgets,
    /// maintenances already there, the drain deadline, the pods drain refuses without --force or
    /// --delete-emptydir-data; with --max-unavailable, the batches a rollout of these nodes would
    /// drain in. Writes nothing.
    Plan {
        #[command(flatten)]
        nodes: Nodes,
        #[command(flatten)]
        deadline: Deadline,
        /// Also preview `rollout` of these nodes with this --max-unavailable: which nodes are
        /// drained together, the first batch first (the MaintenanceBudgets and maintenances
        /// already there count, as evictord's admission counts them).
        #[arg(long)]
        max_unavailable: Option<String>,
    },
    /// Roll a pool of nodes a few at a time: drain each, run a step on it, wait until it is back,
    /// give it back. Resumable: run the same command again to carry on.
    #[command(after_long_help = ROLLOUT_HELP)]
    Rollout {
        /// Name of the rollout (lower-case letters, digits, '-', '.'; at most 63): names its
        /// MaintenanceBudget, prefixes its NodeMaintenances (NAME-NODE) and labels them
        /// evictord.dev/rollout=NAME. The same name resumes the rollout.
        name: String,
        /// Node names.
        nodes: Vec<String>,
        /// Label selector of the nodes (instead of names), e.g. `pool=blue`; resolved to names
        /// when the rollout starts.
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// How many of the rollout's nodes may be drained at once: a number (2) or a percentage
        /// of them (25%, rounded up, at least 1).
        #[arg(long)]
        max_unavailable: String,
        /// The per-node step, run as `sh -c CMD` on this machine with EVICTORD_NODE set to the
        /// node, once the node is drained; its output is shown prefixed with [node]. A non-zero
        /// exit stops the rollout.
        #[arg(long, value_name = "CMD")]
        exec: Option<String>,
        /// The step reboots the node: wait until its status.nodeInfo.bootID has changed (and it
        /// is Ready) before giving it back.
        #[arg(long)]
        reboot: bool,
        /// Cordon every node of the rollout at the start (as evictord cordons: Complete
        /// uncordons it; not counted by the budget), so that evicted pods land outside the
        /// rolled nodes.
        #[arg(long)]
        cordon_first: bool,
        /// Stop after this long (e.g. 2h): no new step starts, running steps end, exit 3.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
        /// Why (recorded in each maintenance's spec.reason, with the rollout's name).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        deadline: Deadline,
        #[command(flatten)]
        safety: Safety,
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
            Command::Plan { .. } | Command::Status | Command::Rollout { .. } => true,
            Command::Drain { dry_run, .. } => *dry_run,
            Command::Evict { wait, .. } => !*wait,
            Command::Watch { .. }
            | Command::Complete { .. }
            | Command::Cancel { .. }
            | Command::Docs => false,
        }
    }
}
