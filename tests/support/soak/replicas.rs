//! evictord as the chart runs it, for the soak: two replicas of `evictord serve` electing a
//! leader, both as the same user (replicas share a ServiceAccount; each names itself by
//! `POD_NAME` in its user agent and in the Lease), both serving the webhooks behind a TCP
//! proxy that plays the chart's Service (a connection goes to the next replica that accepts),
//! so that any replica can be killed or replaced while kube-apiserver keeps calling the
//! webhooks. Every replica ever started is recorded: the invariant checker reads their logs
//! for leadership changes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::PostParams;

use crate::support::TestCluster;
use crate::support::evictord::{Evictord, SpawnOptions, readyz_within};

/// The user both replicas run as.
pub const REPLICA_USER: &str = "evictord-soak";
/// The Lease the replicas elect a leader on.
pub const LEASE: &str = "evictord-soak";

/// A replica ever started.
#[derive(Clone, Debug)]
pub struct Started {
    /// Its `POD_NAME`: the Lease holder's identity and the identity in its user agent.
    pub identity: String,
    pub log: PathBuf,
    /// Started from the earlier commit's build.
    pub old: bool,
    pub started: SystemTime,
}

/// A live replica.
pub struct Replica {
    pub e: Evictord,
    pub identity: String,
    pub old: bool,
}

/// The replicas, the proxy in front of their webhooks and the record of every start.
pub struct Replicas {
    c: &'static TestCluster,
    args: Vec<String>,
    kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    pub lease_ns: String,
    /// The binary of the earlier commit, when the soak swaps builds.
    pub old_bin: Option<PathBuf>,
    pub live: Vec<Replica>,
    pub history: Arc<Mutex<Vec<Started>>>,
    backends: Arc<Mutex<Vec<u16>>>,
    pub proxy_port: u16,
    next: AtomicUsize,
}

/// How long a replica may take to answer `/readyz` (on two shared cores, after a fault).
const READY_BOUND: Duration = Duration::from_secs(120);

impl Replicas {
    /// Binds the user to `cluster-admin`, starts the proxy and two replicas of this build
    /// (the first alone, so that it writes the serving certificates both share), and waits
    /// until one leads.
    pub async fn start(
        c: &'static TestCluster,
        lease_ns: &str,
        flags: &[&str],
        old_bin: Option<PathBuf>,
    ) -> anyhow::Result<Replicas> {
        let client = c.client().await;
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": REPLICA_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": REPLICA_USER}],
        }))?;
        match Api::<ClusterRoleBinding>::all(client)
            .create(&PostParams::default(), &binding)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => anyhow::bail!("binding {REPLICA_USER}: {e}"),
        }
        let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        args.extend([
            "--leader-election".to_string(),
            "--lease-duration=15s".to_string(),
            format!("--leader-election-id={LEASE}"),
            format!("--leader-election-namespace={lease_ns}"),
        ]);
        let backends = Arc::new(Mutex::new(Vec::new()));
        let proxy_port = proxy(backends.clone()).await?;
        let mut r = Replicas {
            c,
            args,
            kubeconfig: c.kubeconfig_as(REPLICA_USER),
            cert_dir: c.dir.join("soak-evictord-certs"),
            lease_ns: lease_ns.to_string(),
            old_bin,
            live: Vec::new(),
            history: Arc::new(Mutex::new(Vec::new())),
            backends,
            proxy_port,
            next: AtomicUsize::new(0),
        };
        r.add(false).await?;
        r.add(false).await?;
        for _ in 0..120 {
            if r.leader().await.is_some() {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::bail!("no replica took the lease within 60 s")
    }

    /// Starts a replica (of the earlier build when `old`) and waits until it is ready; its
    /// webhook port joins the proxy then.
    pub async fn add(&mut self, old: bool) -> anyhow::Result<()> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let identity = format!("soak-replica-{n}{}", if old { "-old" } else { "" });
        let bin = if old {
            Some(
                self.old_bin
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("no earlier build given"))?,
            )
        } else {
            None
        };
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let e = Evictord::spawn(
            self.c,
            &args,
            SpawnOptions {
                kubeconfig: Some(self.kubeconfig.clone()),
                cert_dir: Some(self.cert_dir.clone()),
                env: vec![("POD_NAME".to_string(), identity.clone())],
                bin,
                as_deployed: true,
                ..Default::default()
            },
        );
        self.history.lock().unwrap().push(Started {
            identity: identity.clone(),
            log: e.log.clone(),
            old,
            started: SystemTime::now(),
        });
        if !readyz_within(e.probe_port, READY_BOUND).await {
            let log = e.logs();
            anyhow::bail!(
                "replica {identity} not ready within {READY_BOUND:?}:\n{}",
                crate::support::control_plane::tail(&log, 30)
            );
        }
        self.backends.lock().unwrap().push(e.webhook_port);
        self.live.push(Replica { e, identity, old });
        Ok(())
    }

    /// The Lease holder's identity, if the Lease names a live replica.
    pub async fn leader(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.c.client().await, &self.lease_ns);
        let lease = tokio::time::timeout(Duration::from_secs(10), leases.get_opt(LEASE))
            .await
            .ok()?
            .ok()??;
        let holder = lease.spec?.holder_identity?;
        self.live
            .iter()
            .any(|r| r.identity == holder)
            .then_some(holder)
    }

    /// Takes the replica `identity` out: its port leaves the proxy, then SIGKILL (`kill`) or
    /// SIGTERM.
    pub fn remove(&mut self, identity: &str, kill: bool) -> Option<Replica> {
        let i = self.live.iter().position(|r| r.identity == identity)?;
        let mut r = self.live.remove(i);
        self.backends
            .lock()
            .unwrap()
            .retain(|p| *p != r.e.webhook_port);
        if kill {
            r.e.kill();
        } else {
            r.e.stop();
        }
        Some(r)
    }

    /// A live replica other than the Lease holder (the first when none holds it).
    pub async fn standby(&self) -> Option<String> {
        let leader = self.leader().await;
        self.live
            .iter()
            .find(|r| Some(&r.identity) != leader.as_ref())
            .map(|r| r.identity.clone())
    }

    /// Replaces every live replica, one at a time (SIGTERM, then a new one of the other build
    /// ready before the next goes): a rolling upgrade (`old` false) or downgrade (`old` true).
    pub async fn roll(&mut self, old: bool) -> anyhow::Result<()> {
        let ids: Vec<String> = self.live.iter().map(|r| r.identity.clone()).collect();
        for id in ids {
            self.remove(&id, false);
            self.add(old).await?;
        }
        Ok(())
    }

    /// True while the earlier build runs.
    pub fn running_old(&self) -> bool {
        self.live.iter().any(|r| r.old)
    }

    /// Every live replica's process still running.
    pub fn all_running(&mut self) -> bool {
        self.live.iter_mut().all(|r| r.e.running())
    }
}

/// A TCP proxy on 127.0.0.1 (the chart's Service): each connection goes to the first of the
/// `backends` that accepts, starting from the next one in turn. Returns its port.
async fn proxy(backends: Arc<Mutex<Vec<u16>>>) -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let turn = Arc::new(AtomicUsize::new(0));
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let ports = backends.lock().unwrap().clone();
            let first = turn.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                for k in 0..ports.len() {
                    let port = ports[(first + k) % ports.len()];
                    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
                    if let Ok(Ok(mut outbound)) =
                        tokio::time::timeout(Duration::from_secs(1), connect).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    Ok(port)
}
