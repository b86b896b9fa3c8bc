//! Following a maintenance until it is drained: a frame computed from watch caches
//! ([`crate::follow_watch`]) and drawn once a second (elapsed times move), and at once when a
//! watch reports a change. Ctrl-C only stops watching.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use kube::Client;

use evictord::plugin::Result;
use evictord::plugin::progress::{Frame, FrameInput, frame, plain_lines};

use crate::follow_watch::Watches;
use crate::show::Display;

/// How often the frame is drawn without a change (its elapsed times move).
const TICK: Duration = Duration::from_secs(1);
/// How long a change waits for the ones that come with it before the frame is drawn.
const SETTLE: Duration = Duration::from_millis(100);

/// How following ended.
pub enum Outcome {
    /// `Drained=True`.
    Drained,
    /// The timeout passed; the last frame.
    TimedOut(Frame),
    /// Ctrl-C.
    Interrupted,
}

/// The maintenance's frame, from what the watches see.
async fn read_frame(
    watches: &mut Watches,
    name: &str,
    to_evict: &mut BTreeMap<String, BTreeSet<String>>,
) -> Result<Frame> {
    let s = watches.read(name).await?;
    Ok(frame(
        &FrameInput {
            maintenance: &s.maintenance,
            maintenances: &s.maintenances,
            nodes: &s.nodes,
            pods: &s.pods,
            requests: &s.requests,
            budgets: &s.budgets,
            namespaces: &s.namespaces,
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
    let mut watches = tokio::select! {
        _ = &mut interrupted => {
            display.finish("");
            return Ok(Outcome::Interrupted);
        }
        w = Watches::start(client) => w?,
    };
    loop {
        let f = read_frame(&mut watches, name, &mut to_evict).await?;
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
            () = watches.changed() => tokio::time::sleep(SETTLE).await,
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
