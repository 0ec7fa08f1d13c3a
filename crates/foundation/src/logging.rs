//! Where the daemon's log lines go.
//!
//! stderr gets warnings and errors only: ACP clients such as acp.el (under
//! agent-shell) show every stderr line of the agent as an error. The full
//! record (`info` for passepartout, `warn` for libraries) goes to a log file,
//! `<state_dir>/logs/passepartout.log` unless `log_file` says otherwise.
//! `PASSEPARTOUT_LOG` (an `EnvFilter`) sets both filters, as it always did.
//!
//! The file is written by a thread of its own through a bounded, lossy queue
//! ([`QueuedWriter`], at most [`QUEUE_LINES`] lines), so a slow disk never
//! blocks a turn; lines dropped because the queue was full are counted and
//! the count is written into the file with the next line that gets through.
//! The thread starts with the first line logged and the queue grows with
//! what it holds (tracing-appender's queue was allocated and written whole,
//! and its thread started, before the daemon's first reply). The file
//! rotates by size ([`RotatingFile`]): a daemon that lives for weeks in one
//! Emacs needs a bound on bytes, not on days.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The log file rotates when it would grow past this many bytes.
pub const ROTATE_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated files kept (`passepartout.log.1` … `.3`).
pub const KEEP_ROTATED: usize = 3;
/// Lines waiting for the writer thread; more are dropped and counted.
pub const QUEUE_LINES: usize = 4 * 1024;
/// How long the daemon's exit waits for queued lines to reach the file.
pub const FLUSH_AT_EXIT_WITHIN: Duration = Duration::from_secs(1);

/// The stderr filter when `PASSEPARTOUT_LOG` is not set. rmcp reports an
/// MCP server that exits or closes its pipe at ERROR; our mcp module says
/// what matters about a server, so rmcp stays off stderr.
/// Lines about what a client or a second daemon did (a late permission
/// answer, unreadable input, another daemon on the state directory) use
/// [`CLIENT_CAUSED`] and stay off stderr too.
/// A state the client is told of by other means (an MCP server that needs
/// a login) uses [`REPORTED_STATE`]: in the file, not on stderr.
pub const STDERR_DEFAULT: &str = "warn,rmcp=off,client_caused=off,reported_state=off";

/// The `tracing` target of lines caused by a client or by another daemon:
/// written to the log file, never to stderr (an ACP client shows every
/// stderr line as an error).
pub const CLIENT_CAUSED: &str = "client_caused";
/// The `tracing` target of a state the person is shown another way (an
/// MCP server's "needs login", in the server states): written to the log
/// file, never to stderr, where ACP clients would show it as an error.
pub const REPORTED_STATE: &str = "reported_state";
/// The log file's filter when `PASSEPARTOUT_LOG` is not set.
pub const FILE_DEFAULT: &str = "warn,passepartout=info";

/// Libraries whose debug and trace output carries whole requests (the
/// `initialize` params with API keys, HTTP headers with bearer tokens):
/// held at `info` whatever `PASSEPARTOUT_LOG` says.
const QUIET_LIBRARIES: &[&str] = &[
    "jsonrpsee=info",
    "jsonrpsee_core=info",
    "jsonrpsee_server=info",
    "reqwest=info",
    "hyper=info",
    "hyper_util=info",
    "h2=info",
    "rustls=info",
];

/// Why the log file could not be opened (the daemon then logs to stderr
/// only, and says so there).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot open the log file {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The default log file under a state directory.
pub fn default_log_file(state_dir: &Path) -> PathBuf {
    crate::paths::StateDir::new(state_dir).log_file()
}

/// `PASSEPARTOUT_LOG` if set and valid, else `default`; secrets-carrying
/// libraries are held at `info` either way.
fn filter(default: &str) -> EnvFilter {
    let mut filter = std::env::var("PASSEPARTOUT_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    for directive in QUIET_LIBRARIES {
        if let Ok(d) = directive.parse() {
            filter = filter.add_directive(d);
        }
    }
    filter
}

