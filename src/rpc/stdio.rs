//! The daemon's stdin and stdout, read and written on the task that asks
//! whenever that cannot block, and on tokio's blocking pool otherwise.
//!
//! `tokio::io::stdin()`/`stdout()` hand every read and every write to the
//! blocking pool. A daemon's first exchange then starts two threads before
//! its first reply (one sits in `read` for the next request, so the reply's
//! `write` needs another), ~0.2–0.3 ms each on the 2-core machine we measure
//! on, competing with the reply for a core (docs/performance.md, "Cold
//! start"). Here a read is made at once when `poll(2)` says input is waiting
//! (or the end of it), and a write is made at once when stdout is a pipe
//! with room for it (at most [`PIPE_BUF`] bytes, which a pipe with room
//! takes whole without blocking) or a regular file; otherwise, as before,
//! on the blocking pool (also when stderr is the same pipe, `2>&1`: our own
//! stderr could take the room the `poll` saw). Either way one operation runs at a time per
//! direction, so bytes keep their order.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

/// The most a read asks for at once (what the frame reader offers).
pub const READ_CHUNK: usize = 64 * 1024;
/// The most a write made at once hands a pipe: `PIPE_BUF`, which Linux
/// pipes take whole once `poll` says they have room.
pub const PIPE_BUF: usize = 4096;
/// The most a write handed to the blocking pool takes at once.
pub const BLOCKING_WRITE_CHUNK: usize = 2 * 1024 * 1024;

/// Whether `fd` is ready for `events` now (a zero-timeout `poll`). An
/// error or hang-up counts as ready: the read or write then reports it.
fn ready_now(fd: RawFd, events: libc::c_short) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid `pollfd` on the stack, count 1, no timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n >= 0 {
            return n > 0 && pfd.revents != 0;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

fn fd(raw: RawFd) -> BorrowedFd<'static> {
    // SAFETY: 0, 1 and 2 stay open for the life of the process (nothing
    // here closes them; a closed one makes read/write/fstat fail with
    // EBADF, reported); tests pass fds they keep open.
    unsafe { BorrowedFd::borrow_raw(raw) }
}

/// A read of `raw` into memory not yet initialised: what it read is the first
/// `n` bytes of `buf`, initialised.
fn read_fd_uninit(raw: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd(raw), &mut *buf) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok((read, _)) => return Ok(read.len()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// A read of `raw` into `data`'s spare capacity, growing its length by what was
/// read (never zero-filling the rest).
fn read_fd_spare(raw: RawFd, data: &mut Vec<u8>) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd(raw), rustix::buffer::spare_capacity(data)) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

fn write_fd(raw: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        match rustix::io::write(fd(raw), buf) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

fn write_all_fd(raw: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match write_fd(raw, buf)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

fn joined<T>(r: Result<T, tokio::task::JoinError>) -> io::Result<T> {
    r.map_err(|e| io::Error::other(format!("stdio task failed: {e}")))
}

/// The process's stdin as an [`AsyncRead`].
pub struct Stdin {
    raw: RawFd,
    /// Bytes a blocking read brought that the caller had no room for.
    left: Vec<u8>,
    taken: usize,
    pending: Option<JoinHandle<(Vec<u8>, io::Result<usize>)>>,
}

/// The daemon's stdin (fd 0).
pub fn stdin() -> Stdin {
    Stdin::from_raw(0)
}

impl Stdin {
    fn from_raw(raw: RawFd) -> Stdin {
        Stdin {
            raw,
            left: Vec::new(),
            taken: 0,
            pending: None,
        }
    }
}

impl AsyncRead for Stdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(pending) = this.pending.as_mut() {
            let (data, result) = joined(ready!(Pin::new(pending).poll(cx)))?;
            this.pending = None;
            let n = result?;
            if n == 0 {
                // The end of input, said now: a terminal says it once
                // (Ctrl-D), and a second read would wait for more.
                return Poll::Ready(Ok(()));
            }
            this.left = data;
            this.left.truncate(n);
            this.taken = 0;
        }
        if this.taken < this.left.len() {
            let n = out.remaining().min(this.left.len() - this.taken);
            out.put_slice(&this.left[this.taken..this.taken + n]);
            this.taken += n;
            return Poll::Ready(Ok(()));
        }
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if ready_now(this.raw, libc::POLLIN) {
            // At most READ_CHUNK: the caller's spare room may be far larger
            // (a frame reader's buffer grown for a long line), and filling
            // it whole would make every page of it resident.
            let want = out.remaining().min(READ_CHUNK);
            // Read into the spare room as it is, not zeroed first: zeroing
            // 64 KiB made 16 fresh pages resident before the first request
            // was read (the first read of a cold start brings one line).
            // SAFETY: `read(2)` only writes bytes into the slice, and only
            // the `n` bytes it reports written are marked initialised.
            let spare = unsafe { &mut out.unfilled_mut()[..want] };
            let n = read_fd_uninit(this.raw, spare)?;
            // SAFETY: `read_fd_uninit` initialised the first `n` bytes.
            unsafe { out.assume_init(n) };
            out.advance(n);
            return Poll::Ready(Ok(()));
        }
        // Nothing waiting: the read that waits for it goes to the pool.
        let (raw, want) = (this.raw, out.remaining().min(READ_CHUNK));
        let mut handle = tokio::task::spawn_blocking(move || {
            let mut data = Vec::with_capacity(want);
            let result = read_fd_spare(raw, &mut data);
            (data, result)
        });
        // Registers the waker; the result comes with the next poll.
        match Pin::new(&mut handle).poll(cx) {
            Poll::Pending => {
                this.pending = Some(handle);
                Poll::Pending
            }
            Poll::Ready(done) => {
                let (data, result) = joined(done)?;
                let n = result?;
                this.left = data;
                this.left.truncate(n);
                let first = out.remaining().min(n);
                out.put_slice(&this.left[..first]);
                this.taken = first;
                Poll::Ready(Ok(()))
            }
        }
    }
}

