//! Faults of the control plane itself, for the fault tests: kube-apiserver restarted
//! ([`TestCluster::restart_apiserver`]) and etcd paused ([`TestCluster::pause_etcd`]).

use std::time::Instant;

use super::*;

/// What [`TestCluster::restart_apiserver`] measured.
#[derive(Clone, Copy, Debug)]
pub struct ApiserverRestart {
    /// When SIGTERM was sent.
    pub stopping: SystemTime,
    /// How long the old process took to exit.
    pub stop_took: Duration,
    /// Whether it had to be SIGKILLed after [`APISERVER_STOP_BOUND`].
    pub killed: bool,
    /// When the new process was started.
    pub started: SystemTime,
    /// When it first answered a request (its `/readyz`, with any status: it serves requests
    /// before all its post-start hooks are done).
    pub answering: SystemTime,
    /// When its `/readyz` first answered ok.
    pub ready: SystemTime,
}

impl TestCluster {
    /// Stops kube-apiserver (SIGTERM, SIGKILL after [`APISERVER_STOP_BOUND`]) and starts it again
    /// with the same arguments: same port, certificates, etcd and audit log. Returns once its
    /// `/readyz` answers ok (panics after 60 s with its log). The watchdog stops the new process
    /// when the test binary exits.
    pub async fn restart_apiserver(&self) -> ApiserverRestart {
        self.restart_apiserver_within(APISERVER_STOP_BOUND).await
    }

    /// [`TestCluster::restart_apiserver`], with SIGKILL after `kill_after` when SIGTERM has not
    /// stopped it by then.
    pub async fn restart_apiserver_within(&self, kill_after: Duration) -> ApiserverRestart {
        let (mut old, args) = {
            let mut p = self.processes.lock().expect("processes");
            let old = p.apiserver.take().expect("kube-apiserver is running");
            (old, p.apiserver_args.clone())
        };
        let stopping = SystemTime::now();
        let t = Instant::now();
        assert!(send_signal(old.id(), "TERM"), "SIGTERM to kube-apiserver");
        let mut killed = false;
        loop {
            if old.try_wait().expect("kube-apiserver status").is_some() {
                break;
            }
            if t.elapsed() >= kill_after {
                let _ = old.kill();
                let _ = old.wait();
                killed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stop_took = t.elapsed();
        let marker = format!(
            "\n=== evictord tests: kube-apiserver stopped after {stop_took:?}{}; starting it again ===\n",
            if killed { " (SIGKILL)" } else { "" }
        );
        let _ = std::io::Write::write_all(
            &mut append_log(&self.dir, "apiserver.err"),
            marker.as_bytes(),
        );
        let started = SystemTime::now();
        let new = spawn_apiserver(&self.assets, &args, &self.dir);
        {
            let mut p = self.processes.lock().expect("processes");
            write_pids(&self.dir, &[p.etcd.id(), new.id()]);
            p.apiserver = Some(new);
        }
        let Some((answering, ready)) = self.wait_apiserver(APISERVER_READY_BOUND).await else {
            panic!(
                "kube-apiserver did not become ready within {APISERVER_READY_BOUND:?} after its restart; last log lines:\n{}",
                self.apiserver_log_tail(30)
            );
        };
        ApiserverRestart {
            stopping,
            stop_took,
            killed,
            started,
            answering,
            ready,
        }
    }

    /// Turns kube-apiserver's audit log of every request at the Metadata level on (`true`: it
    /// is restarted writing `audit-requests.log`, whose path is returned) or off again, for a
    /// part of a run (the pool benchmark's) on a control plane started without one. The log is
    /// never rotated (kube-apiserver's default rotates at 100 MB); the caller may truncate it.
    /// A no-op when it is already as asked.
    ///
    /// # Panics
    /// On a control plane started with an audit log ([`cluster_with_request_audit`],
    /// [`cluster_with_eviction_audit`]): that one stays as it is.
    pub async fn set_request_audit(&self, on: bool) -> Option<PathBuf> {
        assert!(
            self.request_audit.is_none() && self.eviction_audit.is_none(),
            "the control plane was started with an audit log"
        );
        let log = self.dir.join("audit-requests.log");
        let policy = self.dir.join("audit-policy-requests.yaml");
        {
            let mut p = self.processes.lock().expect("processes");
            let audited = p.apiserver_args.iter().any(|a| a.starts_with("--audit-"));
            if audited == on {
                return on.then_some(log);
            }
            p.apiserver_args.retain(|a| !a.starts_with("--audit-"));
            if on {
                write(&policy, REQUEST_AUDIT_POLICY);
                p.apiserver_args.extend([
                    format!("--audit-policy-file={}", policy.display()),
                    format!("--audit-log-path={}", log.display()),
                    "--audit-log-format=json".into(),
                    "--audit-log-mode=blocking".into(),
                    // MB: never reached, so never rotated.
                    "--audit-log-maxsize=1000000".into(),
                ]);
            }
        }
        self.restart_apiserver().await;
        on.then_some(log)
    }

    /// Pauses etcd (SIGSTOP) until the returned guard is resumed or dropped (SIGCONT), so that a
    /// failing test never leaves it stopped.
    pub fn pause_etcd(&self) -> EtcdPaused {
        let pid = self.processes.lock().expect("processes").etcd.id();
        assert!(send_signal(pid, "STOP"), "SIGSTOP to etcd");
        EtcdPaused {
            pid,
            paused: SystemTime::now(),
            resumed: false,
        }
    }
}

/// etcd stopped by [`TestCluster::pause_etcd`]; sends SIGCONT when resumed or dropped, even
/// while a panic unwinds.
#[must_use = "etcd resumes when the guard is dropped"]
pub struct EtcdPaused {
    pid: u32,
    /// When SIGSTOP was sent.
    pub paused: SystemTime,
    resumed: bool,
}

impl EtcdPaused {
    /// Sends SIGCONT; returns when.
    pub fn resume(mut self) -> SystemTime {
        self.resumed = true;
        assert!(send_signal(self.pid, "CONT"), "SIGCONT to etcd");
        SystemTime::now()
    }
}

impl Drop for EtcdPaused {
    fn drop(&mut self) {
        if !self.resumed {
            send_signal(self.pid, "CONT");
        }
    }
}
