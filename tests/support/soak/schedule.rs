//! The soak's fault schedule: a pure function of a seed. The same seed gives the same list of
//! faults, each with its delay after the previous one and its own parameters, so that a failed
//! run is reproduced by `SOAK_SEED=<seed> make soak`.

use std::fmt;
use std::time::Duration;

/// A small, well-known generator (SplitMix64, as `java.util.SplittableRandom` seeds itself):
/// enough for a schedule, and the same numbers on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// One fault the soak injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The replica holding the lease SIGKILLed; a new replica started `restart_after` later.
    KillLeader { restart_after: Duration },
    /// A replica not holding the lease SIGKILLed; a new one started `restart_after` later.
    KillStandby { restart_after: Duration },
    /// kube-apiserver stopped (SIGTERM; SIGKILL after `kill_after` if it still runs: it holds
    /// its watches open up to a minute) and started again: every watch connection is cut. A
    /// short `kill_after` is a crash, a long one a graceful restart with its long silence.
    RestartApiserver { kill_after: Duration },
    /// etcd stopped (SIGSTOP) for this long, then resumed (SIGCONT).
    PauseEtcd { for_: Duration },
    /// The node agent of a maintained node (`pick` modulo their number) SIGKILLed, a new one
    /// started `restart_after` later, as its DaemonSet would.
    KillNodeAgent {
        pick: usize,
        restart_after: Duration,
    },
    /// A rolling replacement of both replicas by the build of the earlier commit, its CRDs
    /// applied first (a downgrade).
    Downgrade,
    /// A rolling replacement of both replicas by this build, its CRDs applied first (an upgrade).
    Upgrade,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::KillLeader { restart_after } => {
                write!(f, "leader SIGKILLed, restarted after {restart_after:?}")
            }
            Fault::KillStandby { restart_after } => {
                write!(f, "standby SIGKILLed, restarted after {restart_after:?}")
            }
            Fault::RestartApiserver { kill_after } => write!(
                f,
                "kube-apiserver restarted (watches cut; SIGKILL after {kill_after:?})"
            ),
            Fault::PauseEtcd { for_ } => write!(f, "etcd paused for {for_:?}"),
            Fault::KillNodeAgent {
                pick,
                restart_after,
            } => write!(
                f,
                "node agent #{pick} SIGKILLed, restarted after {restart_after:?}"
            ),
            Fault::Downgrade => write!(f, "evictord rolled to the earlier build (downgrade)"),
            Fault::Upgrade => write!(f, "evictord rolled back to this build (upgrade)"),
        }
    }
}

/// A fault and the pause before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub after: Duration,
    pub fault: Fault,
}

/// The schedule of `count` faults (at least 4) of `seed`, `gap` apart at random (whole seconds
/// in the range): process faults at random, and a downgrade and the upgrade back at random
/// places, the pair `swaps` times (0 when no earlier build is given), never overlapping, so
/// that the run ends on this build.
pub fn plan(seed: u64, count: usize, gap: (u64, u64), swaps: usize) -> Vec<Planned> {
    let mut rng = SplitMix64::new(seed);
    let count = count.max(4);
    let mut faults: Vec<Fault> = (0..count)
        .map(|_| match rng.between(0, 10) {
            0..=2 => Fault::KillLeader {
                restart_after: Duration::from_secs(rng.between(1, 6)),
            },
            3..=4 => Fault::KillStandby {
                restart_after: Duration::from_secs(rng.between(1, 6)),
            },
            5..=6 => Fault::RestartApiserver {
                kill_after: Duration::from_secs(rng.between(1, 30)),
            },
            10 => Fault::KillNodeAgent {
                pick: rng.between(0, 99) as usize,
                restart_after: Duration::from_secs(rng.between(1, 6)),
            },
            _ => Fault::PauseEtcd {
                for_: Duration::from_secs(rng.between(2, 6)),
            },
        })
        .collect();
    // Each pair takes a slot in its own stretch of the schedule, downgrade before upgrade.
    let stretch = count / swaps.max(1);
    for s in 0..swaps {
        if stretch < 3 {
            break;
        }
        let base = s * stretch;
        let down = base + rng.between(0, (stretch / 2 - 1) as u64) as usize;
        let up = base + stretch / 2 + rng.between(0, (stretch - stretch / 2 - 1) as u64) as usize;
        faults[down] = Fault::Downgrade;
        faults[up] = Fault::Upgrade;
    }
    faults
        .into_iter()
        .map(|fault| Planned {
            after: Duration::from_secs(rng.between(gap.0, gap.1)),
            fault,
        })
        .collect()
}
