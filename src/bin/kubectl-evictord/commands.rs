//! The commands: each reads, asks `evictord::plugin`, writes what it must and prints.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use evictord::api::{NodeMaintenance, Stage};
use evictord::drain::admission::{MaxUnavailable, QueueReason};
use evictord::plugin::autoscalers::name_autoscalers;
use evictord::plugin::errors::{Access, EXIT_INTERRUPTED, EXIT_TIMEOUT, api_error};
use evictord::plugin::maintenance::{
    DrainDeadline, maintenance_for, maintenance_name, with_deadline,
};
use evictord::plugin::report::{plan_report, plan_text};
use evictord::plugin::rollout::batches::{rollout_preview, rollout_text, too_large};
use evictord::plugin::rollout::record::max_unavailable_value;
use evictord::plugin::rollout::summary::command_line;
use evictord::plugin::safety::Overrides;
use evictord::plugin::status::{
    MAINTENANCE_HEADER, REQUEST_HEADER, maintenance_rows, open_request_rows, table,
};
use evictord::plugin::{Error, Result};

use crate::cli::{Cli, Command, Nodes, Output};
use crate::connect::connect;
use crate::follow::{Outcome, follow, how_to_go_on, summary};
use crate::preview_read::{preview_of, refuse_unsafe};
use crate::rollout::rollout;
use crate::rollout_state::RolloutArgs;
use crate::show::print_object;
use crate::{read, requests};

/// Runs the command; returns the exit code.
pub async fn run(cli: Cli) -> i32 {
    match dispatch(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

async fn dispatch(cli: Cli) -> Result<i32> {
    let output = cli.output;
    if output.is_some() && !cli.command.prints_objects() {
        return Err(Error::Usage(
            "-o json|yaml applies to plan, status, evict (without --wait), drain --dry-run and rollout (a summary at the end); the others print progress".into(),
        ));
    }
    let (client, namespace) = connect(&cli.conn).await?;
    read::ensure_crds(&client).await?;
    match cli.command {
        Command::Drain {
            nodes,
            deadline,
            safety,
            reason,
            timeout,
            dry_run,
            name,
        } => {
            let d = DrainArgs {
                reason,
                timeout,
                dry_run,
                name,
                deadline: deadline.resolve()?,
                overrides: safety.overrides(),
            };
            drain(&client, &nodes, d, output).await
        }
        Command::Plan {
            nodes,
            deadline,
            max_unavailable,
        } => {
            let deadline = deadline.resolve()?;
            plan(
                &client,
                &nodes,
                max_unavailable.as_deref(),
                deadline,
                output,
            )
            .await
        }
        Command::Rollout {
            name,
            nodes,
            selector,
            max_unavailable,
            exec,
            reboot,
            cordon_first,
            timeout,
            reason,
            deadline,
            safety,
        } => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            let a = RolloutArgs {
                name,
                nodes,
                selector,
                max_unavailable,
                exec,
                reboot,
                cordon_first,
                timeout,
                reason,
                deadline: deadline.resolve()?,
                overrides: safety.overrides(),
                command: command_line(&args),
            };
            rollout(&client, a, output).await
        }
        Command::Watch { name, timeout } => {
            read::maintenance(&client, &name).await?;
            watch(&client, &name, timeout, BTreeMap::new()).await
        }
        Command::Complete { name } => complete(&client, &name).await,
        Command::Evict {
            pod,
            requester,
            wait,
            timeout,
        } => requests::evict(&client, &namespace, &pod, &requester, wait, timeout, output).await,
        Command::Cancel { pod, requester } => {
            requests::cancel(&client, &namespace, &pod, &requester).await
        }
        Command::Status => status(&client, output).await,
        // main prints it without connecting.
        Command::Docs => Ok(0),
    }
}

async fn resolve(client: &Client, nodes: &Nodes) -> Result<Vec<String>> {
    match (&nodes.selector, nodes.nodes.is_empty()) {
        (Some(_), false) => Err(Error::Usage(
            "name nodes or give a selector (-l), not both".into(),
        )),
        (Some(s), true) => read::selected_nodes(client, s).await,
        (None, false) => read::named_nodes(client, &nodes.nodes).await,
        (None, true) => Err(Error::Usage(
            "which nodes? name them or give a selector (-l)".into(),
        )),
    }
}

async fn plan(
    client: &Client,
    nodes: &Nodes,
    max_unavailable: Option<&str>,
    deadline: Option<DrainDeadline>,
    output: Option<Output>,
) -> Result<i32> {
    let max = max_unavailable
        .map(|m| {
            let v = max_unavailable_value(m);
            MaxUnavailable::parse(Some(&v)).map(|_| v).map_err(|e| {
                Error::Usage(e.replacen("spec.maxUnavailable", "--max-unavailable", 1))
            })
        })
        .transpose()?;
    let selected = resolve(client, nodes).await?;
    let planned = with_deadline(
        maintenance_for(
            "(preview)",
            &selected,
            &nodes.priority_steps,
            None,
            Stage::Drain,
        ),
        deadline,
    );
    let (mut p, ctx) = preview_of(client, &planned, &selected).await?;
    if let Some(registered) = read::registered_interceptors(client).await {
        p.mark_unregistered(|name| {
            evictord::api::Registration::of(name, Some(registered.contains(name)))
        });
    }
    let budgets = read::budgets(client, &ctx.pods).await?;
    let replicasets = read::replicaset_owners(client, &ctx.pods).await?;
    let autoscalers = read::autoscalers(client, &ctx.pods).await?;
    name_autoscalers(&mut p, &ctx.pods, &replicasets, &autoscalers);
    let mut report = plan_report(
        p,
        &selected,
        &ctx.pods,
        &budgets,
        &ctx.maintenances,
        &ctx.nodes,
        deadline,
    );
    if let Some(max) = &max {
        let maintenance_budgets = read::maintenance_budgets(client).await?;
        let mut sorted = selected.clone();
        sorted.sort();
        report.rollout = Some(rollout_preview(
            &ctx.nodes,
            &maintenance_budgets,
            &ctx.maintenances,
            &sorted,
            max,
            Timestamp::now(),
        ));
    }
    match output {
        Some(o) => print_object(&report, o)?,
        None => {
            print!("{}", plan_text(&report));
            if let Some(r) = &report.rollout {
                print!("{}", rollout_text(r, selected.len()));
            }
        }
    }
    Ok(0)
}

/// `drain`'s options besides its nodes.
struct DrainArgs {
    reason: Option<String>,
    timeout: Option<Duration>,
    dry_run: bool,
    name: Option<String>,
    deadline: Option<DrainDeadline>,
    overrides: Overrides,
}

async fn drain(
    client: &Client,
    nodes: &Nodes,
    d: DrainArgs,
    output: Option<Output>,
) -> Result<i32> {
    let DrainArgs {
        reason,
        timeout,
        dry_run,
        name,
        deadline,
        overrides,
    } = d;
    let selected = resolve(client, nodes).await?;
    let name = name.unwrap_or_else(|| maintenance_name(&selected, Timestamp::now()));
    let nm = with_deadline(
        maintenance_for(
            &name,
            &selected,
            &nodes.priority_steps,
            reason.as_deref(),
            Stage::Cordon,
        ),
        deadline,
    );
    let (p, ctx) = preview_of(client, &nm, &selected).await?;
    let maintenance_budgets = read::maintenance_budgets(client).await?;
    if let Some(q) = too_large(
        &ctx.nodes,
        &maintenance_budgets,
        &ctx.maintenances,
        &nm,
        Timestamp::now(),
    ) && let QueueReason::TooLarge { selects, allowed } = q.reason
    {
        return Err(Error::TooLarge {
            budget: q.budget,
            allowed,
            selects,
            nodes: match &nodes.selector {
                Some(s) => format!("-l {s}"),
                None => selected.join(" "),
            },
        });
    }
    // kubectl drain's checks, before anything is written (SPEC 6.2); a dry run says it too.
    refuse_unsafe(&p, deadline, overrides)?;
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let access = || Access::new("create", "nodemaintenances.evictord.dev").named(&name);
    if dry_run {
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let mut checked = api
            .create(&params, &nm)
            .await
            .map_err(|e| api_error(access(), e))?;
        checked.metadata.managed_fields = None;
        print_object(&checked, output.unwrap_or(Output::Yaml))?;
        println!(
            "# dry run: nothing written; {} pods would be evicted (see kubectl evictord plan)",
            p.to_evict().values().map(|s| s.len()).sum::<usize>()
        );
        return Ok(0);
    }
    api.create(&PostParams::default(), &nm)
        .await
        .map_err(|e| api_error(access(), e))?;
    println!(
        "maintenance {name} created for {} (stage Cordon)",
        selected.join(", ")
    );
    set_stage(client, &name, Stage::Drain).await?;
    println!("maintenance {name} moved to Drain");
    watch(client, &name, timeout, p.to_evict()).await
}

async fn set_stage(client: &Client, name: &str, stage: Stage) -> Result<()> {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stage": stage}})),
        )
        .await
        .map_err(|e| {
            api_error(
                Access::new("patch", "nodemaintenances.evictord.dev").named(name),
                e,
            )
        })?;
    Ok(())
}

