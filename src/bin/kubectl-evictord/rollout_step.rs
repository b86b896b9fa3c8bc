//! The per-node step of a rollout as a process: `sh -c CMD` with `EVICTORD_NODE` set, in a
//! process group of its own (so that Ctrl-C typed in the terminal reaches the plugin, which lets
//! running steps end, and not the steps), its output sent line by line, its end reported. The
//! plugin stops a step only on a second Ctrl-C: SIGTERM to its whole process group.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};

use evictord::plugin::rollout::step::Exit;

/// How long the output of an ended step is still read (from what it left in the background).
const OUTPUT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What a step process reports.
pub enum StepEvent {
    /// A line of its output.
    Output {
        /// The node.
        node: String,
        /// The line.
        line: String,
    },
    /// It ended.
    Exited {
        /// The node.
        node: String,
        /// How.
        exit: Exit,
    },
}

/// A running step: its process ID (and group), and the way to stop it.
pub struct StepProcess {
    /// Process ID, also the process group ID.
    pub pid: u32,
    stop: Option<oneshot::Sender<()>>,
}

impl StepProcess {
    /// Sends SIGTERM to the step's process group (the step and what it started).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn forward<R: AsyncRead + Unpin + Send + 'static>(
    reader: R,
    node: String,
    events: mpsc::UnboundedSender<StepEvent>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        // Ends with the stream: at most as many lines as the step writes.
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = events.send(StepEvent::Output {
                node: node.clone(),
                line,
            });
        }
    })
}

/// Starts `sh -c command` for `node`; its lines and its end go to `events`.
///
/// # Errors
/// The shell could not be started.
pub fn spawn(
    node: &str,
    command: &str,
    events: mpsc::UnboundedSender<StepEvent>,
) -> std::io::Result<StepProcess> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("EVICTORD_NODE", node)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let pid = child.id().unwrap_or_default();
    let out = child
        .stdout
        .take()
        .map(|o| forward(o, node.to_string(), events.clone()));
    let err = child
        .stderr
        .take()
        .map(|e| forward(e, node.to_string(), events.clone()));
    let (stop, mut stopped) = oneshot::channel::<()>();
    let node = node.to_string();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            Ok(()) = &mut stopped => {
                let by_group = std::process::Command::new("kill")
                    .args(["-s", "TERM", "--", &format!("-{pid}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !by_group {
                    let _ = child.start_kill();
                }
                child.wait().await
            }
        };
        // The output first, then the end; a process the step left running in the background
        // may keep the pipes open: its output is not waited for beyond a moment.
        for mut task in [out, err].into_iter().flatten() {
            if tokio::time::timeout(OUTPUT_GRACE, &mut task).await.is_err() {
                task.abort();
            }
        }
        let exit = match status {
            Ok(s) => Exit {
                code: s.code(),
                signal: s.signal(),
            },
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        let _ = events.send(StepEvent::Exited { node, exit });
    });
    Ok(StepProcess {
        pid,
        stop: Some(stop),
    })
}

/// This host's name, as recorded with a step (empty when unknown).
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default()
}

/// Whether the process `pid` runs on this host (`host` being the host it was recorded on).
/// Answered from /proc; elsewhere, and for other hosts, no.
pub fn alive(me: &str, host: Option<&str>, pid: u32) -> bool {
    !me.is_empty() && host == Some(me) && std::path::Path::new(&format!("/proc/{pid}")).exists()
}
