//! How long a Deployment's latest generation has been seen unobserved by the Deployment
//! controller: the clock of [`super::decide::unobserved`]'s bound. Counted from the first time an
//! interceptor saw that generation unobserved, not from the request's activation: a request that
//! waited for room in a surge longer than the bound must still tell the settler's own write (which
//! bumps the generation the moment it puts `spec.replicas` back) from a rollout. In memory: a
//! restarted evictord starts the clock again, which only waits longer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The clocks, by workload (`namespace/name`).
#[derive(Debug, Default)]
pub struct Unobserved {
    seen: Mutex<HashMap<String, (i64, Instant)>>,
}

impl Unobserved {
    /// How long generation `generation` of workload `key` has been seen unobserved (the
    /// controller observed `observed`); zero once it is observed, or when a newer generation is
    /// seen for the first time.
    pub fn seen_for(&self, key: &str, generation: i64, observed: i64) -> Duration {
        self.seen_at(key, generation, observed, Instant::now())
    }

    fn seen_at(&self, key: &str, generation: i64, observed: i64, now: Instant) -> Duration {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if observed >= generation {
            seen.remove(key);
            return Duration::ZERO;
        }
        let (g, since) = seen.entry(key.to_string()).or_insert((generation, now));
        if *g != generation {
            (*g, *since) = (generation, now);
        }
        now.saturating_duration_since(*since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_runs_from_first_sight_per_generation_until_observed() {
        let u = Unobserved::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(u.seen_at("ns/d", 2, 2, at(0)), Duration::ZERO, "observed");
        assert_eq!(
            u.seen_at("ns/d", 3, 2, at(10)),
            Duration::ZERO,
            "first sight"
        );
        assert_eq!(u.seen_at("ns/d", 3, 2, at(25)), Duration::from_secs(15));
        assert_eq!(
            u.seen_at("ns/other", 7, 6, at(25)),
            Duration::ZERO,
            "per workload"
        );
        assert_eq!(
            u.seen_at("ns/d", 4, 2, at(40)),
            Duration::ZERO,
            "a newer generation"
        );
        assert_eq!(u.seen_at("ns/d", 4, 2, at(41)), Duration::from_secs(1));
        assert_eq!(
            u.seen_at("ns/d", 4, 4, at(42)),
            Duration::ZERO,
            "observed: forgotten"
        );
        assert_eq!(
            u.seen_at("ns/d", 5, 4, at(90)),
            Duration::ZERO,
            "no stale clock"
        );
    }
}