async fn watch(
    client: &Client,
    name: &str,
    timeout: Option<Duration>,
    to_evict: BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Result<i32> {
    match follow(client, name, timeout, to_evict).await? {
        Outcome::Drained => Ok(0),
        Outcome::TimedOut(f) => {
            for line in summary(&f) {
                println!("{line}");
            }
            println!("{}", how_to_go_on(name));
            Ok(EXIT_TIMEOUT)
        }
        Outcome::Interrupted => {
            println!("stopped watching; {}", how_to_go_on(name));
            Ok(EXIT_INTERRUPTED)
        }
    }
}

async fn complete(client: &Client, name: &str) -> Result<i32> {
    set_stage(client, name, Stage::Complete).await?;
    println!(
        "maintenance {name} moved to Complete: evictord uncordons its nodes and withdraws its eviction requests"
    );
    Ok(0)
}

async fn status(client: &Client, output: Option<Output>) -> Result<i32> {
    let maintenances = read::maintenances(client).await?;
    let requests: Vec<_> = read::requests(client)
        .await?
        .into_iter()
        .filter(|r| !r.is_terminal())
        .collect();
    if let Some(o) = output {
        let mut items: Vec<serde_json::Value> = Vec::new();
        for m in &maintenances {
            items.push(serde_json::to_value(m).unwrap_or_default());
        }
        for r in &requests {
            items.push(serde_json::to_value(r).unwrap_or_default());
        }
        print_object(
            &json!({"apiVersion": "v1", "kind": "List", "items": items}),
            o,
        )?;
        return Ok(0);
    }
    println!("NodeMaintenances:");
    let rows = maintenance_rows(&maintenances);
    if rows.is_empty() {
        println!("  none");
    } else {
        println!("{}", table(&MAINTENANCE_HEADER, &rows));
    }
    println!("\nOpen EvictionRequests:");
    let rows = open_request_rows(&requests, Timestamp::now());
    if rows.is_empty() {
        println!("  none");
    } else {
        println!("{}", table(&REQUEST_HEADER, &rows));
    }
    Ok(0)
}
