//! The processes the parts measure, as `/proc` shows them: the test control plane's
//! kube-apiserver and etcd, found by their command lines ([`control_plane_pids`]), and a field of
//! a process's `/proc/PID/status` in bytes ([`status_bytes`]: RSS, peak RSS).

use std::path::Path;

use crate::support;

/// The kube-apiserver (serving `c.server`'s port) and the etcd (data under `c.dir`) of the test
/// control plane, found by their command lines in `/proc`; with a note when one is missing.
pub fn control_plane_pids(c: &support::TestCluster) -> (Option<u32>, Option<u32>, Option<String>) {
    let port = c.server.rsplit(':').next().unwrap_or_default();
    let port_flag = format!("--secure-port={port}");
    let apiserver_bin = c.assets.join("kube-apiserver");
    let etcd_bin = c.assets.join("etcd");
    let etcd_data = c.dir.join("etcd");
    let (mut apiserver, mut etcd) = (None, None);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let Some(bin) = args.first().map(Path::new) else {
            continue;
        };
        if bin == apiserver_bin && args.contains(&port_flag) {
            apiserver = Some(pid);
        } else if bin == etcd_bin && args.iter().any(|a| Path::new(a) == etcd_data) {
            etcd = Some(pid);
        }
    }
    let mut missing = Vec::new();
    if apiserver.is_none() {
        missing.push(format!(
            "no {} process with {port_flag}",
            apiserver_bin.display()
        ));
    }
    if etcd.is_none() {
        missing.push(format!(
            "no {} process with data in {}",
            etcd_bin.display(),
            etcd_data.display()
        ));
    }
    let note = (!missing.is_empty()).then(|| missing.join("; "));
    (apiserver, etcd, note)
}

/// `VmRSS` (or another `/proc/PID/status` field) in bytes.
pub fn status_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/{pid}/status"))?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("malformed {line:?}"))?
        .parse()?;
    Ok(kib * 1024)
}
