//! The held directory's record and what to do with each held entry (pure).
//!
//! The node agent keeps what it moved out of the kubelet's static pod directory in
//! [`HELD_DIR`], a dot-directory inside it (the kubelet ignores dot-names, see
//! [`super::manifest`]; being on the same filesystem, every move is one atomic rename or link):
//!
//! - `manifests/<file>`: the manifest, byte for byte, under its original file name;
//! - `records/<file>.json`: a [`Record`] — original name, content hash, node, maintenance, pod,
//!   time, and the step in progress ([`Intent`]) — written and fsynced before anything moves.
//!
//! That directory is the whole state: [`decide_entry`] reads one entry as the filesystem shows
//! it ([`HeldEntry`]) and says what to do, so a restarted agent finishes or undoes a move cut
//! short at any point, and a file someone else changed is never overwritten ([`Conflict`]).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::manifest::StaticPodId;

/// The held directory, inside the static pod directory.
pub const HELD_DIR: &str = ".evictord-held";
/// Subdirectory of [`HELD_DIR`] with the held manifests.
pub const MANIFESTS_DIR: &str = "manifests";
/// Subdirectory of [`HELD_DIR`] with the records.
pub const RECORDS_DIR: &str = "records";
/// File name suffix of a record.
pub const RECORD_SUFFIX: &str = ".json";

/// Which move a record was written for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Move the manifest out of the kubelet's directory (and keep it out).
    Hold,
    /// Put the manifest back.
    Restore,
}

/// The mirror pod a held manifest belonged to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HeldPod {
    /// Namespace of the mirror pod.
    pub namespace: String,
    /// Name of the mirror pod (`<manifest name>-<node>`).
    pub name: String,
    /// UID of the mirror pod when the manifest was held.
    pub uid: String,
}

/// The record of one held manifest (`records/<file>.json`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The manifest's file name in the static pod directory (also its name under `manifests/`).
    pub file: String,
    /// SHA-256 of the manifest's content (of a symlink: of its target path).
    pub sha256: String,
    /// The node whose agent holds it.
    pub node: String,
    /// The NodeMaintenance it was held for.
    pub maintenance: String,
    /// That maintenance's `spec.reason`.
    #[serde(default)]
    pub reason: String,
    /// The mirror pod.
    pub pod: HeldPod,
    /// The mirror pod's `terminationGracePeriodSeconds` (the expected time to stop).
    pub grace_period_seconds: i64,
    /// When it was held.
    pub held_at: Timestamp,
    /// The step in progress.
    pub intent: Intent,
}

/// One entry of the held directory as the filesystem shows it: a record, a held copy, or both;
/// and the file at the original path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldEntry {
    /// The file name (of the manifest under `manifests/`, of the record without its suffix).
    pub file: String,
    /// The record: `None` when absent, `Err` when it cannot be read or parsed.
    pub record: Option<Result<Record, String>>,
    /// Hash of the held copy, when there is one.
    pub held: Option<String>,
    /// Hash of the file at the original path in the kubelet's directory, when there is one.
    pub original: Option<String>,
}

/// A manifest in the kubelet's static pod directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestFile {
    /// File name.
    pub file: String,
    /// The pod it defines (`None`: not a pod manifest the kubelet would run).
    pub id: Option<StaticPodId>,
    /// Hash of its content.
    pub hash: String,
}

/// The static pod directory and its held directory, read at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The manifests the kubelet sees.
    pub manifests: Vec<ManifestFile>,
    /// The entries of the held directory, by file name.
    pub entries: Vec<HeldEntry>,
}

impl Snapshot {
    /// The held entry whose record names this mirror pod.
    pub fn entry_of_pod(&self, namespace: &str, name: &str) -> Option<(&HeldEntry, &Record)> {
        self.entries.iter().find_map(|e| match &e.record {
            Some(Ok(r)) if r.pod.namespace == namespace && r.pod.name == name => Some((e, r)),
            _ => None,
        })
    }

    /// The held entry of this file name.
    pub fn entry(&self, file: &str) -> Option<&HeldEntry> {
        self.entries.iter().find(|e| e.file == file)
    }

    /// Entries whose manifest is held (a held copy exists).
    pub fn held_count(&self) -> usize {
        self.entries.iter().filter(|e| e.held.is_some()).count()
    }
}

/// Why an entry needs the administrator; the agent changes nothing of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// A different file was put at the original path while the manifest was held.
    FileAtOriginalPath,
    /// The held copy no longer has the recorded content.
    HeldCopyEdited,
    /// The held copy was removed and the manifest is not back either.
    HeldCopyMissing,
    /// A held copy without a record.
    NoRecord,
    /// The record cannot be read.
    BadRecord(String),
    /// The record was written by the agent of another node.
    OtherNode(String),
}

