//! System benchmarks of evictord (issues 7 and 17), run by `make bench` (`cargo bench --bench
//! system`):
//!
//! 1. the webhook under load over TLS, over HTTP/1.1 and HTTP/2, against a limit server (the
//!    least a correct webhook must do: parse the body as JSON to echo `request.uid`) speaking
//!    the same protocol, in the same run ([`webhook`]); optionally against a baseline build of
//!    evictord too (`EVICTORD_BENCH_BASELINE`), and with a `perf` profile of evictord per body
//!    (`profile-<body>.txt` next to the report);
//! 2. memory: RSS of `evictord serve` idle and with N pods cached, fed from a real control
//!    plane and, beyond what it holds, from a replayed recording of its pods ([`memory`],
//!    [`replay`]);
//! 3. the eviction request controller on the real control plane: evictions/s, interceptor
//!    hand-off latency, EvictionRequest create latency with and without the webhook
//!    ([`controllers`]);
//! 4. a node maintenance drain: N nodes × P pods, one NodeMaintenance in stage Drain, time to
//!    `Drained=True`, evictions/s and evictord's peak RSS ([`drain`]);
//! 5. a node pool of every kind of workload drained side by side with the real `kubectl drain`,
//!    with and without evictord, and by a NodeMaintenance; and rolled node after node by the
//!    script users write today and N at a time by `kubectl evictord rollout`: availability
//!    sampled every 100 ms, PodDisruptionBudget floors, nodes unavailable at once, pods moved,
//!    time ([`pool`], issues 35 and 41).
//!
//! They run in the order 1, 3, 4, 5, 2 (memory last, see `main`). Writes
//! `$CARGO_TARGET_DIR/bench/report.json` (raw numbers) and `REPORT.md` (medians, and a table of
//! issues 17's and 35's goals with this run's figures, each marked met or missed). Parts 2
//! to 5 need kube-apiserver and etcd in `$KUBEBUILDER_ASSETS` (`make bench` sets it; part 5
//! also kube-controller-manager there, and `kubectl` in `$EVICTORD_TOOLS`); without
//! them they are skipped and the report says so. Every knob is an environment variable, see
//! [`settings`]. The binary re-executes itself as the limit server (`EVICTORD_BENCH_ROLE`).

#[path = "../../tests/data/fixture.rs"]
mod fixture;
#[path = "../../tests/support/mod.rs"]
mod support;

mod cluster;
mod controllers;
mod controllers_overhead;
mod drain;
mod evictord_process;
mod goal_row;
mod goals;
mod goals_controllers;
mod limit_server;
mod loadgen;
mod machine;
mod memory;
mod pool;
mod pool_attribution;
mod pool_clients;
mod pool_controllers;
mod pool_drive;
mod pool_endpoints;
mod pool_files;
mod pool_goals;
mod pool_mode;
mod pool_nodes;
mod pool_report;
mod pool_requests;
mod pool_results;
mod processes;
mod prom;
mod replay;
mod report;
mod report_controllers;
mod results;
mod settings;
mod svg;
mod webhook;
mod webhook_bodies;
mod webhook_profile;

use std::path::PathBuf;

use limit_server::ROLE_ENV;
use machine::{cpus, pin_self};

/// Where the report goes: `$CARGO_TARGET_DIR/bench`, else `target/bench`.
fn report_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench")
}

