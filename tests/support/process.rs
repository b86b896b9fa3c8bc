//! Commands the tests run in the background (`kubectl drain`, `kubectl evictord drain`).

use std::process::Child;
use std::time::Duration;

/// Waits for `child` to exit within `within` and returns its exit code; on a timeout (or a
/// signal) kills it and fails with its output (`log`).
pub async fn wait_exit(child: &mut Child, log: &std::path::Path, within: Duration) -> i32 {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return status
                .code()
                .unwrap_or_else(|| panic!("the command was killed:\n{text}"));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the command did not exit within {within:?}:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
