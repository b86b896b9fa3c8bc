//! A row of the goals table (issues 17, 35 and 41): the goal, what it is about, this run's figure,
//! the target and the [`Verdict`]. `goals.rs` and `pool_goals.rs` make the rows; `REPORT.md`
//! shows them first, `report.json` holds them as `goals`.

use serde::Serialize;

/// A goal's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Met,
    Missed,
    /// The part did not run, or not with what the goal needs.
    NotMeasured,
    /// A figure the issue asks to report, without a target.
    Reported,
}

impl Verdict {
    /// The verdict's cell in `REPORT.md`'s goals table.
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Met => "✅",
            Verdict::Missed => "❌ **MISS**",
            Verdict::NotMeasured => "⚠️ not measured",
            Verdict::Reported => "ℹ️ reported",
        }
    }

    pub fn of(met: bool) -> Self {
        if met { Verdict::Met } else { Verdict::Missed }
    }
}

/// One row of the goals table.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// Issue 17's goal number (`1` to `6`, `profile`), or the issue of the pool part's rows
    /// (`35`, `41`, `44`).
    pub goal: String,
    pub what: String,
    pub measured: String,
    pub target: String,
    pub verdict: Verdict,
}
