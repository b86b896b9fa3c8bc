//! Starting the `evictord` binary under test as a server process: this build ([`EVICTORD`]) or
//! another one (`EVICTORD_BENCH_BASELINE`), `evictord serve` on a free loopback port, pinned to
//! CPU 1 when `taskset` exists, offline or connected to the control plane, waited on until ready.
//! The webhook part starts the limit server the same way ([`Server`], [`pinned`],
//! [`wait_listening`]).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::machine::cpus;
use crate::support;

/// The release build of evictord (cargo builds it for benchmarks).
pub const EVICTORD: &str = env!("CARGO_BIN_EXE_evictord");

/// A server process started by the benchmark.
pub struct Server {
    pub name: &'static str,
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `taskset -c CPU` when there are at least two CPUs and taskset exists.
pub fn pinned(cpu: usize, program: &Path) -> Command {
    if cpus() >= 2 && Path::new("/usr/bin/taskset").exists() {
        let mut c = Command::new("/usr/bin/taskset");
        c.arg("-c").arg(cpu.to_string()).arg(program);
        c
    } else {
        Command::new(program)
    }
}

pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

pub fn wait_listening(server: &mut Server, log: &Path) -> anyhow::Result<()> {
    for _ in 0..200 {
        if std::net::TcpStream::connect(server.addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = server.child.try_wait()? {
            anyhow::bail!(
                "{} exited with {status}: {}",
                server.name,
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!(
        "{} did not listen on {} within 20s",
        server.name,
        server.addr
    )
}

/// Which `evictord` binary a server runs, and how.
#[derive(Clone, Copy, Debug)]
pub struct Binary<'a> {
    /// `evictord` (this build) or `baseline` (`EVICTORD_BENCH_BASELINE`).
    pub name: &'static str,
    pub path: &'a Path,
}

impl Binary<'static> {
    /// The release build of this tree.
    pub fn this_build() -> Self {
        Binary {
            name: "evictord",
            path: Path::new(EVICTORD),
        }
    }
}

/// Starts `evictord serve` of `binary` on a free port, pinned to CPU 1: in offline mode (no
/// kubeconfig anywhere), or with `kubeconfig` and its controllers off (`controllers: false`:
/// only the webhook and the caches it reads) or all on, then waits until it is ready (every
/// cache listed). Only flags every evictord since the first benchmark accepts are passed, so
/// that `EVICTORD_BENCH_BASELINE` can name an older build.
pub async fn start_evictord(
    binary: Binary<'_>,
    cert_dir: &Path,
    scratch: &Path,
    kubeconfig: Option<&Path>,
    controllers: bool,
) -> anyhow::Result<Server> {
    let addr = free_addr();
    let probe = free_addr();
    let mode = match (kubeconfig, controllers) {
        (None, _) => "offline",
        (Some(_), false) => "online",
        (Some(_), true) => "controllers",
    };
    let stem = format!("{}-{mode}-{}", binary.name, addr.port());
    let log = scratch.join(format!("{stem}.log"));
    let err = scratch.join(format!("{stem}.err"));
    let home = scratch.join("home");
    std::fs::create_dir_all(&home)?;
    let mut cmd = pinned(1, binary.path);
    cmd.arg("serve")
        .arg(format!("--webhook-addr={addr}"))
        .arg(format!("--probe-addr={probe}"))
        .arg(format!("--cert-dir={}", cert_dir.display()))
        .env("HOME", &home)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        // The chart's default `logLevel`: what a cluster runs (it was `warn`, which hid the cost
        // of the spans the log output kept at `info`).
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(&err)?);
    match kubeconfig {
        Some(k) => {
            cmd.arg(format!("--kubeconfig={}", k.display()));
            if !controllers {
                cmd.arg("--controllers=none");
            }
        }
        None => {
            cmd.env("KUBECONFIG", "/nonexistent/kubeconfig");
        }
    };
    let mut server = Server {
        name: binary.name,
        child: cmd.spawn()?,
        addr,
    };
    wait_listening(&mut server, &log)?;
    let output = || {
        std::fs::read_to_string(&log).unwrap_or_default()
            + &std::fs::read_to_string(&err).unwrap_or_default()
    };
    if kubeconfig.is_none() {
        let out = output();
        anyhow::ensure!(
            out.contains("OFFLINE MODE"),
            "{} ({}) did not start in offline mode:\n{out}",
            binary.name,
            binary.path.display()
        );
    }
    anyhow::ensure!(
        support::evictord::readyz_within(probe.port(), Duration::from_secs(60)).await,
        "{} ({mode}) was not ready within 60s:\n{}",
        binary.name,
        output()
    );
    Ok(server)
}
