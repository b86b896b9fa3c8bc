//! Ctrl-C during a rollout: the first lets a running step end, the second stops it.

use super::*;

/// Sends SIGINT to the plugin (kubectl execs it: the same process), as Ctrl-C does.
fn ctrl_c(child: &Child) {
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[tokio::test]
async fn ctrl_c_lets_a_running_step_end_and_a_second_one_stops_it() {
    let (client, ns) = audited_setup("rollout-stop").await;
    let nodes = pool(&client, &ns, "roll-c", 2).await;
    let c = support::cluster().await;
    let dir = tempfile::tempdir_in(&c.dir).unwrap();
    let ran = dir.path().join("ran");
    let exec = format!(
        "echo started; sleep 3; echo \"$EVICTORD_NODE\" >> {}",
        ran.display()
    );
    let args = [
        "rollout",
        "roll-c",
        "-l",
        "pool=roll-c",
        "--max-unavailable",
        "1",
        "--exec",
        &exec,
    ];

    // One Ctrl-C: the running step ends and is recorded; nothing else happens.
    let log = c.dir.join("rollout-ctrl-c-1.log");
    let mut child = start(&args, &log).await;
    support::plugin::log_shows(&log, "[roll-c-1] started").await;
    ctrl_c(&child);
    let code = wait_exit(&mut child, &log, T).await;
    let out = std::fs::read_to_string(&log).unwrap();
    println!("--- one Ctrl-C ---\n{out}");
    assert_eq!(code, 130, "{out}");
    for needle in [
        "Ctrl-C: no new step starts; waiting for the steps on roll-c-1 to end",
        "node roll-c-1: step succeeded",
        "rollout roll-c stopped; nothing was undone",
    ] {
        assert!(out.contains(needle), "{needle:?} in:\n{out}");
    }
    assert_eq!(lines(&ran), ["roll-c-1"]);
    let states = step_states(&client, "roll-c").await;
    assert_eq!(
        states.get("roll-c-roll-c-1").map(String::as_str),
        Some("Succeeded")
    );
    assert_eq!(
        rollout_objects(&client, "roll-c").await,
        (true, 2),
        "left as it was"
    );

    // Resumed, then two Ctrl-C: the second stops the running step, which stays to run again.
    let log = c.dir.join("rollout-ctrl-c-2.log");
    let mut child = start(&args, &log).await;
    support::plugin::log_shows(&log, "[roll-c-2] started").await;
    ctrl_c(&child);
    support::plugin::log_shows(&log, "Ctrl-C again stops them now").await;
    ctrl_c(&child);
    let code = wait_exit(&mut child, &log, T).await;
    let out = std::fs::read_to_string(&log).unwrap();
    println!("--- two Ctrl-C ---\n{out}");
    assert_eq!(code, 130, "{out}");
    assert!(
        out.contains("the steps on roll-c-2 were stopped before they ended"),
        "{out}"
    );
    let states = step_states(&client, "roll-c").await;
    assert_eq!(
        states.get("roll-c-roll-c-2").map(String::as_str),
        Some("Running")
    );

    // The same command runs the stopped step again from the start and finishes.
    let out = plugin(&args).await;
    let t = text(&out);
    println!("--- resumed ---\n{t}");
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("node roll-c-2: running the step again (attempt 2)"),
        "{t}"
    );
    assert_eq!(lines(&ran), nodes, "the stopped step never reached its end");
}
