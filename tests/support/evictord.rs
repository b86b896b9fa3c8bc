//! The `evictord` binary running against the test control plane: CRDs installed from
//! `evictord crds`, the webhook registered by URL from `evictord webhook-config`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

use super::control_plane::{TestCluster, free_port, kill_on_exit, tail};

pub const BIN: &str = env!("CARGO_BIN_EXE_evictord");

/// The `evictord serve` the tests and benchmarks start: this build, or another one named by
/// `EVICTORD_BIN` (the benchmarks compare an older build on the same machine with it).
pub fn serve_bin() -> String {
    std::env::var("EVICTORD_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// A running `evictord serve`.
pub struct Evictord {
    child: Option<Child>,
    pub webhook_port: u16,
    pub probe_port: u16,
    pub cert_dir: PathBuf,
    pub log: PathBuf,
}

static SHARED: OnceCell<Evictord> = OnceCell::const_new();

/// Flags for fast tests: short interceptor deadline, 1 s heartbeat interval, fast backoff.
pub const FAST: &[&str] = &[
    "--interceptor-deadline=6s",
    "--min-heartbeat-interval=1s",
    "--eviction-backoff-base=1s",
    "--eviction-backoff-cap=4s",
];

/// The evictord of this test binary (webhook + controllers), started on first use with `args`.
pub async fn shared(args: &[&str]) -> &'static Evictord {
    SHARED
        .get_or_init(|| async {
            let c = super::cluster().await;
            install_crds(c).await;
            let e = Evictord::start(c, args).await;
            e.register_webhooks(c, "evictord").await;
            e
        })
        .await
}

/// Installs the CRDs printed by `evictord crds` and waits until they are Established.
pub async fn install_crds(c: &TestCluster) {
    let out = Command::new(BIN)
        .arg("crds")
        .output()
        .expect("evictord crds");
    assert!(
        out.status.success(),
        "evictord crds failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = c.client().await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for doc in serde_norway::Deserializer::from_slice(&out.stdout) {
        let value = serde_norway::Value::deserialize(doc).expect("yaml");
        if value.is_null() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_norway::from_value(value).expect("crd");
        let name = crd.metadata.name.clone().expect("name");
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating CRD {name}: {e}"),
        }
        let cond = kube::runtime::wait::conditions::is_crd_established();
        tokio::time::timeout(
            Duration::from_secs(30),
            kube::runtime::wait::await_condition(api.clone(), &name, cond),
        )
        .await
        .expect("CRD established in time")
        .expect("watching CRD");
    }
}

use serde::Deserialize;

impl Evictord {
    /// Starts `evictord serve` against the cluster with fresh certificates in a new directory.
    pub async fn start(c: &TestCluster, args: &[&str]) -> Evictord {
        let n = free_port();
        let cert_dir = c.dir.join(format!("evictord-certs-{n}"));
        Self::start_with_certs(c, args, cert_dir).await
    }

    /// Starts `evictord serve` with the certificates in `cert_dir` (generated when missing).
    pub async fn start_with_certs(c: &TestCluster, args: &[&str], cert_dir: PathBuf) -> Evictord {
        let e = Evictord::spawn(
            c,
            args,
            SpawnOptions {
                cert_dir: Some(cert_dir),
                ..Default::default()
            },
        );
        e.wait_ready().await;
        e
    }