/// Keeps the log file's writer thread alive; dropping it writes out what is
/// queued, waiting at most [`FLUSH_AT_EXIT_WITHIN`].
pub struct LogGuard {
    writer: Option<QueuedWriter>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(writer) = &self.writer {
            writer.flush_within(FLUSH_AT_EXIT_WITHIN);
        }
    }
}

/// The log file of a one-shot command, once [`cli_log_to`] names it.
static CLI_FILE: OnceLock<QueuedWriter> = OnceLock::new();

/// The one-shot commands' logging (`run`, `mcp list`, `providers`, …):
/// warnings and errors go to stderr through [`Plain`] (one `⚠` block per
/// event: no timestamp, no module path), the full record to the log file
/// once the configuration names it ([`cli_log_to`]; lines before that reach
/// stderr only). The filters are the daemon's: libraries such as rmcp stay
/// off stderr, their detail is in the file.
pub fn init_cli() {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .event_format(Plain)
        .with_filter(filter(STDERR_DEFAULT));
    let file = tracing_subscriber::fmt::layer()
        .with_writer(LateFile)
        .with_ansi(false)
        .with_filter(filter(FILE_DEFAULT));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}

/// From now on, a one-shot command's full log goes to `path` (rotated like
/// the daemon's). A second call keeps the first file.
pub fn cli_log_to(path: &Path) -> Result<(), LogError> {
    if CLI_FILE.get().is_some() {
        return Ok(());
    }
    let file =
        RotatingFile::open(path, ROTATE_BYTES, KEEP_ROTATED).map_err(|source| LogError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    let _ = CLI_FILE.set(QueuedWriter::new(file, QUEUE_LINES));
    Ok(())
}

/// Write out what a one-shot command queued for its log file, waiting at
/// most [`FLUSH_AT_EXIT_WITHIN`].
pub fn flush_cli() {
    if let Some(writer) = CLI_FILE.get() {
        writer.flush_within(FLUSH_AT_EXIT_WITHIN);
    }
}

/// The writer of [`CLI_FILE`]: lines before it is set are not kept.
#[derive(Clone, Copy)]
struct LateFile;

impl Write for LateFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match CLI_FILE.get() {
            Some(writer) => writer.clone().write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LateFile {
    type Writer = LateFile;

    fn make_writer(&'a self) -> LateFile {
        *self
    }
}

/// A log line for a person at a terminal: `⚠ message (field: value, …)`,
/// further lines of the message indented under it; control characters
/// escaped. Nothing else: the time, level and module path are in the log
/// file.
pub struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = PlainFields::default();
        event.record(&mut fields);
        writer.write_str(&fields.render())
    }
}

/// An event's message and other fields, as [`Plain`] shows them.
#[derive(Default)]
struct PlainFields {
    message: String,
    others: Vec<(String, String)>,
}

impl PlainFields {
    fn render(&self) -> String {
        let mut text = format!("⚠ {}", self.message.trim());
        if !self.others.is_empty() {
            let others: Vec<String> = self
                .others
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            text.push_str(&format!(" ({})", others.join(", ")));
        }
        let text = crate::util::terminal::escape_text(&text).replace('\n', "\n  ");
        format!("{text}\n")
    }
}

impl tracing::field::Visit for PlainFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            name => self.others.push((name.to_string(), value.to_string())),
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            name => self.others.push((name.to_string(), format!("{value:?}"))),
        }
    }
}

/// The daemon's logging: warnings to stderr, the full record to `path`.
/// If the file cannot be opened, stderr alone is set up and the error is
/// returned for the caller to report.
pub fn init_daemon(path: &Path) -> (LogGuard, Result<(), LogError>) {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .with_ansi(false)
        .with_filter(filter(STDERR_DEFAULT));
    let file = match RotatingFile::open(path, ROTATE_BYTES, KEEP_ROTATED) {
        Ok(f) => f,
        Err(source) => {
            let _ = tracing_subscriber::registry().with(stderr).try_init();
            let error = LogError::Open {
                path: path.to_path_buf(),
                source,
            };
            return (LogGuard { writer: None }, Err(error));
        }
    };
    let writer = QueuedWriter::new(file, QUEUE_LINES);
    let file_layer = tracing_subscriber::fmt::layer()
        .with_writer(writer.clone())
        .with_ansi(false)
        .with_filter(filter(FILE_DEFAULT));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file_layer)
        .try_init();
    (
        LogGuard {
            writer: Some(writer),
        },
        Ok(()),
    )
}

