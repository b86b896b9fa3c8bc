//! The soak's node agents: `evictord node-agent` on each node the maintenances drain, with a
//! static pod directory of one manifest and a played kubelet for it ([`StaticKubelet`]), so
//! that every round's maintenances reach the Static stage and hold a manifest, and the
//! schedule's `KillNodeAgent` fault SIGKILLs an agent (a new one started a few seconds later,
//! as its DaemonSet would) while it may hold one. The mirror pods live in a namespace of their
//! own, out of the pool's played kubelet's way.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;

use super::super::control_plane::TestCluster;
use super::super::evictord::readyz_within;
use super::super::node_agent::Agent;
use super::super::static_kubelet::StaticKubelet;

/// The manifest in each directory.
pub const MANIFEST: &str = "soak-static.yaml";
/// The static pod's name (its mirror pod is `<name>-<node>`).
pub const STATIC_POD: &str = "soak-static";

/// The agent's flags: the replicas' heartbeat settings (`support::surge::FLAGS`), the held
/// manifests checked every second besides on every change.
const ARGS: &[&str] = &[
    "--check-interval=1s",
    "--interceptor-deadline=40s",
    "--min-heartbeat-interval=1s",
];

/// How long an agent may take to answer `/readyz` (after a fault, on two shared cores).
const READY_BOUND: Duration = Duration::from_secs(120);

struct Tended {
    node: String,
    dir: PathBuf,
    content: String,
    agent: Option<Agent>,
    kubelet: StaticKubelet,
}

/// The agents, their directories and played kubelets.
pub struct NodeAgents {
    c: &'static TestCluster,
    nodes: Vec<Tended>,
    /// Agents SIGKILLed so far.
    pub killed: usize,
}

impl NodeAgents {
    /// A manifest, a played kubelet and a ready agent for each of `nodes`, the mirror pods in
    /// namespace `static_ns`.
    pub async fn start(
        c: &'static TestCluster,
        client: &Client,
        nodes: &[String],
        static_ns: &str,
    ) -> anyhow::Result<Self> {
        let mut tended = Vec::new();
        for node in nodes {
            let dir = c.dir.join(format!("static-{node}"));
            std::fs::create_dir_all(&dir)?;
            let content = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {STATIC_POD}\n  namespace: {static_ns}\nspec:\n  terminationGracePeriodSeconds: 2\n  automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: registry.invalid/soak-static:1\n"
            );
            std::fs::write(dir.join(MANIFEST), &content)?;
            let kubelet = StaticKubelet::start(client.clone(), &dir, node);
            tended.push(Tended {
                node: node.clone(),
                dir,
                content,
                agent: None,
                kubelet,
            });
        }
        let mut agents = Self {
            c,
            nodes: tended,
            killed: 0,
        };
        for i in 0..agents.nodes.len() {
            agents.restart(i).await?;
        }
        Ok(agents)
    }

    /// The node of agent `pick` (modulo their number).
    pub fn node(&self, pick: usize) -> String {
        self.nodes[pick % self.nodes.len()].node.clone()
    }

    /// SIGKILLs the agent of `pick` (modulo their number).
    pub fn kill(&mut self, pick: usize) {
        let i = pick % self.nodes.len();
        if let Some(mut a) = self.nodes[i].agent.take() {
            a.kill();
            self.killed += 1;
        }
    }

    /// Starts the agent of `pick` (modulo their number) and waits until it is ready.
    pub async fn restart(&mut self, pick: usize) -> anyhow::Result<()> {
        let i = pick % self.nodes.len();
        let t = &mut self.nodes[i];
        let agent = Agent::start_with(self.c, &t.node, &t.dir, &self.c.kubeconfig, ARGS);
        let ready = readyz_within(agent.probe_port, READY_BOUND).await;
        let logs = agent.logs();
        t.agent = Some(agent);
        if !ready {
            anyhow::bail!(
                "the node agent of {} not ready within {READY_BOUND:?}:\n{logs}",
                t.node
            );
        }
        Ok(())
    }

    /// Mirror pods the played kubelets created, over every node: one per node at the start,
    /// one more each time a held manifest was put back.
    pub fn mirror_pods_started(&self) -> usize {
        self.nodes
            .iter()
            .map(|t| t.kubelet.started(STATIC_POD))
            .sum()
    }

    /// What is left behind on the nodes' static pod directories: a manifest not back as it was
    /// written, a manifest still held, an agent not running.
    pub fn leftovers(&self) -> Vec<String> {
        let mut found = Vec::new();
        for t in &self.nodes {
            match std::fs::read_to_string(t.dir.join(MANIFEST)) {
                Ok(c) if c == t.content => {}
                Ok(_) => found.push(format!("node {}: {MANIFEST} changed", t.node)),
                Err(_) => found.push(format!("node {}: {MANIFEST} not back", t.node)),
            }
            let held = t.dir.join(".evictord-held/manifests");
            let held: Vec<String> = std::fs::read_dir(&held)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            if !held.is_empty() {
                found.push(format!("node {}: manifests still held: {held:?}", t.node));
            }
            if t.agent.is_none() {
                found.push(format!("node {}: no node agent running", t.node));
            }
        }
        found
    }
}
