//! The `evictord` binary: wiring only.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::process::ExitCode;

use clap::Parser;
use evictord::cli::{Cli, Command, DocsPage};

/// mimalloc instead of glibc's malloc: a review allocates and frees many small blocks (the
/// decoded request, its strings, the answer) on whichever worker thread runs it, and glibc's
/// malloc and free were 8-10% of the webhook's CPU. The webhook is 8-16% faster with it, at the
/// same RSS (`benches/HISTORY.md`, the run of 2026-11-24 13:50 UTC; the features chosen in
/// Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("evictord: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Crds => {
            print!("{}", evictord::api::crds_yaml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Docs { page } => {
            print!(
                "{}",
                match page {
                    DocsPage::Flags => evictord::reference::flags_markdown(
                        "evictord flags",
                        &<Cli as clap::CommandFactory>::command()
                    ),
                    DocsPage::Crds =>
                        evictord::reference::crds_markdown(&evictord::api::all_crds()),
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::WebhookConfig(args) => {
            let ca = std::fs::read(&args.ca_file)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", args.ca_file.display()))?;
            print!(
                "{}",
                evictord::admission::registration::yaml(
                    &args.name,
                    &args.url_base,
                    &ca,
                    args.match_conditions
                )?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Review(args) => {
            let input = match &args.file {
                Some(path) => std::fs::read(path)
                    .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?,
                None => {
                    let mut buf = Vec::new();
                    std::io::stdin().read_to_end(&mut buf)?;
                    buf
                }
            };
            let objects = match &args.objects {
                Some(path) => Some(
                    std::fs::read(path)
                        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?,
                ),
                None => None,
            };
            let now = args.now.unwrap_or_else(jiff::Timestamp::now);
            let response = evictord::admission::offline::review(
                &input,
                objects.as_deref(),
                now,
                &args.rules.settings(),
            )?;
            let text = serde_json::to_string_pretty(&response)?;
            // A closed pipe (`evictord review ... | head`) is not an error worth a panic.
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{text}") {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve(args) => {
            let _telemetry = evictord::telemetry::init(args.log_format)?;
            rustls::crypto::ring::default_provider()
                .install_default()
                .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(evictord::serve::run(*args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::NodeAgent(args) => {
            let _telemetry = evictord::telemetry::init(args.log_format)?;
            rustls::crypto::ring::default_provider()
                .install_default()
                .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(evictord::node_agent::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
