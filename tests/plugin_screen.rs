//! The kubectl plugin's live view as a person sees it: `kubectl evictord drain` in a tmux
//! pseudo-terminal on the test control plane, its screen captured. Ignored by `make test` (it
//! needs tmux); `make plugin-screen` installs tmux if missing (`tests/tools/tmux.sh`) and runs it.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use evictord::api::EvictionRequest;
use kube::Api;
use support::fixtures::pdb_api;
use support::interceptor::{now, write_when_active};
use support::plugin::{INTERCEPTOR, T, plugin_path, scenario, setup, text};
use support::tools::kubectl_command;
use support::wait::until;

/// Where the screen capture goes: `$CARGO_TARGET_DIR` (or `target`) `/plugin-screen.txt`.
fn capture_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("plugin-screen.txt")
}

/// The tmux session of this test, killed when the test ends, also after a failed assertion.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = tmux(&["kill-session", "-t", &self.0]);
    }
}

fn tmux(args: &[&str]) -> Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux (install it: tests/tools/tmux.sh)")
}

/// The live view in a pseudo-terminal (tmux, 120×16), captured while the budget and the
/// interceptor hold the drain up and again once it is drained; the three captures are written to
/// [`capture_path`] together for the book (docs/src/plugin.md). `make plugin-screen` runs it.
#[tokio::test]
#[ignore = "needs tmux; run by `make plugin-screen`"]
async fn live_view_under_tmux() {
    let (client, ns) = setup("plugin-tmux").await;
    let uid = scenario(&client, &ns, "plugin-tty").await;
    let c = support::cluster().await;
    let session = format!("evictord-plugin-{}", std::process::id());
    let command = format!(
        "env PATH='{}' KUBECONFIG='{}' kubectl evictord drain plugin-tty --name plugin-tty-nm --priority-steps 100,200,300 --timeout 150s; echo exit=$?; sleep 600",
        plugin_path(),
        c.kubeconfig.display()
    );
    let kubectl_dir = kubectl_command(c, &[]).get_program().to_owned();
    let kubectl_dir = PathBuf::from(kubectl_dir).parent().unwrap().to_path_buf();
    let command = command.replace(
        "env PATH='",
        &format!("env PATH='{}:", kubectl_dir.display()),
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "16",
        &command,
    ]);
    assert!(started.status.success(), "{}", text(&started));
    let _session = Session(session.clone());
    let screen = || tmux(&["capture-pane", "-p", "-t", &session]);
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    write_when_active(&api, &uid, INTERCEPTOR, |e| {
        e.start_time = Some(now());
        e.heartbeat_time = Some(now());
        e.message = Some("copying data".into());
    })
    .await;
    until(T, "the live view showing the interceptor", || async {
        let s = String::from_utf8_lossy(&screen().stdout).to_string();
        s.contains("interceptor hold.example.com active")
            .then_some(s)
    })
    .await;
    // A few seconds on, as a person would look at it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let shot = String::from_utf8_lossy(&screen().stdout).to_string();
    write_when_active(&api, &uid, INTERCEPTOR, |e| e.completion_time = Some(now())).await;
    let shot2 = until(T, "the live view showing the budget", || async {
        let s = String::from_utf8_lossy(&screen().stdout).to_string();
        s.contains("PodDisruptionBudget guarded-pdb allows 0")
            .then_some(s)
    })
    .await;
    assert!(
        shot.contains("pods evicted") && shot.contains("plugin-tty"),
        "{shot}"
    );
    pdb_api(&client, &ns)
        .delete("guarded-pdb", &Default::default())
        .await
        .unwrap();
    let done = until(T, "the live view showing Drained", || async {
        let s = String::from_utf8_lossy(&screen().stdout).to_string();
        s.contains("exit=0").then_some(s)
    })
    .await;
    assert!(
        done.contains("3/3 pods evicted") && done.contains("is Drained"),
        "{done}"
    );
    let capture = format!(
        "# while the interceptor holds the drain\n{}\n# while the budget holds it\n{}\n# drained\n{}\n",
        shot.trim_end(),
        shot2.trim_end(),
        done.trim_end()
    );
    std::fs::write(capture_path(), &capture).unwrap();
    println!("{capture}");
}
