//! The filesystem shell of the node agent: reads the static pod directory and its held
//! directory into a [`Snapshot`], and performs each move as a sequence of durable steps.
//!
//! Every step is made durable before the next one starts (file and directory `fsync`), so a
//! process killed between any two of them leaves a state that [`super::held::decide_entry`]
//! reads back and finishes or undoes:
//!
//! - hold: [`Store::write_record`] (intent Hold) → [`Store::move_out`] (one `rename` from the
//!   kubelet's directory into `manifests/`);
//! - restore: [`Store::write_record`] (intent Restore) → [`Store::link_back`] (a hard link at
//!   the original path: `link` fails when a file exists there, so someone else's file is never
//!   overwritten, and the kubelet sees the whole file at once) → [`Store::remove_held_copy`] →
//!   [`Store::remove_record`].
//!
//! Moves of the agent (its interceptor and its keeper) and of a second agent process on the
//! same directory are serialised by an exclusive `flock` on `.evictord-held/lock` ([`Store::lock`]).

use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use super::held::{
    EntryAction, HELD_DIR, HeldEntry, Intent, MANIFESTS_DIR, ManifestFile, RECORD_SUFFIX,
    RECORDS_DIR, Record, Snapshot,
};
use super::manifest::{MAX_MANIFEST_BYTES, content_hash, is_visible_to_kubelet, parse_identity};

/// Suffix of a record being written (removed when found: nothing moved yet for it).
const TEMP_SUFFIX: &str = ".tmp";

/// Errors of the filesystem steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be encoded.
    #[error("encoding the record of {0}: {1}")]
    Encode(String, #[source] serde_json::Error),
    /// A file exists where the step would have to overwrite it; nothing was changed.
    #[error("{0} exists; not overwriting it")]
    Exists(PathBuf),
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// The static pod directory and its held directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// An exclusive lock on the held directory; released when dropped.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// What [`Store::apply`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Nothing.
    Nothing,
    /// A manifest moved out of the kubelet's directory.
    Held,
    /// A manifest is back in the kubelet's directory.
    Restored,
    /// A record of nothing held was removed.
    Forgotten,
}

/// How a restore ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restored {
    /// The manifest is back at its original path; the held copy and the record are gone.
    Done,
    /// A file appeared at the original path: nothing was overwritten, everything left as it was
    /// (the record's intent says Restore; the entry is now a conflict).
    FileAtOriginalPath,
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", dir))
}

/// The hash a file is recognised by: its content, or for a symlink its target path (which
/// stays valid wherever the link is moved).
pub fn file_hash(path: &Path) -> Result<Option<String>, Error> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("stat", path)(e)),
    };
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path).map_err(io("readlink", path))?;
        let text = format!("symlink:{}", target.display());
        return Ok(Some(content_hash(text.as_bytes())));
    }
    if !meta.is_file() {
        return Ok(Some(format!("not a regular file ({:?})", meta.file_type())));
    }
    Ok(Some(content_hash(&read_bounded(path)?)))
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    File::open(path)
        .and_then(|f| f.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut buf))
        .map_err(io("read", path))?;
    Ok(buf)
}

fn names(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("list", dir)(e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(io("list", dir))?;
        if let Some(name) = e.file_name().to_str() {
            out.push(name.to_string());
        }
    }
    out.sort();
    Ok(out)
}

