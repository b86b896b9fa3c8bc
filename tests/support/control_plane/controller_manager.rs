//! kube-controller-manager beside the control plane, opt-in per test binary: the workload
//! controllers ([`cluster_with_controller_manager`]), the endpoint controllers in a process of
//! their own, the garbage collector, and pausing or stopping them.

use std::sync::OnceLock;

use super::*;

/// The control plane of this test binary with a kube-controller-manager running the workload
/// controllers evictord's interceptors work with ([`WORKLOAD_CONTROLLERS`]; opt-in: other test
/// binaries run without it).
pub async fn cluster_with_controller_manager() -> &'static TestCluster {
    let c = cluster().await;
    CONTROLLER_MANAGER
        .get_or_init(|| async { start_controller_manager(c) })
        .await;
    c
}

/// The kube-controller-manager controllers of [`cluster_with_controller_manager`]: the workloads
/// (Deployments and their ReplicaSets, StatefulSets, DaemonSets), PodDisruptionBudgets, and the
/// HorizontalPodAutoscaler, which enforces `minReplicas`/`maxReplicas` without a metrics server
/// (it cannot compute metric-based replicas then, and logs why).
pub const WORKLOAD_CONTROLLERS: &str =
    "deployment,replicaset,statefulset,daemonset,disruption,horizontalpodautoscaling";

/// The control plane of this test binary with the workload controllers of
/// [`cluster_with_controller_manager`] and, in a kube-controller-manager of their own, the
/// endpoint and endpointslice controllers ([`ENDPOINT_CONTROLLERS`]), which keep the Endpoints and
/// EndpointSlices of Services: a test can pause them alone ([`pause_endpoint_controllers`]).
/// Pods need an IP for them (the played kubelet gives gated pods one).
pub async fn cluster_with_endpoint_controllers() -> &'static TestCluster {
    let c = cluster_with_controller_manager().await;
    ENDPOINT_CONTROLLER_MANAGER
        .get_or_init(|| async {
            spawn_controller_manager(c, ENDPOINT_CONTROLLERS, "kube-controller-manager-endpoints")
        })
        .await;
    c
}

/// The kube-controller-manager controllers of [`cluster_with_endpoint_controllers`].
pub const ENDPOINT_CONTROLLERS: &str = "endpoint,endpointslice";

/// Starts, once per process, kube-controller-manager's garbage collector in a process of its own,
/// as every real cluster runs it: an object whose owners are all gone is deleted (an
/// EvictionRequest once its pod is gone). Call it once the CRDs are installed, so that its first
/// discovery finds them. Opt-in: the tests run without it, so that what they read stays.
pub async fn start_garbage_collector(c: &TestCluster) {
    GARBAGE_COLLECTOR
        .get_or_init(|| async {
            spawn_controller_manager(c, "garbagecollector", "kube-controller-manager-gc")
        })
        .await;
}

/// Pauses the endpoint controllers of [`cluster_with_endpoint_controllers`] (SIGSTOP) until the
/// returned guard is resumed or dropped (SIGCONT): Endpoints and EndpointSlices stay as they are
/// meanwhile.
pub fn pause_endpoint_controllers() -> ControllersPaused {
    let pid = *ENDPOINT_CONTROLLER_MANAGER
        .get()
        .expect("cluster_with_endpoint_controllers() started them");
    assert!(
        send_signal(pid, "STOP"),
        "SIGSTOP to the endpoint controllers"
    );
    ControllersPaused {
        pid,
        resumed: false,
    }
}

/// Pauses the kube-controller-manager of [`cluster_with_controller_manager`] (SIGSTOP) until the
/// returned guard is resumed or dropped (SIGCONT): its controllers act on nothing meanwhile, and
/// on everything that happened once resumed (its watches stay open; events wait in them).
pub fn pause_controller_manager() -> ControllersPaused {
    let pid = *CONTROLLER_MANAGER
        .get()
        .expect("cluster_with_controller_manager() started it");
    assert!(
        send_signal(pid, "STOP"),
        "SIGSTOP to kube-controller-manager"
    );
    ControllersPaused {
        pid,
        resumed: false,
    }
}

/// Controllers paused by [`pause_endpoint_controllers`] or [`pause_controller_manager`]; SIGCONT
/// when resumed or dropped, even while a panic unwinds.
#[must_use = "the controllers resume when the guard is dropped"]
pub struct ControllersPaused {
    pid: u32,
    resumed: bool,
}

impl ControllersPaused {
    /// Sends SIGCONT.
    pub fn resume(mut self) {
        self.resumed = true;
        assert!(send_signal(self.pid, "CONT"), "SIGCONT to the controllers");
    }
}

