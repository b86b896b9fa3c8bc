//! The pool part's modes (issues 35 and 41): which pool, what drains it, with or without
//! evictord ([`Mode`], as written in `EVICTORD_BENCH_POOL_MODES`), and the modes `make bench`
//! runs ([`DEFAULT_MODES`]).

use std::str::FromStr;

use serde::Serialize;

use crate::support::pool::workloads::{self, Variant};

/// The modes `make bench` runs: the finishable pool first (kubectl drain alone finishes there:
/// the times to compare), then the full one. Issue 41's rolls run on the finishable pool only,
/// the three its goals need: on the full pool the script alone never finishes (each 1-replica
/// budget holds its `kubectl drain` until the call's timeout), so there is no time to compare
/// with, and what a rollout's maintenances do to availability there `full/evictord+nodemaintenance`
/// already measures (the same drain, every node at once). The
/// script with evictord (`finishable/evictord+script-each`) and the full pool's rolls run when
/// named in `EVICTORD_BENCH_POOL_MODES`.
pub const DEFAULT_MODES: &[&str] = &[
    "finishable/kubectl-each",
    "finishable/kubectl-all",
    "finishable/evictord+kubectl-each",
    "finishable/evictord+kubectl-all",
    "finishable/evictord+nodemaintenance",
    "finishable/script-each",
    "finishable/evictord+rollout",
    "finishable/evictord+rollout-cordon-first",
    "full/kubectl-each",
    "full/kubectl-all",
    "full/evictord+kubectl-each",
    "full/evictord+kubectl-all",
    "full/evictord+nodemaintenance",
];

/// What drains the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Drainer {
    KubectlEach,
    KubectlAll,
    NodeMaintenance,
    /// The script users write today (issue 41): node after node, `kubectl drain`, the per-node
    /// step, `kubectl uncordon`.
    ScriptEach,
    /// `kubectl evictord rollout --max-unavailable N --exec STEP` (issue 41).
    Rollout,
    /// The same with `--cordon-first`.
    RolloutCordonFirst,
}

impl Drainer {
    const IDS: [(Drainer, &'static str); 6] = [
        (Drainer::KubectlEach, "kubectl-each"),
        (Drainer::KubectlAll, "kubectl-all"),
        (Drainer::NodeMaintenance, "nodemaintenance"),
        (Drainer::ScriptEach, "script-each"),
        (Drainer::Rollout, "rollout"),
        (Drainer::RolloutCordonFirst, "rollout-cordon-first"),
    ];

    /// As written in a mode's id.
    pub fn id(self) -> &'static str {
        Self::IDS
            .iter()
            .find(|(d, _)| *d == self)
            .map_or("", |(_, id)| id)
    }

    /// The drainers that run the per-node step and give each node back (issue 41).
    pub fn rolls(self) -> bool {
        matches!(
            self,
            Drainer::ScriptEach | Drainer::Rollout | Drainer::RolloutCordonFirst
        )
    }

    /// `kubectl evictord rollout`, with or without `--cordon-first`.
    pub fn is_rollout(self) -> bool {
        matches!(self, Drainer::Rollout | Drainer::RolloutCordonFirst)
    }

    /// Runs through evictord's NodeMaintenances (only with `evictord+`).
    pub fn needs_evictord(self) -> bool {
        matches!(self, Drainer::NodeMaintenance) || self.is_rollout()
    }
}

/// One mode of the part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mode {
    pub variant: Variant,
    pub drainer: Drainer,
    pub evictord: bool,
    /// `+endpoints` (issue 43): evictord also serves `endpoints.evictord.dev`, so the pods of the
    /// rows declaring it leave their Services' ready endpoints before they stop.
    pub endpoints: bool,
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (pool, drainer) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: want POOL/DRAINER"))?;
        let variant = match pool {
            "full" => Variant::Full,
            "finishable" => Variant::Finishable,
            other => return Err(format!("{other:?}: the pool is full or finishable")),
        };
        let (drainer, endpoints) = match drainer.strip_suffix("+endpoints") {
            Some(d) => (d, true),
            None => (drainer, false),
        };
        let (evictord, drainer) = match drainer.strip_prefix("evictord+") {
            Some(d) => (true, d),
            None => (false, drainer),
        };
        let drainer = match Drainer::IDS.iter().find(|(_, id)| *id == drainer) {
            Some((d, _)) if evictord || !d.needs_evictord() => *d,
            _ => {
                return Err(format!(
                    "{drainer:?}: not a drainer ({}; nodemaintenance and the rollouts need evictord+)",
                    Drainer::IDS.map(|(_, id)| id).join(", ")
                ));
            }
        };
        if endpoints && !evictord {
            return Err(format!(
                "{s:?}: +endpoints needs evictord+ (the interceptor is evictord's)"
            ));
        }
        Ok(Mode {
            variant,
            drainer,
            evictord,
            endpoints,
        })
    }
}

impl Mode {
    /// As written in `EVICTORD_BENCH_POOL_MODES`.
    pub fn id(&self) -> String {
        format!(
            "{}/{}{}{}",
            self.variant.label(),
            if self.evictord { "evictord+" } else { "" },
            self.drainer.id(),
            if self.endpoints { "+endpoints" } else { "" }
        )
    }

    /// The interceptors the mode's pods may declare: `served`, and `endpoints.evictord.dev` in
    /// a `+endpoints` mode.
    pub fn served(&self, served: &[String]) -> Vec<String> {
        let mut out = served.to_vec();
        if self.endpoints && !out.iter().any(|s| s == workloads::ENDPOINTS) {
            out.push(workloads::ENDPOINTS.to_string());
        }
        out
    }

    /// For file names.
    pub fn slug(&self) -> String {
        self.id().replace(['/', '+'], "-")
    }
}
