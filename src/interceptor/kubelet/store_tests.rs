//! The filesystem steps on temporary directories, including a process killed between any two
//! steps of a hold or a restore (simulated by running the first steps only): the next look at
//! the held directory alone finishes or undoes the move, nothing is lost and nothing someone
//! else wrote is overwritten.

use std::fs;
use std::path::Path;

use jiff::Timestamp;

use super::*;
use crate::interceptor::kubelet::held::{EntryAction, HeldPod, decide_entry};

const NODE: &str = "one";
const ETCD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n";

fn setup() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("etcd.yaml"), ETCD).unwrap();
    let store = Store::new(dir.path());
    // The held directory as the agent creates it at start-up.
    drop(store.lock().unwrap());
    (dir, store)
}

fn record_for(store: &Store, file: &str) -> Record {
    let snapshot = store.scan().unwrap();
    let m = snapshot
        .manifests
        .iter()
        .find(|m| m.file == file)
        .expect("manifest");
    Record {
        file: file.into(),
        sha256: m.hash.clone(),
        node: NODE.into(),
        maintenance: "m".into(),
        reason: String::new(),
        pod: HeldPod {
            namespace: "kube-system".into(),
            name: "etcd-one".into(),
            uid: "u".into(),
        },
        grace_period_seconds: 30,
        held_at: Timestamp::UNIX_EPOCH,
        intent: Intent::Hold,
    }
}

/// One look of the keeper: scan, decide every entry, apply; returns the actions taken.
fn settle(store: &Store, holding: bool) -> Vec<EntryAction> {
    let _lock = store.lock().unwrap();
    store.remove_partial_records().unwrap();
    let snapshot = store.scan().unwrap();
    snapshot
        .entries
        .iter()
        .map(|e| {
            let action = decide_entry(e, NODE, holding);
            store.apply(e, &action).unwrap();
            action
        })
        .collect()
}

fn visible(dir: &Path) -> Vec<String> {
    Store::new(dir)
        .scan()
        .unwrap()
        .manifests
        .into_iter()
        .map(|m| m.file)
        .collect()
}

fn assert_back(dir: &Path, store: &Store) {
    assert_eq!(
        fs::read_to_string(dir.join("etcd.yaml")).unwrap(),
        ETCD,
        "the manifest is back, unchanged"
    );
    assert!(
        store.scan().unwrap().entries.is_empty(),
        "nothing left held"
    );
}

fn assert_held(dir: &Path, store: &Store) {
    assert!(
        !dir.join("etcd.yaml").exists(),
        "out of the kubelet's sight"
    );
    let snapshot = store.scan().unwrap();
    assert_eq!(snapshot.held_count(), 1);
    assert_eq!(
        fs::read_to_string(store.held_copy("etcd.yaml")).unwrap(),
        ETCD
    );
}

#[test]
fn scan_sees_what_the_kubelet_sees() {
    let (dir, store) = setup();
    let d = dir.path();
    fs::write(d.join(".hidden.yaml"), ETCD).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    fs::write(d.join("sub/inner.yaml"), ETCD).unwrap();
    fs::write(d.join("notes.txt"), "not a pod").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(d.join("etcd.yaml"), d.join("link.yaml")).unwrap();
    let snapshot = store.scan().unwrap();
    let files: Vec<(&str, bool)> = snapshot
        .manifests
        .iter()
        .map(|m| (m.file.as_str(), m.id.is_some()))
        .collect();
    assert_eq!(
        files,
        [
            ("etcd.yaml", true),
            ("link.yaml", true),
            ("notes.txt", false)
        ]
    );
    // The held directory is a dot-directory: never a manifest.
    assert!(d.join(".evictord-held/manifests").is_dir());
}

#[test]
fn a_missing_directory_reads_as_empty() {
    let store = Store::new("/nonexistent/evictord-test");
    assert_eq!(store.scan().unwrap(), Snapshot::default());
}

#[test]
fn hold_then_restore() {
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    store.hold(&r).unwrap();
    assert_held(dir.path(), &store);
    assert_eq!(settle(&store, true), [EntryAction::Keep]);
    assert_held(dir.path(), &store);
    assert_eq!(settle(&store, false), [EntryAction::Restore]);
    assert_back(dir.path(), &store);
}