/// What the writer thread is handed.
enum Queued {
    Line(Vec<u8>),
    /// Everything before this is written: say so.
    Flush(mpsc::SyncSender<()>),
}

/// A lossy, bounded queue of log lines in front of a writer thread that
/// starts with the first line. Each `write` is one line (the fmt layer
/// writes an event whole); past `limit` queued lines it is dropped and
/// counted, and the file says how many with the next line written.
#[derive(Clone)]
pub struct QueuedWriter {
    shared: Arc<QueueShared>,
}

struct QueueShared {
    tx: mpsc::Sender<Queued>,
    /// The receiver and the file, until the writer thread takes them.
    unstarted: Mutex<Option<(mpsc::Receiver<Queued>, RotatingFile)>>,
    started: OnceLock<()>,
    queued: Arc<AtomicUsize>,
    limit: usize,
    dropped: Arc<AtomicUsize>,
}

impl QueuedWriter {
    pub fn new(mut file: RotatingFile, limit: usize) -> QueuedWriter {
        let dropped = Arc::new(AtomicUsize::new(0));
        file.dropped = dropped.clone();
        let (tx, rx) = mpsc::channel();
        QueuedWriter {
            shared: Arc::new(QueueShared {
                tx,
                unstarted: Mutex::new(Some((rx, file))),
                started: OnceLock::new(),
                queued: Arc::default(),
                limit,
                dropped,
            }),
        }
    }

    /// Start the writer thread unless it runs already. If no thread can
    /// be started, lines stay queued (up to the limit, then dropped and
    /// counted) and the reason goes to stderr once.
    fn start(&self) {
        self.shared.started.get_or_init(|| {
            let taken = crate::util::sync::lock(&self.shared.unstarted).take();
            let Some((rx, mut file)) = taken else { return };
            let queued = self.shared.queued.clone();
            let spawned = std::thread::Builder::new()
                .name("passepartout-log".into())
                .spawn(move || {
                    for item in rx {
                        match item {
                            Queued::Line(line) => {
                                queued.fetch_sub(1, Ordering::Relaxed);
                                // Nowhere to report a failed log write.
                                let _ = file.write_all(&line);
                            }
                            Queued::Flush(done) => {
                                let _ = file.flush();
                                let _ = done.send(());
                            }
                        }
                    }
                });
            if let Err(e) = spawned {
                eprintln!("passepartout: cannot start the log writer thread: {e}");
            }
        });
    }

    /// Wait until the lines queued so far are written, at most `within`.
    pub fn flush_within(&self, within: Duration) {
        if self.shared.started.get().is_none() {
            return;
        }
        let (done, written) = mpsc::sync_channel(1);
        if self.shared.tx.send(Queued::Flush(done)).is_ok() {
            let _ = written.recv_timeout(within);
        }
    }

