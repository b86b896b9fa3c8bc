//! A complete EvictionRequest interceptor on the SDK (`evictord::interceptor`): `log.example.com`
//! logs each pod it is asked about, reports progress for a few seconds (as if it were draining
//! connections), then completes so that the next interceptor takes over.
//!
//! Run it against a cluster with evictord installed (heartbeat settings as the webhook's flags):
//! `cargo run --example surge_log -- 60s 20m`; annotate pods with
//! `evictord.dev/eviction-interceptors: log.example.com`.

use std::time::Duration;

use evictord::api::EvictionRequest;
use evictord::interceptor::{BoxError, Interceptor, Progress, Runner, Settings};
use k8s_openapi::api::core::v1::Pod;

/// Works on each pod for `work`, then completes.
pub struct LogInterceptor {
    pub work: Duration,
}

impl Interceptor for LogInterceptor {
    fn name(&self) -> &str {
        "log.example.com"
    }

    async fn progress(
        &self,
        req: &EvictionRequest,
        pod: Option<&Pod>,
    ) -> Result<Progress, BoxError> {
        let Some(pod) = pod else {
            return Ok(Progress::complete("pod gone"));
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let entry = req.status.as_ref().and_then(|s| s.interceptor(self.name()));
        let Some(started) = entry.and_then(|e| e.start_time.clone()) else {
            println!("starting on pod {name}");
            return Ok(Progress::in_progress(format!(
                "draining connections of {name}"
            )));
        };
        let done = started.0 + self.work;
        if jiff::Timestamp::now() < done {
            return Ok(Progress::InProgress {
                message: format!("draining connections of {name}"),
                expected_finish: Some(done),
            });
        }
        println!("done with pod {name}");
        Ok(Progress::complete(format!("connections of {name} drained")))
    }
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: &str| std::env::args().nth(i).unwrap_or(default.into());
    let settings = Settings {
        min_heartbeat_interval: humantime::parse_duration(&arg(1, "60s"))?,
        default_deadline: humantime::parse_duration(&arg(2, "20m"))?,
        ..Settings::default()
    };
    let client = kube::Client::try_default().await?;
    let interceptor = LogInterceptor {
        work: Duration::from_secs(5),
    };
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    Runner::new(client, settings).run(interceptor, stop).await;
    Ok(())
}