#[cfg(unix)]
#[test]
fn a_symlinked_manifest_is_held_and_restored_as_a_link() {
    let (dir, store) = setup();
    let d = dir.path();
    fs::rename(d.join("etcd.yaml"), d.join("..etcd-target")).unwrap();
    std::os::unix::fs::symlink(d.join("..etcd-target"), d.join("etcd.yaml")).unwrap();
    let r = record_for(&store, "etcd.yaml");
    store.hold(&r).unwrap();
    assert!(fs::symlink_metadata(d.join("etcd.yaml")).is_err());
    assert_eq!(settle(&store, false), [EntryAction::Restore]);
    assert!(
        fs::symlink_metadata(d.join("etcd.yaml"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(d.join("etcd.yaml")).unwrap(), ETCD);
}

/// A hold killed after its record: finished while a maintenance holds the node, undone after.
#[test]
fn hold_killed_after_the_record() {
    for holding in [true, false] {
        let (dir, store) = setup();
        let r = record_for(&store, "etcd.yaml");
        store.write_record(&r).unwrap();
        // The kubelet still sees it; the pod still runs.
        assert_eq!(visible(dir.path()), ["etcd.yaml"]);
        if holding {
            assert_eq!(settle(&store, true), [EntryAction::FinishHold]);
            assert_held(dir.path(), &store);
        } else {
            assert_eq!(settle(&store, false), [EntryAction::DropRecord]);
            assert_back(dir.path(), &store);
        }
    }
}

/// A hold killed while writing its record (the temporary file only): nothing moved.
#[test]
fn hold_killed_while_writing_the_record() {
    let (dir, store) = setup();
    let temp = dir.path().join(".evictord-held/records/etcd.yaml.json.tmp");
    fs::write(&temp, "{\"file\": \"etc").unwrap();
    assert_eq!(settle(&store, true), []);
    assert!(!temp.exists());
    assert_back(dir.path(), &store);
}

/// A restore killed after each of its steps: the next look finishes it, with the manifest back
/// unchanged, or keeps it held when a maintenance holds the node again.
#[test]
fn restore_killed_after_each_step() {
    type Step = fn(&Store, &Record);
    let steps: [(&str, Step); 3] = [
        ("intent", |s, r| {
            s.write_record(&Record {
                intent: Intent::Restore,
                ..r.clone()
            })
            .unwrap()
        }),
        ("link", |s, r| s.link_back(&r.file).unwrap()),
        ("held copy removed", |s, r| {
            s.remove_held_copy(&r.file).unwrap()
        }),
    ];
    let expected = [
        EntryAction::Restore,
        EntryAction::FinishRestore,
        EntryAction::DropRecord,
    ];
    for done in 1..=steps.len() {
        let (dir, store) = setup();
        let r = record_for(&store, "etcd.yaml");
        store.hold(&r).unwrap();
        for (_, step) in &steps[..done] {
            step(&store, &r);
        }
        let (what, _) = steps[done - 1];
        assert_eq!(
            settle(&store, false),
            [expected[done - 1].clone()],
            "killed after: {what}"
        );
        assert_back(dir.path(), &store);
    }
    // Killed after the intent, and a maintenance holds the node again: stays held.
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    store.hold(&r).unwrap();
    (steps[0].1)(&store, &r);
    assert_eq!(settle(&store, true), [EntryAction::Keep]);
    assert_held(dir.path(), &store);
}

#[test]
fn a_file_put_at_the_original_path_is_never_overwritten() {
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    store.hold(&r).unwrap();
    fs::write(
        dir.path().join("etcd.yaml"),
        "kind: Pod\nmetadata: {name: mine}\n",
    )
    .unwrap();
    let actions = settle(&store, false);
    assert!(
        matches!(&actions[..], [EntryAction::Conflict(c)] if c.label() == "file_at_original_path"),
        "{actions:?}"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("etcd.yaml")).unwrap(),
        "kind: Pod\nmetadata: {name: mine}\n"
    );
    assert_eq!(
        fs::read_to_string(store.held_copy("etcd.yaml")).unwrap(),
        ETCD
    );
    // Even a restore decided before the file appeared does not overwrite it.
    assert_eq!(store.restore(&r).unwrap(), Restored::FileAtOriginalPath);
    assert_eq!(
        fs::read_to_string(dir.path().join("etcd.yaml")).unwrap(),
        "kind: Pod\nmetadata: {name: mine}\n"
    );
}

#[test]
fn an_edited_or_removed_held_copy_is_reported_not_restored() {
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    store.hold(&r).unwrap();
    fs::write(store.held_copy("etcd.yaml"), "edited").unwrap();
    let actions = settle(&store, false);
    assert!(
        matches!(&actions[..], [EntryAction::Conflict(c)] if c.label() == "held_copy_edited"),
        "{actions:?}"
    );
    assert!(!dir.path().join("etcd.yaml").exists());
    fs::remove_file(store.held_copy("etcd.yaml")).unwrap();
    let actions = settle(&store, false);
    assert!(
        matches!(&actions[..], [EntryAction::Conflict(c)] if c.label() == "held_copy_missing"),
        "{actions:?}"
    );
}

#[test]
fn a_manifest_copied_back_by_hand_ends_the_hold() {
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    store.hold(&r).unwrap();
    fs::copy(store.held_copy("etcd.yaml"), dir.path().join("etcd.yaml")).unwrap();
    assert_eq!(settle(&store, true), [EntryAction::FinishRestore]);
    assert_back(dir.path(), &store);
}

#[test]
fn a_manifest_removed_before_the_move_leaves_no_record() {
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    store.write_record(&r).unwrap();
    fs::remove_file(dir.path().join("etcd.yaml")).unwrap();
    assert!(store.move_out(&r).is_err());
    assert!(store.scan().unwrap().entries.is_empty());
}

#[test]
fn a_file_changed_before_the_move_is_recorded_as_moved() {
    let (dir, store) = setup();
    let r = record_for(&store, "etcd.yaml");
    fs::write(dir.path().join("etcd.yaml"), format!("{ETCD}# edited\n")).unwrap();
    store.hold(&r).unwrap();
    assert_eq!(settle(&store, true), [EntryAction::Keep]);
    assert_eq!(settle(&store, false), [EntryAction::Restore]);
    assert!(
        fs::read_to_string(dir.path().join("etcd.yaml"))
            .unwrap()
            .ends_with("# edited\n")
    );
}

#[test]
fn the_lock_serialises_two_holders() {
    let (_dir, store) = setup();
    let first = store.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let other = store.clone();
    let t = std::thread::spawn(move || {
        let _second = other.lock().unwrap();
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "the second lock waits for the first"
    );
    drop(first);
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    t.join().unwrap();
}