impl Conflict {
    /// Short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Conflict::FileAtOriginalPath => "file_at_original_path",
            Conflict::HeldCopyEdited => "held_copy_edited",
            Conflict::HeldCopyMissing => "held_copy_missing",
            Conflict::NoRecord => "no_record",
            Conflict::BadRecord(_) => "bad_record",
            Conflict::OtherNode(_) => "other_node",
        }
    }

    /// What happened and how to resolve it, for the event, the log and the book.
    pub fn describe(&self, file: &str) -> String {
        let held = format!("{HELD_DIR}/{MANIFESTS_DIR}/{file}");
        let record = format!("{HELD_DIR}/{RECORDS_DIR}/{file}{RECORD_SUFFIX}");
        match self {
            Conflict::FileAtOriginalPath => format!(
                "{file} was put back into the static pod directory by someone else while {held} was held, with other content; \
                 the node agent changes neither: keep one of them and remove {held} and {record}"
            ),
            Conflict::HeldCopyEdited => format!(
                "{held} was changed while it was held (its content no longer matches {record}); the node agent will not \
                 restore it: move it back to {file} yourself if you want it, and remove {record}"
            ),
            Conflict::HeldCopyMissing => format!(
                "{held} was removed while it was held and {file} is not in the static pod directory either; nothing is \
                 left to restore: remove {record} once you have put back what you want"
            ),
            Conflict::NoRecord => format!(
                "{held} has no record ({record}); the node agent does not know what it is: move it back to {file} \
                 or remove it"
            ),
            Conflict::BadRecord(e) => format!(
                "the record {record} cannot be read ({e}); the node agent leaves {held} alone: move it back to {file} \
                 yourself and remove the record"
            ),
            Conflict::OtherNode(node) => format!(
                "{record} was written by the node agent of node {node}, not this one (a shared or copied static pod \
                 directory?); it is left alone: resolve it by hand"
            ),
        }
    }
}

/// What to do with one held entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryAction {
    /// Held, and a maintenance still holds the node: nothing to do.
    Keep,
    /// Held, and no maintenance holds the node any more: put the manifest back.
    Restore,
    /// The record is written but the manifest was not moved yet, and a maintenance holds the
    /// node: move it.
    FinishHold,
    /// The manifest is back at its original path with the held content (a restore cut short, or
    /// someone copied it back): remove the held copy and the record.
    FinishRestore,
    /// Nothing of this entry is held (a hold cut short and no longer wanted, a restore whose
    /// record was not removed yet, or someone else's file in its place): forget the record.
    DropRecord,
    /// Leave everything as it is and report.
    Conflict(Conflict),
}

