//! Framing: how JSON-RPC messages are cut out of a byte stream.
//!
//! Two framings are spoken and the client chooses by its first bytes:
//! `Content-Length` headers (LSP style, what Emacs's `jsonrpc.el` sends) and
//! newline-delimited JSON (what ACP clients send). Replies use the same
//! framing, so the detected choice is shared between the reading and the
//! writing half through a [`FramingCell`].
//!
//! Garbage never ends the stream: the decoder reports it as
//! [`Frame::Garbage`] (so the server can answer `-32700`) and resynchronises on
//! the next plausible frame.
//!
//! Memory is bounded by [`MAX_FRAME_BYTES`] in both framings: an NDJSON line
//! that grows past it is reported and then thrown away as it arrives (never
//! buffered), and a `Content-Length` above it is reported at once. Each
//! byte is scanned once: the decoder remembers how far it has looked for a
//! newline or a header end, so a long frame arriving in small reads costs
//! linear, not quadratic, time.

use std::io;
use std::sync::{Arc, OnceLock};

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// The two supported framings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: N\r\n\r\n` followed by N bytes of JSON.
    ContentLength,
    /// One JSON text per line.
    Ndjson,
}

/// The framing detected on input, shared with the output side.
#[derive(Debug, Clone, Default)]
pub struct FramingCell(Arc<OnceLock<Framing>>);

impl FramingCell {
    pub fn get(&self) -> Option<Framing> {
        self.0.get().copied()
    }
    /// Fix the framing (first caller wins).
    pub fn set(&self, framing: Framing) -> Framing {
        *self.0.get_or_init(|| framing)
    }
}

/// One decoded unit of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message body (not yet parsed as JSON).
    Message(String),
    /// Bytes that could not be framed; the text says what was wrong.
    Garbage(String),
}

/// Frames larger than this are refused (and skipped) rather than buffered.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

const HEADER_NAME: &[u8] = b"content-length";

/// A header block longer than this is garbage (real ones are ~40 bytes).
const MAX_HEADER_BYTES: usize = 8 * 1024;

/// A tokio-util codec for both framings.
#[derive(Debug, Clone, Default)]
pub struct FrameCodec {
    framing: FramingCell,
    /// Throwing input away until the next frame starts: the rest of an
    /// oversized NDJSON line (until its newline), or the body of an
    /// oversized Content-Length frame (until the next header). The body is
    /// not skipped by its declared length: a lying length would swallow
    /// every later request.
    discarding: bool,
    /// How many bytes at the front of the buffer are known to hold no
    /// newline (NDJSON) or no header end (Content-Length).
    scanned: usize,
}

impl FrameCodec {
    pub fn new(framing: FramingCell) -> Self {
        FrameCodec {
            framing,
            discarding: false,
            scanned: 0,
        }
    }

    /// A codec whose framing is fixed up front (used for writing to a peer
    /// whose framing we choose, e.g. in tests).
    pub fn fixed(framing: Framing) -> Self {
        let cell = FramingCell::default();
        cell.set(framing);
        Self::new(cell)
    }

    pub fn framing(&self) -> &FramingCell {
        &self.framing
    }

    fn detect(&self, src: &BytesMut) -> Option<Framing> {
        if let Some(f) = self.framing.get() {
            return Some(f);
        }
        let start = src.iter().position(|b| !b.is_ascii_whitespace())?;
        let rest = &src[start..];
        let n = rest.len().min(HEADER_NAME.len());
        if rest[..n].eq_ignore_ascii_case(&HEADER_NAME[..n]) {
            // Could still be an incomplete header name: decide when sure.
            return (n == HEADER_NAME.len()).then(|| self.framing.set(Framing::ContentLength));
        }
        Some(self.framing.set(Framing::Ndjson))
    }

    fn decode_ndjson(&mut self, src: &mut BytesMut) -> Option<Frame> {
        loop {
            let from = self.scanned.min(src.len());
            let Some(offset) = memchr_newline(&src[from..]) else {
                self.scanned = src.len();
                if self.discarding {
                    src.clear();
                    self.scanned = 0;
                } else if src.len() > MAX_FRAME_BYTES {
                    src.clear();
                    self.scanned = 0;
                    self.discarding = true;
                    return Some(Frame::Garbage(format!(
                        "line longer than the {MAX_FRAME_BYTES}-byte frame limit; skipped"
                    )));
                }
                return None;
            };
            let newline = from + offset;
            self.scanned = 0;
            let line = src.split_to(newline + 1);
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if line.len() - 1 > MAX_FRAME_BYTES {
                return Some(Frame::Garbage(format!(
                    "line longer than the {MAX_FRAME_BYTES}-byte frame limit; skipped"
                )));
            }
            let text = &line[..line.len() - 1];
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(match std::str::from_utf8(text) {
                Ok(s) => Frame::Message(s.to_string()),
                Err(_) => Frame::Garbage("message is not valid UTF-8".into()),
            });
        }
    }