    /// Lines dropped so far because the queue was full.
    pub fn dropped_lines(&self) -> usize {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Write for QueuedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let shared = &self.shared;
        if shared.queued.fetch_add(1, Ordering::Relaxed) >= shared.limit {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(buf.len());
        }
        if shared.tx.send(Queued::Line(buf.to_vec())).is_err() {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
        }
        self.start();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for QueuedWriter {
    type Writer = QueuedWriter;

    fn make_writer(&'a self) -> QueuedWriter {
        self.clone()
    }
}

/// A log file that rotates by size: when a write would take it past
/// `limit` bytes, `name` becomes `name.1` (`.1` becomes `.2`, …, keeping
/// `keep`) and a new `name` is started. Created 0600 in a 0700 directory:
/// log lines name files, commands and sessions.
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    written: u64,
    limit: u64,
    keep: usize,
    /// The queue's count of dropped lines (shared with [`QueuedWriter`]).
    dropped: Arc<AtomicUsize>,
    reported: usize,
}

impl RotatingFile {
    pub fn open(path: &Path, limit: u64, keep: usize) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let file = open_append(path)?;
        let written = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file,
            written,
            limit,
            keep,
            dropped: Arc::default(),
            reported: 0,
        })
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.keep == 0 {
            self.file = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&self.path)?;
        } else {
            for n in (1..self.keep).rev() {
                let from = self.rotated(n);
                if from.exists() {
                    fs::rename(&from, self.rotated(n + 1))?;
                }
            }
            fs::rename(&self.path, self.rotated(1))?;
            self.file = open_append(&self.path)?;
        }
        self.written = 0;
        Ok(())
    }

    fn write_counted(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.written > 0 && self.written + buf.len() as u64 > self.limit {
            self.rotate()?;
        }
        self.file.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    // An existing file keeps its mode on open: tighten it.
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > self.reported {
            let note = format!(
                "passepartout: {} log lines dropped: the log queue was full (limit {QUEUE_LINES} lines)\n",
                dropped - self.reported
            );
            self.reported = dropped;
            self.write_counted(note.as_bytes())?;
        }
        self.write_counted(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_keeps_a_bounded_number_of_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs").join("p.log");
        let mut f = RotatingFile::open(&path, 100, 2).unwrap();
        for i in 0..10 {
            f.write_all(format!("{i:0>39}\n").as_bytes()).unwrap(); // 40 bytes a line
        }
        f.flush().unwrap();
        // 10 lines of 40 bytes, 2 per file: the last 2 files kept + current.
        let current = fs::read_to_string(&path).unwrap();
        assert_eq!(current.lines().count(), 2, "{current}");
        assert!(current.ends_with(&format!("{:0>39}\n", 9)));
        assert!(dir.path().join("logs/p.log.1").exists());
        assert!(dir.path().join("logs/p.log.2").exists());
        assert!(!dir.path().join("logs/p.log.3").exists());
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("logs")), 0o700);
    }

    /// No thread before the first line; lines reach the file in order
    /// once flushed; past the limit they are dropped and counted, and the
    /// file says how many with the next line written.
    #[test]
    fn the_queue_starts_its_thread_with_the_first_line_and_counts_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.log");
        let file = RotatingFile::open(&path, 1 << 20, 1).unwrap();
        let mut writer = QueuedWriter::new(file, 100);
        assert!(writer.shared.started.get().is_none(), "no thread yet");
        for i in 0..10 {
            writer.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        assert!(writer.shared.started.get().is_some());
        writer.flush_within(Duration::from_secs(10));
        let text = fs::read_to_string(&path).unwrap();
        let expected: String = (0..10).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);

        let full = QueuedWriter::new(RotatingFile::open(&path, 1 << 20, 1).unwrap(), 0);
        let mut w = full.clone();
        w.write_all(b"lost\n").unwrap();
        w.write_all(b"lost\n").unwrap();
        assert_eq!(full.dropped_lines(), 2);
        // The count reaches the file with the next line that gets through.
        let mut file = RotatingFile::open(&path, 1 << 20, 1).unwrap();
        file.dropped.store(2, Ordering::Relaxed);
        file.write_all(b"after\n").unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.ends_with(&format!(
                "passepartout: 2 log lines dropped: the log queue was full (limit {QUEUE_LINES} lines)\nafter\n"
            )),
            "{text}"
        );
    }

    #[test]
    fn reopening_counts_what_is_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        fs::write(&path, vec![b'x'; 90]).unwrap();
        let mut f = RotatingFile::open(&path, 100, 1).unwrap();
        f.write_all(&[b'y'; 20]).unwrap();
        assert_eq!(fs::read(&path).unwrap(), vec![b'y'; 20]);
        assert_eq!(fs::read(dir.path().join("p.log.1")).unwrap().len(), 90);
    }
}