impl Store {
    /// The store of the static pod directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The static pod directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn held(&self) -> PathBuf {
        self.dir.join(HELD_DIR)
    }

    fn manifests(&self) -> PathBuf {
        self.held().join(MANIFESTS_DIR)
    }

    fn records(&self) -> PathBuf {
        self.held().join(RECORDS_DIR)
    }

    fn record_path(&self, file: &str) -> PathBuf {
        self.records().join(format!("{file}{RECORD_SUFFIX}"))
    }

    /// Path of the held copy of `file`.
    pub fn held_copy(&self, file: &str) -> PathBuf {
        self.manifests().join(file)
    }

    /// Creates the held directory (owner-only) if needed and takes its exclusive lock,
    /// waiting for another holder.
    ///
    /// # Errors
    /// When the static pod directory does not exist or is not writable.
    pub fn lock(&self) -> Result<Lock, Error> {
        for d in [self.held(), self.manifests(), self.records()] {
            match fs::create_dir(&d) {
                Ok(()) => {
                    set_owner_only(&d)?;
                    if let Some(parent) = d.parent() {
                        sync_dir(parent)?;
                    }
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("mkdir", &d)(e)),
            }
        }
        let path = self.held().join("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        file.lock().map_err(io("flock", &path))?;
        Ok(Lock { _file: file })
    }

    /// Reads the manifests the kubelet sees and every held entry. A missing static pod
    /// directory reads as empty.
    ///
    /// # Errors
    /// When a directory or file cannot be read.
    pub fn scan(&self) -> Result<Snapshot, Error> {
        let mut manifests = Vec::new();
        for file in names(&self.dir)? {
            if !is_visible_to_kubelet(&file) {
                continue;
            }
            let path = self.dir.join(&file);
            // As the kubelet: follow symlinks, skip directories and anything not a regular file.
            match fs::metadata(&path) {
                Ok(m) if m.is_file() => {}
                _ => continue,
            }
            let Some(hash) = file_hash(&path)? else {
                continue;
            };
            let content = match read_bounded(&path) {
                Ok(c) => c,
                Err(_) => continue,
            };
            manifests.push(ManifestFile {
                file,
                id: parse_identity(&content),
                hash,
            });
        }
        let mut files: Vec<String> = names(&self.records())?
            .into_iter()
            .filter_map(|n| n.strip_suffix(RECORD_SUFFIX).map(str::to_string))
            .collect();
        files.extend(names(&self.manifests())?);
        files.sort();
        files.dedup();
        let mut entries = Vec::with_capacity(files.len());
        for file in files {
            entries.push(HeldEntry {
                record: self.read_record(&file)?,
                held: file_hash(&self.held_copy(&file))?,
                original: file_hash(&self.dir.join(&file))?,
                file,
            });
        }
        Ok(Snapshot { manifests, entries })
    }

    fn read_record(&self, file: &str) -> Result<Option<Result<Record, String>>, Error> {
        let path = self.record_path(file);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(
                serde_json::from_slice::<Record>(&bytes).map_err(|e| e.to_string()),
            )),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path)(e)),
        }
    }

    /// Removes records left half-written (`*.json.tmp`): nothing was moved for them.
    ///
    /// # Errors
    /// When the records directory cannot be listed or a file removed.
    pub fn remove_partial_records(&self) -> Result<usize, Error> {
        let mut removed = 0;
        for name in names(&self.records())? {
            if name.ends_with(TEMP_SUFFIX) {
                let path = self.records().join(&name);
                fs::remove_file(&path).map_err(io("remove", &path))?;
                removed += 1;
            }
        }
        if removed > 0 {
            sync_dir(&self.records())?;
        }
        Ok(removed)
    }

    /// Writes `record` durably (temporary file, fsync, rename, fsync of the directory),
    /// replacing an earlier record of the same file.
    ///
    /// # Errors
    /// On any filesystem failure (the record is then absent or the earlier one).
    pub fn write_record(&self, record: &Record) -> Result<(), Error> {
        let path = self.record_path(&record.file);
        let temp = self
            .records()
            .join(format!("{}{RECORD_SUFFIX}{TEMP_SUFFIX}", record.file));
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| Error::Encode(record.file.clone(), e))?;
        {
            let mut f = File::create(&temp).map_err(io("create", &temp))?;
            f.write_all(&bytes).map_err(io("write", &temp))?;
            f.sync_all().map_err(io("fsync", &temp))?;
        }
        fs::rename(&temp, &path).map_err(io("rename", &temp))?;
        sync_dir(&self.records())
    }

    /// Moves `record.file` out of the kubelet's directory into the held directory (one
    /// rename), then makes both directories durable. If the file changed between the scan and
    /// the move, the record is rewritten with the hash of what was moved.
    ///
    /// # Errors
    /// [`Error::Exists`] when a held copy of that name exists (nothing moved); filesystem
    /// failures.
    pub fn move_out(&self, record: &Record) -> Result<(), Error> {
        let from = self.dir.join(&record.file);
        let to = self.held_copy(&record.file);
        if fs::symlink_metadata(&to).is_ok() {
            return Err(Error::Exists(to));
        }
        match fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Gone before the move (removed by someone else): nothing is held, so the
                // record goes too, or it would read as a held copy that was removed.
                self.remove_record(&record.file)?;
                return Err(io("rename", &from)(e));
            }
            Err(e) => return Err(io("rename", &from)(e)),
        }
        sync_dir(&self.dir)?;
        sync_dir(&self.manifests())?;
        if let Some(hash) = file_hash(&to)?
            && hash != record.sha256
        {
            self.write_record(&Record {
                sha256: hash,
                ..record.clone()
            })?;
        }
        Ok(())
    }

    /// Holds `record.file`: the record first, then the move.
    ///
    /// # Errors
    /// As [`Store::write_record`] and [`Store::move_out`].
    pub fn hold(&self, record: &Record) -> Result<(), Error> {
        self.write_record(&Record {
            intent: Intent::Hold,
            ..record.clone()
        })?;
        self.move_out(record)
    }

    /// Links the held copy back to the original path; fails with [`Error::Exists`] (nothing
    /// changed) when a file is there.
    ///
    /// # Errors
    /// [`Error::Exists`]; filesystem failures.
    pub fn link_back(&self, file: &str) -> Result<(), Error> {
        let from = self.held_copy(file);
        let to = self.dir.join(file);
        match fs::hard_link(&from, &to) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(Error::Exists(to)),
            Err(e) => Err(io("link", &from)(e)),
        }
    }

    /// Carries out `action` for `entry` (as [`super::held::decide_entry`] decided it under
    /// this store's lock); conflicts and entries to keep change nothing.
    ///
    /// # Errors
    /// Filesystem failures.
    pub fn apply(&self, entry: &HeldEntry, action: &EntryAction) -> Result<Applied, Error> {
        let record = match &entry.record {
            Some(Ok(r)) => Some(r),
            _ => None,
        };
        match (action, record) {
            (EntryAction::Restore, Some(r)) => Ok(match self.restore(r)? {
                Restored::Done => Applied::Restored,
                Restored::FileAtOriginalPath => Applied::Nothing,
            }),
            (EntryAction::FinishHold, Some(r)) => {
                self.move_out(r)?;
                Ok(Applied::Held)
            }
            (EntryAction::FinishRestore, _) => {
                self.finish_restore(&entry.file)?;
                Ok(Applied::Restored)
            }
            (EntryAction::DropRecord, _) => {
                self.remove_record(&entry.file)?;
                Ok(Applied::Forgotten)
            }
            _ => Ok(Applied::Nothing),
        }
    }

    /// Removes the held copy of `file` (once it is back at its original path).
    ///
    /// # Errors
    /// Filesystem failures (an absent copy is not one).
    pub fn remove_held_copy(&self, file: &str) -> Result<(), Error> {
        let path = self.held_copy(file);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.manifests()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("remove", &path)(e)),
        }
    }

    /// Removes the record of `file`.
    ///
    /// # Errors
    /// Filesystem failures (an absent record is not one).
    pub fn remove_record(&self, file: &str) -> Result<(), Error> {
        let path = self.record_path(file);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.records()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("remove", &path)(e)),
        }
    }

    /// Puts `record.file` back: the intent first, then the link, then the cleanup.
    ///
    /// # Errors
    /// Filesystem failures (a file at the original path is not one: [`Restored`] says it).
    pub fn restore(&self, record: &Record) -> Result<Restored, Error> {
        self.write_record(&Record {
            intent: Intent::Restore,
            ..record.clone()
        })?;
        match self.link_back(&record.file) {
            Ok(()) => {}
            Err(Error::Exists(_)) => return Ok(Restored::FileAtOriginalPath),
            Err(e) => return Err(e),
        }
        self.finish_restore(&record.file)?;
        Ok(Restored::Done)
    }

    /// The end of a restore: the held copy, then the record.
    ///
    /// # Errors
    /// Filesystem failures.
    pub fn finish_restore(&self, file: &str) -> Result<(), Error> {
        self.remove_held_copy(file)?;
        self.remove_record(file)
    }
}

#[cfg(unix)]
fn set_owner_only(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io("chmod", dir))
}

#[cfg(not(unix))]
fn set_owner_only(_dir: &Path) -> Result<(), Error> {
    Ok(())
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