    fn decode_content_length(&mut self, src: &mut BytesMut) -> Option<Frame> {
        if self.discarding {
            // The body of a refused frame: drop everything up to the next
            // header, keeping a tail that could be a header cut in two.
            match find_header_start(src, 0) {
                Some(at) => {
                    src.advance(at);
                    self.discarding = false;
                }
                None => {
                    let keep = HEADER_NAME.len().min(src.len());
                    src.advance(src.len() - keep);
                    return None;
                }
            }
        }
        // Skip leading blank lines some clients leave between frames.
        let blank = src.iter().take_while(|b| b.is_ascii_whitespace()).count();
        if blank > 0 {
            src.advance(blank);
            self.scanned = 0;
        }
        if src.is_empty() {
            return None;
        }
        let n = src.len().min(HEADER_NAME.len());
        if !src[..n].eq_ignore_ascii_case(&HEADER_NAME[..n]) {
            self.scanned = 0;
            return Some(self.resync(src));
        }
        let found = find_header_end(src, self.scanned);
        let too_long = match found {
            Some((header_len, _)) => header_len > MAX_HEADER_BYTES,
            None => src.len() > MAX_HEADER_BYTES,
        };
        if too_long {
            self.scanned = 0;
            src.advance(HEADER_NAME.len());
            let mut frame = self.resync(src);
            if let Frame::Garbage(why) = &mut frame {
                *why = format!("header block longer than {MAX_HEADER_BYTES} bytes ({why})");
            }
            return Some(frame);
        }
        let Some((header_len, sep_len)) = found else {
            // Remember how far we looked (minus a separator cut in two).
            self.scanned = src.len().saturating_sub(3);
            return None;
        };
        let headers = String::from_utf8_lossy(&src[..header_len]).into_owned();
        let length = match parse_content_length(&headers) {
            Ok(len) => len,
            Err(e) => {
                src.advance(header_len + sep_len);
                self.scanned = 0;
                return Some(Frame::Garbage(e.to_string()));
            }
        };
        if length > MAX_FRAME_BYTES {
            src.advance(header_len + sep_len);
            self.scanned = 0;
            self.discarding = true;
            return Some(Frame::Garbage(format!(
                "frame of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
            )));
        }
        // The header end is known: do not look for it again.
        self.scanned = header_len;
        let total = header_len + sep_len + length;
        if src.len() < total {
            src.reserve(total - src.len());
            return None;
        }
        self.scanned = 0;
        src.advance(header_len + sep_len);
        let body = src.split_to(length);
        Some(match String::from_utf8(body.to_vec()) {
            Ok(s) => Frame::Message(s),
            Err(_) => Frame::Garbage("message is not valid UTF-8".into()),
        })
    }

    /// Drop bytes up to the next line that starts a header, reporting them.
    fn resync(&mut self, src: &mut BytesMut) -> Frame {
        let cut = find_header_start(src, 1).unwrap_or(src.len());
        let junk = src.split_to(cut);
        let preview: String = String::from_utf8_lossy(&junk).chars().take(40).collect();
        Frame::Garbage(format!("expected a Content-Length header, got {preview:?}"))
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Where the next `Content-Length` header name starts, at or after `from`.
fn find_header_start(src: &[u8], from: usize) -> Option<usize> {
    if src.len() < HEADER_NAME.len() {
        return None;
    }
    (from..=src.len() - HEADER_NAME.len())
        .find(|&i| src[i..i + HEADER_NAME.len()].eq_ignore_ascii_case(HEADER_NAME))
}

/// Length of the header block and of its terminating blank line.
/// `from` is where the search may start (earlier bytes were looked at).
fn find_header_end(src: &[u8], from: usize) -> Option<(usize, usize)> {
    // A header block is short: never look past the limit (the buffer may
    // hold many frames, and an LF-only separator never occurs in CRLF ones).
    let src = &src[..src.len().min(MAX_HEADER_BYTES + 4)];
    let from = from.min(src.len());
    let crlf = src[from..]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (from + i, 4));
    // An LF-only separator only matters if it comes before the CRLF one.
    let lf_end = crlf.map_or(src.len(), |(i, _)| (i + 2).min(src.len()));
    let lf = src[from..lf_end.max(from)]
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (from + i, 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Why a Content-Length header block cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum HeaderError {
    #[error("malformed header line {0:?}")]
    Line(String),
    #[error("invalid Content-Length value {0:?}")]
    Length(String),
    #[error("header block without Content-Length")]
    Missing,
}

fn parse_content_length(headers: &str) -> Result<usize, HeaderError> {
    for line in headers.lines() {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HeaderError::Line(line.trim().to_string()));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            return value
                .trim()
                .parse::<usize>()
                .map_err(|_| HeaderError::Length(value.trim().to_string()));
        }
    }
    Err(HeaderError::Missing)
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, io::Error> {
        Ok(match self.detect(src) {
            None => None,
            Some(Framing::Ndjson) => self.decode_ndjson(src),
            Some(Framing::ContentLength) => self.decode_content_length(src),
        })
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, io::Error> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        if self.framing.get() == Some(Framing::Ndjson) && !src.iter().all(u8::is_ascii_whitespace) {
            // A last line without its newline is still a message.
            src.extend_from_slice(b"\n");
            return self.decode(src);
        }
        src.clear();
        Ok(None)
    }
}

impl Encoder<String> for FrameCodec {
    type Error = io::Error;

