//! The one background line appender behind the audit log and the session
//! journals: a writer thread owns the open files and does every write, so
//! no fsync ever blocks the async runtime. Callers queue lines through a
//! bounded channel ([`QUEUE_LIMIT`]); past it they wait, so memory stays
//! bounded when the disk is slow. Each line is one `write` with `O_APPEND`
//! (it lands whole at the end); the fsync policy is per line
//! ([`Appender::append`] with `fsync`) or per request ([`Appender::sync`]).
//! Files are created 0600.
//!
//! A failed write (a full disk) never leaves half a record in front of the
//! next one: the file is truncated back to where the record began, or, when
//! that fails too, the next record starts on a fresh line, so a reader loses
//! only the broken line. While records are being lost, the listener set with
//! [`on_loss`] hears of it (the daemon tells its client), once when losses
//! start and once when writes succeed again.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

/// Lines waiting for the writer thread before senders wait for it.
pub const QUEUE_LIMIT: usize = 4096;

/// Files kept open by the writer; beyond this many the cache is emptied.
const OPEN_FILES: usize = 64;

/// Records start or stop being lost by one writer thread.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LossReport {
    /// The writer's name (`audit`, `session`).
    pub writer: &'static str,
    /// The file the last failed (or first good) write went to.
    pub path: PathBuf,
    /// `true`: records are being lost now; `false`: writing works again.
    pub losing: bool,
    /// Why the first lost record was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Records lost so far in this episode.
    pub lost: u64,
}

/// Hears every [`LossReport`].
pub type LossListener = Arc<dyn Fn(&LossReport) + Send + Sync>;

/// One listener for the process: a daemon has one client to tell, and its
/// writers (the audit log's is started lazily, deep below the server) need
/// not each be handed it.
static LISTENER: Mutex<Option<LossListener>> = Mutex::new(None);

/// Tell `listener` when records start and stop being lost (replaces any
/// earlier listener).
pub fn on_loss(listener: LossListener) {
    *super::sync::lock(&LISTENER) = Some(listener);
}

fn report(loss: &LossReport) {
    let listener = super::sync::lock(&LISTENER).clone();
    if let Some(listener) = listener {
        listener(loss);
    }
}

/// Called by the writer thread with the outcome (the file's size).
pub type Done = Box<dyn FnOnce(io::Result<u64>) + Send>;

enum Command {
    Append {
        path: PathBuf,
        line: String,
        fsync: bool,
    },
    Sync {
        path: PathBuf,
        done: Done,
    },
    Replace {
        path: PathBuf,
        text: String,
        done: Done,
    },
}

/// The writer thread was gone (it could not start, or it panicked).
#[derive(Debug, thiserror::Error)]
#[error("the {0} writer thread has stopped")]
pub struct WriterGone(pub &'static str);

/// A handle on one writer thread; clones share it. The thread starts at
/// the first command (a daemon pays for neither the thread nor its queue,
/// allocated whole, before its first reply) and ends when the last handle
/// is dropped, after writing what was queued.
#[derive(Clone)]
pub struct Appender {
    name: &'static str,
    /// `None` inside: the thread could not start.
    tx: Arc<OnceLock<Option<SyncSender<Command>>>>,
}

impl std::fmt::Debug for Appender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Appender")
            .field("name", &self.name)
            .finish()
    }
}

impl Appender {
    /// A writer thread called `name` (it names the thread and the log
    /// lines about failed writes), started at the first command; when it
    /// cannot start, that is logged and every command fails with
    /// [`WriterGone`].
    pub fn start(name: &'static str) -> io::Result<Appender> {
        Ok(Appender {
            name,
            tx: Arc::new(OnceLock::new()),
        })
    }

    /// Queue `line` (which ends in `\n`) for `path`; with `fsync`, the
    /// writer flushes it to disk before the next command. Waits only while
    /// [`QUEUE_LIMIT`] commands are queued.
    pub fn append(&self, path: &Path, line: String, fsync: bool) -> Result<(), WriterGone> {
        self.send(Command::Append {
            path: path.to_path_buf(),
            line,
            fsync,
        })
    }

    /// Once everything queued before it is written: fsync `path` and call
    /// `done` with its size.
    pub fn sync(&self, path: &Path, done: Done) -> Result<(), WriterGone> {
        self.send(Command::Sync {
            path: path.to_path_buf(),
            done,
        })
    }

    /// Once everything queued before it is written: replace `path` with
    /// `text` atomically and durably, and call `done` with its size.
    pub fn replace(&self, path: &Path, text: String, done: Done) -> Result<(), WriterGone> {
        self.send(Command::Replace {
            path: path.to_path_buf(),
            text,
            done,
        })
    }