    /// The server's log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GETs a path on the probe port; returns (status, body).
    pub async fn probe(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.probe_port, path).await
    }

    async fn wait_ready(&self) {
        if !readyz_within(self.probe_port, Duration::from_secs(30)).await {
            panic!(
                "evictord did not become ready within 30s:\n{}",
                tail(&self.logs(), 40)
            );
        }
    }

    /// Registers the webhook configurations printed by `evictord webhook-config` for this server.
    pub async fn register_webhooks(&self, c: &TestCluster, name: &str) {
        let out = Command::new(BIN)
            .args(["webhook-config", "--match-conditions=false", "--name", name])
            .arg(format!(
                "--url-base=https://127.0.0.1:{}",
                self.webhook_port
            ))
            .arg(format!(
                "--ca-file={}",
                self.cert_dir.join("ca.crt").display()
            ))
            .output()
            .expect("evictord webhook-config");
        assert!(
            out.status.success(),
            "webhook-config failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let client = c.client().await;
        for doc in serde_norway::Deserializer::from_slice(&out.stdout) {
            let value = serde_norway::Value::deserialize(doc).expect("yaml");
            match value.get("kind").and_then(|k| k.as_str()) {
                Some("ValidatingWebhookConfiguration") => {
                    let obj: ValidatingWebhookConfiguration =
                        serde_norway::from_value(value).expect("vwc");
                    recreate(Api::all(client.clone()), obj).await;
                }
                Some("MutatingWebhookConfiguration") => {
                    let obj: MutatingWebhookConfiguration =
                        serde_norway::from_value(value).expect("mwc");
                    recreate(Api::all(client.clone()), obj).await;
                }
                _ => {}
            }
        }
        // The apiserver picks new configurations up asynchronously.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        for _ in 0..300 {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// Kills the process at once (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Evictord {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn recreate<K>(api: Api<K>, obj: K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().expect("name");
    let _ = api.delete(&name, &DeleteParams::default()).await;
    api.create(&PostParams::default(), &obj)
        .await
        .expect("register webhook configuration");
}

/// Polls `/readyz` on the probe port every 100 ms until it answers 200 (true) or `timeout`
/// passes (false).
pub async fn readyz_within(probe_port: u16, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some((200, _)) = http_get(probe_port, "/readyz").await {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A minimal HTTP/1.1 GET on 127.0.0.1 (probe port, plain HTTP).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// The admin client of the shared cluster.
pub async fn admin() -> Client {
    super::cluster().await.client().await
}

/// How to start an `evictord serve` with [`Evictord::spawn`].
#[derive(Clone, Debug, Default)]
pub struct SpawnOptions {
    /// Kubeconfig (default: the admin one).
    pub kubeconfig: Option<PathBuf>,
    /// Webhook port (default: a free one), e.g. to register the webhooks before starting.
    pub webhook_port: Option<u16>,
    /// Certificate directory (default: a new one in the scratch directory).
    pub cert_dir: Option<PathBuf>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// The binary (default: [`serve_bin`]), e.g. the build of an earlier commit.
    pub bin: Option<PathBuf>,
    /// Keep evictord's own `--shutdown-delay` after SIGTERM, as deployed (a rolling restart).
    /// Otherwise the test's process closes its webhook at once: most tests stop a server to
    /// restart it, not to roll it.
    pub as_deployed: bool,
}

impl SpawnOptions {
    /// The webhook port and certificates of `e`: a process started with them replaces `e` behind
    /// the webhook configurations registered for it (after a kill, a restart).
    pub fn in_place_of(e: &Evictord) -> Self {
        Self {
            webhook_port: Some(e.webhook_port),
            cert_dir: Some(e.cert_dir.clone()),
            ..Self::default()
        }
    }
}

impl Evictord {
    /// Starts `evictord serve` without waiting for readiness (see [`Evictord::ready`]), so that
    /// several processes can start at once.
    pub fn spawn(c: &TestCluster, args: &[&str], opts: SpawnOptions) -> Evictord {
        let webhook_port = opts.webhook_port.unwrap_or_else(free_port);
        let probe_port = free_port();
        let cert_dir = opts
            .cert_dir
            .unwrap_or_else(|| c.dir.join(format!("evictord-certs-{webhook_port}")));
        let kubeconfig = opts.kubeconfig.unwrap_or_else(|| c.kubeconfig.clone());
        let log = c.dir.join(format!("evictord-{webhook_port}.log"));
        let bin = opts.bin.unwrap_or_else(|| PathBuf::from(serve_bin()));
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--webhook-addr=127.0.0.1:{webhook_port}"))
            .arg(format!("--probe-addr=127.0.0.1:{probe_port}"))
            .arg(format!("--cert-dir={}", cert_dir.display()))
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("EVICTORD_TEST_LOG").unwrap_or_else(|_| "info,evictord=debug".into()),
            )
            .envs((!opts.as_deployed).then_some(("EVICTORD_SHUTDOWN_DELAY", "0s")))
            .envs(opts.env)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log)
                    .expect("log"),
            );
        let child = cmd.spawn().expect("starting evictord");
        kill_on_exit(child.id());
        Evictord {
            child: Some(child),
            webhook_port,
            probe_port,
            cert_dir,
            log,
        }
    }

    /// Waits until `/readyz` answers 200 (panics after 30 s with the log).
    pub async fn ready(&self) {
        self.wait_ready().await;
    }

    /// The process id while the process is managed by this handle.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The value of a counter or gauge on `/metrics`, summed over the series whose line starts
    /// with `series` (e.g. `name{result="success"}`); 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, body) = self.probe("/metrics").await.expect("/metrics");
        metric_sum(&body, series)
    }

    /// Registers webhook configurations named `name` by URL for a server on `webhook_port`
    /// (which need not be running yet) with the CA in `ca_file`.
    pub async fn register_webhooks_at(
        c: &TestCluster,
        name: &str,
        webhook_port: u16,
        ca_file: &std::path::Path,
    ) {
        let e = Evictord {
            child: None,
            webhook_port,
            probe_port: 0,
            cert_dir: ca_file.parent().expect("ca dir").to_path_buf(),
            log: PathBuf::new(),
        };
        assert_eq!(
            ca_file.file_name().and_then(|n| n.to_str()),
            Some("ca.crt"),
            "the CA file must be named ca.crt"
        );
        e.register_webhooks(c, name).await;
    }
}

/// Sums the values of the Prometheus text lines starting with `series`.
pub fn metric_sum(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
