//! Real `kubectl` and `helm` (from `tests/tools/helm-kubectl.sh`, directory in `$EVICTORD_TOOLS`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn tools_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("EVICTORD_TOOLS") {
        return PathBuf::from(d);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/helm-kubectl.sh");
    let out = Command::new("bash")
        .arg(script)
        .output()
        .expect("running tests/tools/helm-kubectl.sh");
    assert!(
        out.status.success(),
        "tests/tools/helm-kubectl.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs a tool with optional standard input.
pub fn run(
    tool: &str,
    args: &[&str],
    kubeconfig: Option<&std::path::Path>,
    stdin: Option<&str>,
) -> Output {
    let mut cmd = Command::new(tools_dir().join(tool));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {tool}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("writing stdin");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("waiting for tool")
}

/// A `kubectl` command against the test cluster, to spawn (for commands that run on while the
/// test acts, like `kubectl drain`).
pub fn kubectl_command(c: &super::TestCluster, args: &[&str]) -> Command {
    let mut cmd = Command::new(tools_dir().join("kubectl"));
    cmd.args(args).env("KUBECONFIG", &c.kubeconfig);
    cmd
}

/// `kubectl` against the test cluster.
pub fn kubectl(c: &super::TestCluster, args: &[&str], stdin: Option<&str>) -> Output {
    run("kubectl", args, Some(&c.kubeconfig), stdin)
}

/// Prometheus' `promtool`: from `$PROMTOOL_DIR`, or installed by `tests/tools/promtool.sh`.
pub fn promtool() -> std::path::PathBuf {
    let dir = match std::env::var_os("PROMTOOL_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/promtool.sh");
            let out = std::process::Command::new("bash")
                .arg(script)
                .output()
                .expect("running tests/tools/promtool.sh");
            assert!(
                out.status.success(),
                "tests/tools/promtool.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    dir.join("promtool")
}
