//! Small helpers every layer needs, each written once: timestamps, line diffs,
//! atomic file writes, a poison-tolerant lock, the lexical path normaliser,
//! the inotify directory watch and the background JSONL appender. Like
//! `paths`, this module sits at the bottom of the layer table and imports
//! nothing else of the crate, so any module may use it without closing a
//! loop.

pub mod diff;
pub mod dir_watch;
pub mod fs;
pub mod glob;
pub mod jsonl;
pub mod path;
pub mod sync;
pub mod terminal;
pub mod time;