    fn encode(&mut self, body: String, dst: &mut BytesMut) -> Result<(), io::Error> {
        match self.framing.get().unwrap_or(Framing::ContentLength) {
            Framing::ContentLength => {
                dst.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                dst.extend_from_slice(body.as_bytes());
            }
            Framing::Ndjson => {
                // serde_json never emits raw newlines, so one line is one message.
                dst.extend_from_slice(body.as_bytes());
                dst.extend_from_slice(b"\n");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut FrameCodec, input: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    fn msg(s: &str) -> Frame {
        Frame::Message(s.to_string())
    }

    #[test]
    fn detects_content_length_and_decodes_several_frames_in_one_read() {
        let mut c = FrameCodec::default();
        let input = b"Content-Length: 7\r\n\r\n{\"a\":1}content-length: 2\r\nContent-Type: application/json\r\n\r\n{}";
        assert_eq!(decode_all(&mut c, input), vec![msg("{\"a\":1}"), msg("{}")]);
        assert_eq!(c.framing().get(), Some(Framing::ContentLength));
    }

    #[test]
    fn content_length_counts_bytes_not_characters() {
        let mut c = FrameCodec::default();
        let body = "{\"t\":\"é→\"}";
        let input = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        assert_eq!(decode_all(&mut c, input.as_bytes()), vec![msg(body)]);
    }

    #[test]
    fn split_frames_are_reassembled() {
        let mut c = FrameCodec::default();
        let whole = b"Content-Length: 11\r\n\r\n{\"id\":true}";
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for byte in whole.iter() {
            buf.extend_from_slice(&[*byte]);
            if let Some(f) = c.decode(&mut buf).unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames, vec![msg("{\"id\":true}")]);
    }

    #[test]
    fn a_partial_header_name_waits_for_more_bytes() {
        let mut c = FrameCodec::default();
        let mut buf = BytesMut::from(&b"Cont"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert_eq!(c.framing().get(), None);
        buf.extend_from_slice(b"ent-Length: 2\r\n\r\n{}");
        assert_eq!(c.decode(&mut buf).unwrap(), Some(msg("{}")));
    }

    #[test]
    fn recovers_from_garbage_then_reads_a_good_frame() {
        let mut c = FrameCodec::fixed(Framing::ContentLength);
        let input = b"hello there\r\nContent-Length: 2\r\n\r\n{}";
        let frames = decode_all(&mut c, input);
        assert_eq!(frames.len(), 2);
        assert!(
            matches!(&frames[0], Frame::Garbage(m) if m.contains("expected a Content-Length header"))
        );
        assert_eq!(frames[1], msg("{}"));
    }

    #[test]
    fn bad_content_length_value_is_reported_and_skipped() {
        let mut c = FrameCodec::fixed(Framing::ContentLength);
        let input = b"Content-Length: abc\r\n\r\nContent-Length: 2\r\n\r\n{}";
        let frames = decode_all(&mut c, input);
        assert_eq!(
            frames,
            vec![
                Frame::Garbage("invalid Content-Length value \"abc\"".into()),
                msg("{}")
            ]
        );
    }

    #[test]
    fn oversized_frames_are_skipped_without_buffering() {
        let mut c = FrameCodec::fixed(Framing::ContentLength);
        let mut buf =
            BytesMut::from(format!("Content-Length: {}\r\n\r\n", MAX_FRAME_BYTES + 1).as_bytes());
        let first = c.decode(&mut buf).unwrap();
        assert!(matches!(first, Some(Frame::Garbage(m)) if m.contains("exceeds")));
        buf.extend_from_slice(&vec![b'x'; MAX_FRAME_BYTES + 1]);
        buf.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
        assert_eq!(c.decode(&mut buf).unwrap(), Some(msg("{}")));
    }

    #[test]
    fn ndjson_lines_blank_lines_and_crlf() {
        let mut c = FrameCodec::default();
        let input = b"{\"a\":1}\n\n{\"b\":2}\r\nnot json\n";
        assert_eq!(
            decode_all(&mut c, input),
            vec![msg("{\"a\":1}"), msg("{\"b\":2}"), msg("not json")]
        );
        assert_eq!(c.framing().get(), Some(Framing::Ndjson));
    }

    #[test]
    fn ndjson_last_line_without_newline_at_eof() {
        let mut c = FrameCodec::default();
        let mut buf = BytesMut::from(&b"{\"a\":1}"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert_eq!(c.decode_eof(&mut buf).unwrap(), Some(msg("{\"a\":1}")));
    }

    #[test]
    fn invalid_utf8_is_garbage_not_an_error() {
        let mut c = FrameCodec::default();
        let frames = decode_all(&mut c, b"{\"a\":\"\xff\"}\n{}\n");
        assert_eq!(
            frames,
            vec![
                Frame::Garbage("message is not valid UTF-8".into()),
                msg("{}")
            ]
        );
    }

    #[test]
    fn a_lying_content_length_does_not_swallow_later_requests() {
        let mut c = FrameCodec::fixed(Framing::ContentLength);
        let input = b"Content-Length: 99999999999\r\n\r\n{\"id\":1}Content-Length: 2\r\n\r\n{}";
        let frames = decode_all(&mut c, input);
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert!(matches!(&frames[0], Frame::Garbage(m) if m.contains("99999999999")));
        assert_eq!(frames[1], msg("{}"));
    }

    #[test]
    fn an_endless_ndjson_line_is_dropped_not_buffered() {
        let mut c = FrameCodec::fixed(Framing::Ndjson);
        let mut buf = BytesMut::new();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut garbage = 0;
        for _ in 0..(MAX_FRAME_BYTES / chunk.len() + 8) {
            buf.extend_from_slice(&chunk);
            while let Some(f) = c.decode(&mut buf).unwrap() {
                assert!(matches!(&f, Frame::Garbage(m) if m.contains("frame limit")));
                garbage += 1;
            }
            assert!(buf.len() <= MAX_FRAME_BYTES + chunk.len());
        }
        assert_eq!(garbage, 1);
        // The rest of the long line is thrown away as it arrives.
        assert!(buf.len() <= chunk.len(), "{} bytes kept", buf.len());
        buf.extend_from_slice(b"tail of the long line\n{\"a\":1}\n");
        assert_eq!(c.decode(&mut buf).unwrap(), Some(msg("{\"a\":1}")));
    }

    #[test]
    fn a_line_arriving_in_small_reads_is_scanned_once() {
        let mut c = FrameCodec::fixed(Framing::Ndjson);
        let mut buf = BytesMut::new();
        for _ in 0..1000 {
            buf.extend_from_slice(b"0123456789");
            assert_eq!(c.decode(&mut buf).unwrap(), None);
            // The codec remembers how far it looked.
            assert_eq!(c.scanned, buf.len());
        }
        buf.extend_from_slice(b"\n");
        assert!(
            matches!(c.decode(&mut buf).unwrap(), Some(Frame::Message(m)) if m.len() == 10_000)
        );
    }

    #[test]
    fn an_endless_header_block_is_garbage() {
        let mut c = FrameCodec::fixed(Framing::ContentLength);
        let mut input = b"Content-Length: 2\r\nX: ".to_vec();
        input.extend(vec![b'y'; MAX_HEADER_BYTES + 10]);
        input.extend_from_slice(b"\r\n\r\nContent-Length: 2\r\n\r\n{}");
        let frames = decode_all(&mut c, &input);
        assert!(
            matches!(&frames[0], Frame::Garbage(m) if m.contains("header block")),
            "{frames:?}"
        );
        assert_eq!(frames.last(), Some(&msg("{}")));
    }

    #[test]
    fn encodes_in_the_detected_framing() {
        let mut lsp = FrameCodec::fixed(Framing::ContentLength);
        let mut out = BytesMut::new();
        lsp.encode("{\"x\":\"é\"}".into(), &mut out).unwrap();
        assert_eq!(
            &out[..],
            "Content-Length: 10\r\n\r\n{\"x\":\"é\"}".as_bytes()
        );
        let mut nd = FrameCodec::fixed(Framing::Ndjson);
        let mut out = BytesMut::new();
        nd.encode("{}".into(), &mut out).unwrap();
        assert_eq!(&out[..], b"{}\n");
    }
}