    fn send(&self, command: Command) -> Result<(), WriterGone> {
        let name = self.name;
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = sync_channel(QUEUE_LIMIT);
            let started = std::thread::Builder::new()
                .name(format!("{name}-writer"))
                .spawn(move || writer(name, rx));
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::error!("{name}: cannot start the writer thread: {e}");
                    None
                }
            }
        });
        match tx {
            Some(tx) => tx.send(command).map_err(|_| WriterGone(name)),
            None => Err(WriterGone(name)),
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Whether one writer is losing records, and how many it lost.
struct Losses {
    name: &'static str,
    lost: u64,
}

impl Losses {
    fn failed(&mut self, path: &Path, error: &io::Error) {
        tracing::error!("{}: cannot write {}: {error}", self.name, path.display());
        self.lost += 1;
        if self.lost == 1 {
            report(&LossReport {
                writer: self.name,
                path: path.to_path_buf(),
                losing: true,
                error: Some(error.to_string()),
                lost: 1,
            });
        }
    }

    fn succeeded(&mut self, path: &Path) {
        if self.lost > 0 {
            tracing::warn!(
                "{}: writing works again after {} lost records",
                self.name,
                self.lost
            );
            report(&LossReport {
                writer: self.name,
                path: path.to_path_buf(),
                losing: false,
                error: None,
                lost: self.lost,
            });
            self.lost = 0;
        }
    }
}

/// Append `line` to `file` whole or not at all: on a failed write the file
/// is truncated back; `torn` (the truncation failed too) makes the next
/// record start on a fresh line.
fn append_whole(file: &mut File, line: &str, torn: &mut bool) -> io::Result<()> {
    let before = file.metadata().map(|m| m.len());
    let written = if *torn {
        file.write_all(b"\n")
            .and_then(|()| file.write_all(line.as_bytes()))
    } else {
        file.write_all(line.as_bytes())
    };
    match written {
        Ok(()) => {
            *torn = false;
            Ok(())
        }
        Err(e) => {
            let repaired = match before {
                Ok(len) => file.set_len(len).is_ok(),
                Err(_) => false,
            };
            // A torn file stays torn until a newline lands after it.
            *torn = *torn || !repaired;
            Err(e)
        }
    }
}

fn writer(name: &'static str, rx: Receiver<Command>) {
    let mut files: HashMap<PathBuf, File> = HashMap::new();
    let mut torn: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut losses = Losses { name, lost: 0 };
    while let Ok(command) = rx.recv() {
        match command {
            Command::Append { path, line, fsync } => {
                if files.len() >= OPEN_FILES && !files.contains_key(&path) {
                    files.clear();
                }
                let file = match files.entry(path.clone()) {
                    std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => match open_append(&path) {
                        Ok(f) => v.insert(f),
                        Err(e) => {
                            losses.failed(&path, &e);
                            continue;
                        }
                    },
                };
                let mut is_torn = torn.contains(&path);
                let written = append_whole(file, &line, &mut is_torn).and_then(|()| {
                    if fsync {
                        file.sync_data()
                    } else {
                        Ok(())
                    }
                });
                if is_torn {
                    torn.insert(path.clone());
                } else {
                    torn.remove(&path);
                }
                match written {
                    Ok(()) => losses.succeeded(&path),
                    Err(e) => losses.failed(&path, &e),
                }
            }
            Command::Sync { path, done } => {
                let result = match files.get(&path) {
                    Some(f) => f.sync_data().and_then(|_| f.metadata()).map(|m| m.len()),
                    None => std::fs::metadata(&path).map(|m| m.len()),
                };
                done(result);
            }
            Command::Replace { path, text, done } => {
                files.remove(&path);
                let result =
                    super::fs::write_atomic(&path, text.as_bytes(), super::fs::Atomic::DURABLE)
                        .map(|()| text.len() as u64);
                done(result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::mpsc;

    fn size_of(appender: &Appender, path: &Path) -> u64 {
        let (tx, rx) = mpsc::channel();
        appender
            .sync(path, Box::new(move |r| tx.send(r.unwrap()).unwrap()))
            .unwrap();
        rx.recv().unwrap()
    }

    #[test]
    fn lines_land_in_order_and_replace_resets() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        let appender = Appender::start("test").unwrap();
        for i in 0..100 {
            appender.append(&a, format!("{i}\n"), i % 10 == 0).unwrap();
            appender.append(&b, format!("b{i}\n"), false).unwrap();
        }
        assert_eq!(size_of(&appender, &a), 290);
        let text = std::fs::read_to_string(&a).unwrap();
        let lines: Vec<u32> = text.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(lines, (0..100).collect::<Vec<_>>());
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let (tx, rx) = mpsc::channel();
        appender
            .replace(
                &b,
                "snapshot\n".into(),
                Box::new(move |r| tx.send(r.unwrap()).unwrap()),
            )
            .unwrap();
        assert_eq!(rx.recv().unwrap(), 9);
        appender.append(&b, "after\n".into(), false).unwrap();
        assert_eq!(size_of(&appender, &b), 15);
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "snapshot\nafter\n");
    }

    #[test]
    fn a_failed_write_leaves_no_partial_record_in_front_of_the_next() {
        // /dev/full takes no byte: the failure is the disk-full one, but
        // its length cannot be truncated, so this covers the fresh-line path.
        let mut full = OpenOptions::new().append(true).open("/dev/full").unwrap();
        let mut torn = false;
        assert!(append_whole(&mut full, "x\n", &mut torn).is_err());
        assert!(torn, "a file that cannot be truncated back is torn");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        std::fs::write(&path, "one\n{\"half").unwrap();
        let mut file = open_append(&path).unwrap();
        append_whole(&mut file, "two\n", &mut torn).unwrap();
        assert!(!torn);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "one\n{\"half\ntwo\n");
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_logged_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let appender = Appender::start("test").unwrap();
        let bad = dir.path().join("missing/dir/x.jsonl");
        appender.append(&bad, "x\n".into(), true).unwrap();
        let good = dir.path().join("ok.jsonl");
        appender.append(&good, "ok\n".into(), true).unwrap();
        assert_eq!(size_of(&appender, &good), 3);
    }
}