fn main() -> anyhow::Result<()> {
    if std::env::var(ROLE_ENV).as_deref() == Ok("limit-server") {
        let addr = std::env::var("LIMIT_ADDR")?.parse()?;
        let dir = PathBuf::from(std::env::var("LIMIT_CERT_DIR")?);
        return limit_server::run(addr, &dir);
    }
    // `cargo test --all-targets` (make test) runs bench targets too, without `--bench`: the
    // system benchmarks take minutes and load the machine, so they run only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("system benchmarks: skipped outside `cargo bench` (run `make bench`)");
        return Ok(());
    }
    cpus();
    let settings = settings::Settings::from_env()?;
    support::control_plane::set_hpa_sync_period(settings.pool.hpa_sync);
    let dir = report_dir();
    std::fs::create_dir_all(&dir)?;
    let scratch = tempfile::Builder::new()
        .prefix("evictord-bench-")
        .tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut report = results::Report::new(&settings);
    runtime.block_on(async {
        if settings.parts.contains("webhook") {
            // The control plane (for the EvictionRequest creates and the later parts) starts
            // before the pinning below, so that it is not confined to the load generator's CPU.
            if std::env::var_os("KUBEBUILDER_ASSETS").is_some() {
                support::cluster().await;
            }
            // The load generator on CPU 0, the servers on CPU 1 (see webhook::pinned).
            let pinned = cpus() >= 2 && pin_self("0");
            let t = std::time::Instant::now();
            let result = webhook::run(&settings, scratch.path(), &dir).await;
            report.meta.part_seconds.push(("webhook".into(), t.elapsed().as_secs_f64()));
            if pinned {
                pin_self(&format!("0-{}", cpus() - 1));
            }
            report.webhook = Some(result.map_err(|e| format!("{e:#}")));
            report.write(&dir)?;
        }
        let cluster_parts = ["memory", "controllers", "drain", "pool"]
            .iter()
            .any(|p| settings.parts.contains(*p));
        if cluster_parts {
            match std::env::var_os("KUBEBUILDER_ASSETS") {
                None => {
                    report.skipped.push(
                        "memory, controllers, drain and pool: KUBEBUILDER_ASSETS is not set (run `make bench`, which builds or finds kube-apiserver and etcd)".into(),
                    );
                }
                Some(_) => {
                    // Memory runs last: its 50 000 pods stay in the cluster, and the controllers
                    // and the drain are measured on a cluster that holds only their own objects
                    // (each part removes what it created, so memory's idle level is empty).
                    if settings.parts.contains("controllers") {
                        let t = std::time::Instant::now();
                        report.controllers =
                            Some(controllers::run(&settings).await.map_err(|e| format!("{e:#}")));
                        report.meta.part_seconds.push(("controllers".into(), t.elapsed().as_secs_f64()));
                        report.write(&dir)?;
                    }
                    if settings.parts.contains("drain") {
                        let t = std::time::Instant::now();
                        report.drain = Some(drain::run(&settings).await.map_err(|e| format!("{e:#}")));
                        report.meta.part_seconds.push(("drain".into(), t.elapsed().as_secs_f64()));
                        report.write(&dir)?;
                    }
                    if settings.parts.contains("pool") {
                        // After the drain and before memory: its kube-controller-manager stops
                        // at the end, so memory's 50 000 pods never reach its informers.
                        let t = std::time::Instant::now();
                        let result = pool::run(&settings, &dir, &mut |partial| {
                            report.pool = Some(Ok(partial.clone()));
                            report.write(&dir)
                        })
                        .await;
                        support::control_plane::stop_controller_manager();
                        // The pool's audit log of every request off again (memory's 50 000
                        // pods need none).
                        support::cluster().await.set_request_audit(false).await;
                        report.pool = Some(result.map_err(|e| format!("{e:#}")));
                        report.meta.part_seconds.push(("pool".into(), t.elapsed().as_secs_f64()));
                        report.write(&dir)?;
                    }
                    if settings.parts.contains("memory") {
                        let t = std::time::Instant::now();
                        report.memory = Some(memory::run(&settings, &dir).await.map_err(|e| format!("{e:#}")));
                        report.meta.part_seconds.push(("memory".into(), t.elapsed().as_secs_f64()));
                        report.write(&dir)?;
                    }
                }
            }
        }
        report.finish();
        report.write(&dir)?;
        anyhow::Ok(())
    })?;
    eprintln!("report: {}", dir.join("REPORT.md").display());
    Ok(())
}
