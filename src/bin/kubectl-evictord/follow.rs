//! Following a maintenance until it is drained: read, compute a frame, draw, once a second.
//! Ctrl-C only stops watching.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use kube::Client;

use evictord::plugin::Result;
use evictord::plugin::progress::{Frame, FrameInput, frame, plain_lines};

use crate::read;
use crate::show::Display;

/// How often the cluster is read.
const TICK: Duration = Duration::from_secs(1);

/// How following ended.
pub enum Outcome {
    /// `Drained=True`.
    Drained,
    /// The timeout passed; the last frame.
    TimedOut(Frame),
    /// Ctrl-C.
    Interrupted,
}

/// Reads the maintenance and what its frame needs.
async fn read_frame(
    client: &Client,
    name: &str,
    to_evict: &mut BTreeMap<String, BTreeSet<String>>,
) -> Result<Frame> {
    let nm = read::maintenance(client, name).await?;
    let maintenances = read::maintenances(client).await?;
    let nodes = read::all_nodes(client).await?;
    let selected = evictord::controller::node_maintenance::gather::selected_nodes(&nm, &nodes);
    let pods = read::pods_on(client, &selected).await?;
    let requests = read::requests(client).await?;
    let budgets = read::budgets(client, &pods).await?;
    let namespaces = read::namespace_labels(client, &maintenances).await?;
    Ok(frame(
        &FrameInput {
            maintenance: &nm,
            maintenances: &maintenances,
            nodes: &nodes,
            pods: &pods,
            requests: &requests,
            budgets: &budgets,
            namespaces: &namespaces,
            now: Timestamp::now(),
        },
        to_evict,
    ))
}

/// Shows the maintenance's progress until it is drained, `timeout` passes or Ctrl-C.
pub async fn follow(
    client: &Client,
    name: &str,
    timeout: Option<Duration>,
    mut to_evict: BTreeMap<String, BTreeSet<String>>,
) -> Result<Outcome> {
    let mut display = Display::new();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let f = read_frame(client, name, &mut to_evict).await?;
        display.update(&f);
        if f.drained {
            let evicted: u64 = f.nodes.iter().map(|n| n.evicted).sum();
            display.finish(&format!(
                "maintenance {name} is Drained ({evicted} pods evicted); when the work is done: kubectl evictord complete {name}"
            ));
            return Ok(Outcome::Drained);
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            display.finish(&format!(
                "timed out; maintenance {name} is not drained yet:"
            ));
            return Ok(Outcome::TimedOut(f));
        }
        tokio::select! {
            _ = &mut interrupted => {
                display.finish("");
                return Ok(Outcome::Interrupted);
            }
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// The words after Ctrl-C or a timeout: nothing was undone, and how to go on.
pub fn how_to_go_on(name: &str) -> String {
    format!(
        "maintenance {name} keeps draining (nothing was undone).\n  resume watching: kubectl evictord watch {name}\n  undo (uncordon, withdraw requests): kubectl evictord complete {name}"
    )
}

/// The last frame's lines, for the timeout summary.
pub fn summary(f: &Frame) -> Vec<String> {
    plain_lines(f)
        .into_iter()
        .map(|l| format!("  {}", l.text))
        .collect()
}
