//! What drains the pool in each mode ([`crate::pool_mode::Drainer`]), as the real tools run:
//! - `kubectl drain` (`$EVICTORD_TOOLS`): of one node or of every drained node;
//! - the script users write today (issue 41): node after node, `kubectl drain NODE` (the loop
//!   going on to the next node when it fails, `|| continue`), the per-node step (`sh -c STEP`
//!   with `EVICTORD_NODE` set, as the rollout runs it), `kubectl uncordon NODE`;
//! - one NodeMaintenance in stage Drain, waited for on a watch until `Drained=True`;
//! - `kubectl evictord rollout` through the real `kubectl` (the plugin of this build in front of
//!   PATH), with `--max-unavailable`, `--exec STEP`, `--timeout`, `--force` and
//!   `--delete-emptydir-data` (and `--cordon-first`).
//!
//! Every process's output is appended to the mode's log, each call headed by its start time and
//! command line and each line stamped with its time; every wait is bounded by the mode's
//! deadline (a process still running then is killed).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evictord::api::{CONDITION_DRAINED, MaintenanceBudget, NodeMaintenance, ROLLOUT_LABEL};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use crate::pool_results::Call;
use crate::settings::PoolSettings;
use crate::support;
use crate::support::pool::KUBECTL_DRAIN_FLAGS;

/// How long a rollout may go on past its own `--timeout` (it lets its running steps end)
/// before it is killed.
const ROLLOUT_GRACE: Duration = Duration::from_secs(30);

/// When a mode started and when it must stop, and where its processes write.
pub struct Run<'a> {
    pub c: &'a support::TestCluster,
    pub p: &'a PoolSettings,
    pub t0: Instant,
    pub deadline: Duration,
    pub log: &'a Path,
}

