//! A complete interceptor on the SDK: `log.example.com` logs each pod it is asked about, reports
//! progress for `work` (as if draining connections), then completes. Run it where evictord is
//! installed: `cargo run -p evictord-interceptor --example surge_log`. It builds against the SDK
//! crate alone (`evictord-interceptor`), without the webhook server.

use std::time::Duration;

use evictord_api::EvictionRequest;
use evictord_interceptor::{BoxError, Interceptor, Progress, Runner, Settings};
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
        let Some(name) = pod.and_then(|p| p.metadata.name.clone()) else {
            return Ok(Progress::complete("pod gone"));
        };
        let entry = req.status.as_ref().and_then(|s| s.interceptor(self.name()));
        // State lives in the request: the runner wrote startTime on the first report.
        let Some(started) = entry.and_then(|e| e.start_time.clone()) else {
            println!("starting on pod {name}");
            return Ok(Progress::in_progress(format!(
                "draining connections of {name}"
            )));
        };
        let done = started.0 + self.work;
        if jiff::Timestamp::now() < done {
            let message = format!("draining connections of {name}");
            return Ok(Progress::InProgress {
                message,
                expected_finish: Some(done),
            });
        }
        println!("done with pod {name}");
        Ok(Progress::complete(format!("connections of {name} drained")))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The webhook's defaults (--min-heartbeat-interval 60s, --interceptor-deadline 20m).
    let settings = Settings::default();
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