/// How stdout takes a write made on the task.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sink {
    /// A pipe: at most [`PIPE_BUF`] bytes, when `poll` says it has room.
    Pipe,
    /// A regular file: any write, at once.
    File,
    /// Anything else (a terminal, a socket): always on the blocking pool.
    Other,
}

/// The process's stdout as an [`AsyncWrite`].
pub struct Stdout {
    raw: RawFd,
    sink: Sink,
    pending: Option<JoinHandle<io::Result<()>>>,
}

/// The daemon's stdout (fd 1); its stderr (fd 2) may share the pipe.
pub fn stdout() -> Stdout {
    Stdout::from_raw(1, Some(2))
}

impl Stdout {
    /// `raw` written; `also_written` another of our fds that may be the
    /// same pipe (stderr, with `2>&1`): then a write between our `poll`
    /// and our `write` could fill the room the poll saw, and a write on
    /// the task could block a runtime thread, so that pipe goes through
    /// the pool.
    fn from_raw(raw: RawFd, also_written: Option<RawFd>) -> Stdout {
        let sink = match rustix::fs::fstat(fd(raw)) {
            Ok(st) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::Fifo => {
                    match also_written.map(|o| rustix::fs::fstat(fd(o))) {
                        Some(Ok(other))
                            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino) =>
                        {
                            Sink::Other
                        }
                        _ => Sink::Pipe,
                    }
                }
                rustix::fs::FileType::RegularFile => Sink::File,
                _ => Sink::Other,
            },
            Err(_) => Sink::Other,
        };
        Stdout {
            raw,
            sink,
            pending: None,
        }
    }

    /// Wait for the write on the pool, if any; its error is this call's.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(pending) = self.pending.as_mut() {
            let result = joined(ready!(Pin::new(pending).poll(cx)));
            self.pending = None;
            result??;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match this.sink {
            Sink::File => return Poll::Ready(write_fd(this.raw, buf)),
            Sink::Pipe if ready_now(this.raw, libc::POLLOUT) => {
                let n = buf.len().min(PIPE_BUF);
                return Poll::Ready(write_fd(this.raw, &buf[..n]));
            }
            _ => {}
        }
        // No room now (or not a pipe): the pool waits for it; the bytes
        // are taken now and an error comes with the next call.
        let n = buf.len().min(BLOCKING_WRITE_CHUNK);
        let (raw, data) = (this.raw, buf[..n].to_vec());
        this.pending = Some(tokio::task::spawn_blocking(move || {
            write_all_fd(raw, &data)
        }));
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_pending(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_pending(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pipe() -> (std::io::PipeReader, std::io::PipeWriter) {
        std::io::pipe().unwrap()
    }

    /// Input already waiting is read on the task (no blocking-pool
    /// thread); input that comes later through the pool; then the end.
    #[tokio::test]
    async fn reads_waiting_input_at_once_and_later_input_through_the_pool() {
        let (r, mut w) = pipe();
        let mut input = Stdin::from_raw(r.as_raw_fd());
        w.write_all(b"first").unwrap();
        let mut buf = [0u8; 16];
        let n = input.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"first");
        assert!(input.pending.is_none(), "read at once");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            w.write_all(b"second").unwrap();
            drop(w);
        });
        let mut rest = Vec::new();
        input.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"second");
        writer.join().unwrap();
        drop(r);
    }

    /// A read into a large buffer not yet initialised initialises only what
    /// it brought: zeroing the rest first made 16 fresh pages resident
    /// before a cold start's first request (one short line) was read.
    #[tokio::test]
    async fn a_read_initialises_only_the_bytes_it_brings() {
        let (r, mut w) = pipe();
        let mut input = Stdin::from_raw(r.as_raw_fd());
        w.write_all(b"{\"id\":1}\n").unwrap();
        let mut room = vec![std::mem::MaybeUninit::<u8>::uninit(); 2 * READ_CHUNK];
        let mut buf = ReadBuf::uninit(&mut room);
        std::future::poll_fn(|cx| Pin::new(&mut input).poll_read(cx, &mut buf))
            .await
            .unwrap();
        assert!(input.pending.is_none(), "read at once");
        assert_eq!(buf.filled(), b"{\"id\":1}\n");
        assert_eq!(buf.initialized().len(), buf.filled().len());
        // Later input, read on the pool, is whole and in order as well.
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            w.write_all(b"{\"id\":2}\n").unwrap();
        });
        std::future::poll_fn(|cx| Pin::new(&mut input).poll_read(cx, &mut buf))
            .await
            .unwrap();
        assert_eq!(buf.filled(), b"{\"id\":1}\n{\"id\":2}\n");
        writer.join().unwrap();
    }

    /// A reader with a small buffer gets a pool read's bytes in order.
    #[tokio::test]
    async fn a_pool_read_larger_than_the_caller_buffer_is_handed_out_in_order() {
        let (r, mut w) = pipe();
        let mut input = Stdin::from_raw(r.as_raw_fd());
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            w.write_all(b"0123456789").unwrap();
        });
        let mut got = Vec::new();
        let mut small = [0u8; 3];
        while got.len() < 10 {
            let n = input.read(&mut small).await.unwrap();
            got.extend_from_slice(&small[..n]);
        }
        assert_eq!(got, b"0123456789");
        writer.join().unwrap();
    }

    /// stdout and stderr on one pipe (`2>&1`): writes go through the pool,
    /// since a write to the other end could take the room `poll` saw.
    #[tokio::test]
    async fn a_pipe_shared_with_stderr_is_written_through_the_pool() {
        let (mut r, w) = pipe();
        let twin = w.try_clone().unwrap();
        let (_other_r, other_w) = pipe();
        assert_eq!(
            Stdout::from_raw(w.as_raw_fd(), Some(other_w.as_raw_fd())).sink,
            Sink::Pipe
        );
        let mut output = Stdout::from_raw(w.as_raw_fd(), Some(twin.as_raw_fd()));
        assert_eq!(output.sink, Sink::Other);
        output.write_all(b"shared").await.unwrap();
        output.flush().await.unwrap();
        drop((w, twin, output));
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"shared");
    }

    /// A pipe with room takes writes on the task; a full one through the
    /// pool, and every byte arrives in order.
    #[tokio::test]
    async fn writes_to_a_pipe_keep_their_order_whether_it_has_room_or_not() {
        let (mut r, w) = pipe();
        let mut output = Stdout::from_raw(w.as_raw_fd(), None);
        assert_eq!(output.sink, Sink::Pipe);
        output.write_all(b"hello ").await.unwrap();
        assert!(output.pending.is_none(), "written at once");
        // Far more than a pipe holds (64 KiB): the rest waits for the reader.
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let expected = [b"hello ".as_slice(), &big].concat();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut chunk = [0u8; 8192];
            while all.len() < expected.len() {
                let n = r.read(&mut chunk).unwrap();
                assert!(n > 0);
                all.extend_from_slice(&chunk[..n]);
            }
            assert!(all == expected, "bytes out of order");
        });
        output.write_all(&big).await.unwrap();
        output.flush().await.unwrap();
        reader.join().unwrap();
        drop(w);
    }

    /// A write that fails on the pool (the reader is gone) is reported.
    #[tokio::test]
    async fn a_broken_pipe_is_reported() {
        let (r, w) = pipe();
        drop(r);
        let mut output = Stdout::from_raw(w.as_raw_fd(), None);
        let failed = async {
            output.write_all(b"x").await?;
            output.flush().await
        }
        .await;
        assert!(failed.is_err());
    }
}
