//! `kubectl evictord`: declarative drains with live progress, a drain preview, and
//! EvictionRequests from the terminal. A thin shell: it reads and writes the cluster, asks
//! `evictord::plugin` what to show, and draws it. Installed with
//! `cargo install --path . --bin kubectl-evictord`; kubectl finds it on PATH.
//!
//! Exit codes: 0 done (drained, evicted, written, rolled); 1 the command failed (a rollout's
//! step failed; a drain or rollout refused before writing anything: `TooLarge`, or pods
//! `kubectl drain` would refuse); 2 set-up or usage (kubeconfig, CRDs missing, bad arguments, a
//! rollout resumed with other nodes or options); 3 timed out (the maintenance, request or
//! rollout goes on); 130 interrupted by Ctrl-C (nothing was undone).
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod connect;
mod follow;
mod follow_watch;
mod preview_read;
mod read;
mod requests;
mod rollout;
mod rollout_end;
mod rollout_state;
mod rollout_step;
mod rollout_view;
mod rollout_watch;
mod rollout_writes;
mod show;

use clap::Parser;

use cli::Cli;

fn main() {
    let cli = Cli::parse();
    if let cli::Command::Docs = cli.command {
        // Needs no cluster: printed before anything connects.
        print!(
            "{}",
            evictord::reference::flags_markdown(
                "kubectl evictord flags",
                &<Cli as clap::CommandFactory>::command()
            )
        );
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(commands::run(cli));
    std::process::exit(code);
}
