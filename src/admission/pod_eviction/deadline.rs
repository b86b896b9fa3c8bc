//! How long the bridge may take before it answers (pure).
//!
//! kube-apiserver waits for the bridge at most the webhook's `timeoutSeconds` (3 s as evictord
//! registers it) and then, the bridge being `failurePolicy: Ignore`, lets the Eviction API evict
//! the pod as if evictord were not installed: with interceptors declared, the pod leaves without
//! them, guarded only by its PodDisruptionBudget. The bridge's own write (the EvictionRequest,
//! applied through kube-apiserver, which calls evictord's EvictionRequest webhook in turn) is
//! what can take that long: on a kube-apiserver busy with every client's re-list just after a
//! restart it took over 3 s in the soak. So the bridge answers by [`answer_budget`] of the
//! timeout kube-apiserver states in the call's URL (`?timeout=3s`, see [`caller_timeout`]) and
//! lets a write still in flight finish in the background. Its answer is the decided 429
//! "Eviction triggered", which drainers retry; the next call finds the request written, or
//! writes it again if the late write failed.

use std::time::Duration;

use jiff::SignedDuration;

/// The timeout kube-apiserver states in the query of a webhook call: the parameter `timeout`,
/// a Go duration (`3s`, `1m0s`; kube-apiserver rounds it up to whole seconds). `None` when
/// absent, unreadable, zero or negative.
pub fn caller_timeout(query: Option<&str>) -> Option<Duration> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))?;
    let parsed: SignedDuration = value.parse().ok()?;
    Duration::try_from(parsed).ok().filter(|d| !d.is_zero())
}

/// How long the bridge may take to answer a call that kube-apiserver abandons after `timeout`:
/// two thirds of it (2 s of the registered 3 s), leaving the rest for the answer's way back and
/// for a kube-apiserver slow to read it.
pub fn answer_budget(timeout: Duration) -> Duration {
    timeout * 2 / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_timeout_reads_the_query() {
        let rows: &[(Option<&str>, Option<Duration>)] = &[
            // kube-apiserver's call with the registered 3 s.
            (Some("timeout=3s"), Some(Duration::from_secs(3))),
            // Go's form of a minute (a request deadline shorter than the webhook's).
            (Some("timeout=1m0s"), Some(Duration::from_secs(60))),
            (Some("timeout=1.5s"), Some(Duration::from_millis(1500))),
            (Some("timeout=500ms"), Some(Duration::from_millis(500))),
            (Some("a=b&timeout=10s"), Some(Duration::from_secs(10))),
            (Some("timeout=10s&a=b"), Some(Duration::from_secs(10))),
            // No query, another parameter, or nothing usable.
            (None, None),
            (Some(""), None),
            (Some("dryRun=All"), None),
            (Some("xtimeout=3s"), None),
            (Some("timeout="), None),
            (Some("timeout=soon"), None),
            (Some("timeout=0s"), None),
            (Some("timeout=-3s"), None),
        ];
        for (query, want) in rows {
            assert_eq!(caller_timeout(*query), *want, "{query:?}");
        }
    }

    #[test]
    fn answer_budget_is_two_thirds_of_the_timeout() {
        let rows = [
            (3_000, 2_000),
            (1_500, 1_000),
            (6_000, 4_000),
            (30_000, 20_000),
        ];
        for (timeout, want) in rows {
            assert_eq!(
                answer_budget(Duration::from_millis(timeout)),
                Duration::from_millis(want),
                "{timeout} ms"
            );
        }
    }
}