/// What to do with `entry` on `node`, where `held` says whether some maintenance holds the node
/// (`drain::holds::holders` is not empty).
pub fn decide_entry(entry: &HeldEntry, node: &str, held: bool) -> EntryAction {
    let record = match &entry.record {
        None => {
            return if entry.held.is_some() {
                EntryAction::Conflict(Conflict::NoRecord)
            } else {
                EntryAction::DropRecord
            };
        }
        Some(Err(e)) => return EntryAction::Conflict(Conflict::BadRecord(e.clone())),
        Some(Ok(r)) => r,
    };
    if record.node != node {
        return EntryAction::Conflict(Conflict::OtherNode(record.node.clone()));
    }
    match (&entry.held, &entry.original) {
        (Some(h), _) if *h != record.sha256 => EntryAction::Conflict(Conflict::HeldCopyEdited),
        (Some(h), Some(o)) if o == h => EntryAction::FinishRestore,
        (Some(_), Some(_)) => EntryAction::Conflict(Conflict::FileAtOriginalPath),
        (Some(_), None) if held => EntryAction::Keep,
        (Some(_), None) => EntryAction::Restore,
        (None, Some(o)) if *o == record.sha256 && record.intent == Intent::Hold && held => {
            EntryAction::FinishHold
        }
        (None, Some(_)) => EntryAction::DropRecord,
        (None, None) => EntryAction::Conflict(Conflict::HeldCopyMissing),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    pub(crate) fn record(intent: Intent) -> Record {
        Record {
            file: "etcd.yaml".into(),
            sha256: "h".into(),
            node: "one".into(),
            maintenance: "m".into(),
            reason: "OS upgrade".into(),
            pod: HeldPod {
                namespace: "kube-system".into(),
                name: "etcd-one".into(),
                uid: "u".into(),
            },
            grace_period_seconds: 30,
            held_at: Timestamp::UNIX_EPOCH,
            intent,
        }
    }

    fn entry(
        record: Option<Result<Record, String>>,
        held: Option<&str>,
        original: Option<&str>,
    ) -> HeldEntry {
        HeldEntry {
            file: "etcd.yaml".into(),
            record,
            held: held.map(str::to_string),
            original: original.map(str::to_string),
        }
    }

    fn ok(intent: Intent) -> Option<Result<Record, String>> {
        Some(Ok(record(intent)))
    }

    use EntryAction as A;
    use Intent::{Hold, Restore as Back};

    /// One row per rule: the entry as the filesystem shows it, whether a maintenance holds the
    /// node → the action.
    #[rstest]
    // Held: kept while a maintenance holds the node, restored when none does.
    #[case::held_and_holding(ok(Hold), Some("h"), None, true, A::Keep)]
    #[case::held_and_released(ok(Hold), Some("h"), None, false, A::Restore)]
    // A restore decided but cut short before the link: decided again.
    #[case::restore_not_started_released(ok(Back), Some("h"), None, false, A::Restore)]
    #[case::restore_not_started_holding_again(ok(Back), Some("h"), None, true, A::Keep)]
    // Crash between link and unlink of a restore, or someone copied it back: finish.
    #[case::restore_linked(ok(Back), Some("h"), Some("h"), false, A::FinishRestore)]
    #[case::copied_back_during_maintenance(ok(Hold), Some("h"), Some("h"), true, A::FinishRestore)]
    // A restore whose record was not removed yet.
    #[case::restore_unlinked(ok(Back), None, Some("h"), false, A::DropRecord)]
    #[case::restore_unlinked_holding(ok(Back), None, Some("h"), true, A::DropRecord)]
    // A hold cut short after its record: finished while wanted, undone otherwise.
    #[case::hold_recorded_holding(ok(Hold), None, Some("h"), true, A::FinishHold)]
    #[case::hold_recorded_released(ok(Hold), None, Some("h"), false, A::DropRecord)]
    // Someone else's file at the original path, our copy gone: theirs stays, the record goes.
    #[case::their_file_no_copy(ok(Hold), None, Some("x"), true, A::DropRecord)]
    // Conflicts: never overwrite, never restore.
    #[case::their_file_and_our_copy(
        ok(Hold),
        Some("h"),
        Some("x"),
        false,
        A::Conflict(Conflict::FileAtOriginalPath)
    )]
    #[case::held_copy_edited(
        ok(Hold),
        Some("x"),
        None,
        false,
        A::Conflict(Conflict::HeldCopyEdited)
    )]
    #[case::held_copy_edited_and_file_back(
        ok(Hold),
        Some("x"),
        Some("x"),
        false,
        A::Conflict(Conflict::HeldCopyEdited)
    )]
    #[case::held_copy_removed(ok(Hold), None, None, false, A::Conflict(Conflict::HeldCopyMissing))]
    #[case::no_record(None, Some("h"), None, false, A::Conflict(Conflict::NoRecord))]
    #[case::bad_record(Some(Err("eof".into())), Some("h"), None, false, A::Conflict(Conflict::BadRecord("eof".into())))]
    fn entry_rows(
        #[case] record: Option<Result<Record, String>>,
        #[case] held_copy: Option<&str>,
        #[case] original: Option<&str>,
        #[case] holding: bool,
        #[case] want: EntryAction,
    ) {
        assert_eq!(
            decide_entry(&entry(record, held_copy, original), "one", holding),
            want
        );
    }

    #[test]
    fn another_nodes_record_is_left_alone() {
        let e = entry(ok(Hold), Some("h"), None);
        assert_eq!(
            decide_entry(&e, "two", false),
            A::Conflict(Conflict::OtherNode("one".into()))
        );
    }

    #[test]
    fn record_round_trips_as_json() {
        let r = record(Hold);
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"gracePeriodSeconds\":30"), "{text}");
        assert!(text.contains("\"intent\":\"Hold\""), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
    }

    #[test]
    fn every_conflict_says_how_to_resolve_it() {
        for c in [
            Conflict::FileAtOriginalPath,
            Conflict::HeldCopyEdited,
            Conflict::HeldCopyMissing,
            Conflict::NoRecord,
            Conflict::BadRecord("x".into()),
            Conflict::OtherNode("two".into()),
        ] {
            let text = c.describe("etcd.yaml");
            assert!(text.contains("etcd.yaml"), "{text}");
            assert!(
                text.contains("remove") || text.contains("by hand"),
                "{text}"
            );
        }
    }
}
