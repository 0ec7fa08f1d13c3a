//! The one background line appender behind the audit log and the session
//! journals: a writer thread owns the open files and does every write, so
//! no fsync ever blocks the async runtime. Callers queue lines through a
//! bounded channel ([`QUEUE_LIMIT`]); past it they wait, so memory stays
//! bounded when the disk is slow. Each line is one `write` with `O_APPEND`
//! (it lands whole at the end); the fsync policy is per line
//! ([`Appender::append`] with `fsync`) or per request ([`Appender::sync`]).
//! Files are created 0600.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Lines waiting for the writer thread before senders wait for it.
pub const QUEUE_LIMIT: usize = 4096;

/// Files kept open by the writer; beyond this many the cache is emptied.
const OPEN_FILES: usize = 64;

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

/// A handle on one writer thread; clones share it. The thread ends when
/// the last handle is dropped, after writing what was queued.
#[derive(Clone)]
pub struct Appender {
    name: &'static str,
    tx: SyncSender<Command>,
}

impl std::fmt::Debug for Appender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Appender")
            .field("name", &self.name)
            .finish()
    }
}

impl Appender {
    /// Start a writer thread called `name` (it names the thread and the
    /// log lines about failed writes).
    pub fn start(name: &'static str) -> io::Result<Appender> {
        let (tx, rx) = sync_channel(QUEUE_LIMIT);
        std::thread::Builder::new()
            .name(format!("{name}-writer"))
            .spawn(move || writer(name, rx))?;
        Ok(Appender { name, tx })
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
        self.tx.send(command).map_err(|_| WriterGone(self.name))
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

fn writer(name: &str, rx: Receiver<Command>) {
    let mut files: HashMap<PathBuf, File> = HashMap::new();
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
                            tracing::error!("{name}: cannot open {}: {e}", path.display());
                            continue;
                        }
                    },
                };
                let written = file.write_all(line.as_bytes()).and_then(|_| {
                    if fsync {
                        file.sync_data()
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = written {
                    tracing::error!("{name}: cannot write {}: {e}", path.display());
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
