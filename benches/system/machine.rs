//! The machine the benchmarks run on: its CPUs (read once, before any pinning) and pinning this
//! process to some of them (`taskset`).

use std::process::Command;
use std::sync::OnceLock;

static CPUS: OnceLock<usize> = OnceLock::new();

/// CPUs of the machine (read before any pinning).
pub fn cpus() -> usize {
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Pins every thread of this process to `cpus` (a taskset list such as `0` or `0-1`); best
/// effort, returns whether it worked.
pub fn pin_self(cpus: &str) -> bool {
    std::path::Path::new("/usr/bin/taskset").exists()
        && Command::new("/usr/bin/taskset")
            .args(["-a", "-p", "-c", cpus, &std::process::id().to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}