impl Run<'_> {
    fn left(&self) -> Duration {
        self.deadline.saturating_sub(self.t0.elapsed())
    }

    fn over(&self) -> bool {
        self.t0.elapsed() >= self.deadline
    }

    /// Runs `cmd` to its end, at most `within`; its output appended to the log under a header,
    /// each line stamped with the seconds since the drain started (so that a roll's log says
    /// when each node was drained, stepped and given back).
    async fn call(
        &self,
        what: &str,
        nodes: &[String],
        shown: &str,
        mut cmd: Command,
        within: Duration,
    ) -> anyhow::Result<Call> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log)?;
        std::io::Write::write_all(
            &mut file,
            format!("=== {:.1} s: {shown}\n", self.t0.elapsed().as_secs_f64()).as_bytes(),
        )?;
        let start = Instant::now();
        let started_at = self.t0.elapsed().as_secs_f64();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let file = Arc::new(Mutex::new(file));
        let (copied, copies) = std::sync::mpsc::channel::<()>();
        let out = child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>);
        let err = child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>);
        for pipe in [out, err].into_iter().flatten() {
            let (file, copied, t0) = (file.clone(), copied.clone(), self.t0);
            // A thread per pipe, not joined: a step's own children may hold the pipe open.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Ok(mut f) = file.lock() {
                        let _ = writeln!(f, "[{:7.1} s] {line}", t0.elapsed().as_secs_f64());
                    }
                }
                let _ = copied.send(());
            });
        }
        drop(copied);
        let exit_code = loop {
            if let Some(status) = child.try_wait()? {
                break status.code();
            }
            if start.elapsed() >= within {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let seconds = start.elapsed().as_secs_f64();
        // The last lines reach the log within a moment of the exit (bounded).
        for _ in 0..20 {
            match copies.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        let text = std::fs::read_to_string(self.log).unwrap_or_default();
        Ok(Call {
            what: what.into(),
            nodes: nodes.to_vec(),
            started_at,
            seconds,
            exit_code,
            last_line: text.lines().last().unwrap_or_default().to_string(),
        })
    }

    /// One `kubectl` call (`kubectl drain` gets the pool's flags and its `--timeout`).
    async fn kubectl(&self, verb: &str, nodes: &[String]) -> anyhow::Result<Call> {
        let mut args = vec![verb.to_string()];
        args.extend(nodes.iter().cloned());
        if verb == "drain" {
            args.extend(KUBECTL_DRAIN_FLAGS.iter().map(|f| f.to_string()));
            args.push(format!("--timeout={}s", self.p.node_timeout.as_secs()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cmd = support::tools::kubectl_command(self.c, &args);
        let shown = format!("kubectl {}", args.join(" "));
        self.call(verb, nodes, &shown, cmd, self.left()).await
    }

    /// `kubectl drain` of `nodes` in one call.
    pub async fn kubectl_drain(&self, nodes: &[String]) -> anyhow::Result<Call> {
        self.kubectl("drain", nodes).await
    }

    /// The per-node step, as the rollout runs it: `sh -c STEP` with `EVICTORD_NODE`.
    async fn step(&self, node: &str) -> anyhow::Result<Call> {
        let step = self.p.step_command();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(&step).env("EVICTORD_NODE", node);
        let shown = format!("EVICTORD_NODE={node} sh -c '{step}'");
        self.call("step", &[node.to_string()], &shown, cmd, self.left())
            .await
    }

    /// The script: for each node in turn, `kubectl drain NODE || continue`, the step,
    /// `kubectl uncordon NODE`. Returns whether every call succeeded, and the calls.
    pub async fn script_each(&self, nodes: &[String]) -> anyhow::Result<(bool, Vec<Call>)> {
        let mut calls = Vec::new();
        let mut all = true;
        for node in nodes {
            if self.over() {
                all = false;
                break;
            }
            let one = std::slice::from_ref(node);
            let drain = self.kubectl("drain", one).await?;
            let drained = drain.exit_code == Some(0);
            calls.push(drain);
            if !drained {
                all = false;
                continue;
            }
            let step = self.step(node).await?;
            let stepped = step.exit_code == Some(0);
            calls.push(step);
            if !stepped {
                all = false;
                continue;
            }
            let back = self.kubectl("uncordon", one).await?;
            all &= back.exit_code == Some(0);
            calls.push(back);
        }
        Ok((all, calls))
    }

    /// `kubectl evictord rollout NAME -l SELECTOR --max-unavailable N --exec STEP --timeout T
    /// --force --delete-emptydir-data` (and `--cordon-first`), through the real kubectl.
    pub async fn rollout(
        &self,
        name: &str,
        selector: &str,
        nodes: &[String],
        cordon_first: bool,
    ) -> anyhow::Result<Call> {
        let step = self.p.step_command();
        let timeout = format!("{}s", self.left().as_secs().max(1));
        let mut args = vec![
            "evictord",
            "rollout",
            name,
            "-l",
            selector,
            "--max-unavailable",
            &self.p.max_unavailable,
            "--exec",
            &step,
            "--timeout",
            &timeout,
            // The pool holds bare pods and pods with emptyDir volumes: the overrides kubectl drain
            // gets too (`KUBECTL_DRAIN_FLAGS`), without which both refuse the nodes.
            "--force",
            "--delete-emptydir-data",
        ];
        if cordon_first {
            args.push("--cordon-first");
        }
        let mut cmd = support::tools::kubectl_command(self.c, &args);
        cmd.env("PATH", plugin_path()?);
        let shown = format!(
            "kubectl {}",
            args.iter()
                .map(|a| if a.contains(' ') {
                    format!("'{a}'")
                } else {
                    a.to_string()
                })
                .collect::<Vec<_>>()
                .join(" ")
        );
        self.call(
            "evictord rollout",
            nodes,
            &shown,
            cmd,
            self.left() + ROLLOUT_GRACE,
        )
        .await
    }
}

/// A directory holding only this build's `kubectl-evictord` (the release build `cargo bench`
/// made), put in front of PATH so that kubectl finds the plugin there; the bench's own, so
/// that the tests' link to their debug build is left alone.
fn plugin_path() -> anyhow::Result<String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-plugin-path");
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("kubectl-evictord");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubectl-evictord"), &link)?;
    Ok(format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    ))
}

/// Creates the NodeMaintenance and waits (on a watch) for `Drained=True`, at most `timeout`.
pub async fn drain_with_maintenance(
    client: &Client,
    name: &str,
    pool: &str,
    timeout: Duration,
) -> anyhow::Result<bool> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let nm = support::fixtures::draining_maintenance(
        name,
        support::pool::DRAIN_LABEL,
        pool,
        "pool benchmark",
    );
    api.create(&PostParams::default(), &nm).await?;
    let drained = |nm: Option<&NodeMaintenance>| {
        nm.and_then(|n| n.status.as_ref())
            .is_some_and(|s| s.is_true(CONDITION_DRAINED))
    };
    let wait = kube::runtime::wait::await_condition(api, name, drained);
    Ok(matches!(
        tokio::time::timeout(timeout, wait).await,
        Ok(Ok(_))
    ))
}

/// Deletes the NodeMaintenances `selector` selects (evictord still running, so it removes its
/// finalizers) and waits until they are gone, at most 120 s.
pub async fn delete_maintenances(client: &Client, selector: ListParams) -> anyhow::Result<()> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    api.delete_collection(&DeleteParams::default(), &selector)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = api.list_metadata(&selector).await?.items.len();
        if left == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{left} NodeMaintenances not deleted within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What a rollout that did not finish left: its maintenances and its budget.
pub async fn delete_rollout(client: &Client, name: &str) -> anyhow::Result<()> {
    let selector = ListParams::default().labels(&format!("{ROLLOUT_LABEL}={name}"));
    delete_maintenances(client, selector.clone()).await?;
    Api::<MaintenanceBudget>::all(client.clone())
        .delete_collection(&DeleteParams::default(), &selector)
        .await?;
    Ok(())
}