impl Drop for ControllersPaused {
    fn drop(&mut self) {
        if !self.resumed {
            send_signal(self.pid, "CONT");
        }
    }
}

/// Stops the kube-controller-managers of [`cluster_with_controller_manager`],
/// [`cluster_with_endpoint_controllers`] and [`start_garbage_collector`] (SIGTERM), for a
/// benchmark whose later parts measure without it; it is not started again in this process.
pub fn stop_controller_manager() {
    for kcm in [
        &CONTROLLER_MANAGER,
        &ENDPOINT_CONTROLLER_MANAGER,
        &GARBAGE_COLLECTOR,
    ] {
        if let Some(pid) = kcm.get() {
            send_signal(*pid, "TERM");
        }
    }
}

/// The HorizontalPodAutoscaler controller's sync period of [`cluster_with_controller_manager`]
/// when [`set_hpa_sync_period`] gave none: 2 s, not kube-controller-manager's default 15 s, so
/// that tests waiting on an autoscaler's floor are quick.
const TEST_HPA_SYNC_PERIOD: Duration = Duration::from_secs(2);

static HPA_SYNC_PERIOD: OnceLock<Duration> = OnceLock::new();

/// Sets the HorizontalPodAutoscaler controller's sync period of the kube-controller-manager
/// [`cluster_with_controller_manager`] starts (the benchmark's: kube-controller-manager's own
/// default); before it starts, once per process.
pub fn set_hpa_sync_period(period: Duration) {
    assert!(
        HPA_SYNC_PERIOD.set(period).is_ok() && CONTROLLER_MANAGER.get().is_none(),
        "set_hpa_sync_period: once, before the kube-controller-manager starts"
    );
}

static GARBAGE_COLLECTOR_WITHIN: OnceLock<()> = OnceLock::new();

/// Runs the garbage collector within the kube-controller-manager
/// [`cluster_with_controller_manager`] starts, beside the workload controllers, as a real
/// cluster's kube-controller-manager runs it (the benchmark's): the controllers share one
/// discovery cache, refreshed every 30 s when a controller looks a kind up. In a process of its
/// own ([`start_garbage_collector`], the tests') the collector keeps a discovery cache of its own
/// and, once it has EvictionRequests to collect, reads the whole discovery again every 30 s,
/// which a real cluster does not. Call it before the kube-controller-manager starts, once per
/// process, with the CRDs installed (its first discovery finds them).
pub fn set_garbage_collector_within_controller_manager() {
    assert!(
        GARBAGE_COLLECTOR_WITHIN.set(()).is_ok() && CONTROLLER_MANAGER.get().is_none(),
        "set_garbage_collector_within_controller_manager: once, before the kube-controller-manager starts"
    );
}

fn start_controller_manager(c: &TestCluster) -> u32 {
    let controllers = match GARBAGE_COLLECTOR_WITHIN.get() {
        Some(()) => format!("{WORKLOAD_CONTROLLERS},garbagecollector"),
        None => WORKLOAD_CONTROLLERS.to_string(),
    };
    spawn_controller_manager(c, &controllers, "kube-controller-manager")
}

/// Starts a kube-controller-manager running `controllers`, logging to `<log>.log` and `<log>.err`.
fn spawn_controller_manager(c: &TestCluster, controllers: &str, log: &str) -> u32 {
    let bin = c.assets.join("kube-controller-manager");
    assert!(
        bin.is_file(),
        "kube-controller-manager not found in KUBEBUILDER_ASSETS={} (tests/tools/envtest.sh builds it)",
        c.assets.display()
    );
    let kcm = Command::new(bin)
        .args([
            format!("--kubeconfig={}", c.kubeconfig.display()),
            format!("--controllers={controllers}"),
            format!(
                "--horizontal-pod-autoscaler-sync-period={}ms",
                HPA_SYNC_PERIOD
                    .get()
                    .unwrap_or(&TEST_HPA_SYNC_PERIOD)
                    .as_millis()
            ),
            "--leader-elect=false".into(),
            // No serving: nothing scrapes it, and it needs no authentication delegation then.
            "--port=0".into(),
            "--secure-port=0".into(),
            "--use-service-account-credentials=false".into(),
        ])
        .stdout(log_file(&c.dir, &format!("{log}.log")))
        .stderr(log_file(&c.dir, &format!("{log}.err")))
        .spawn()
        .expect("starting kube-controller-manager");
    kill_on_exit(kcm.id());
    kcm.id()
}
