//! The integration tests, linked into one test binary.
//!
//! Each file under `tests/` used to be its own binary, and every one of them
//! linked the whole crate and its dependencies: most of the suite's build
//! time was spent linking the same code over and over. Here the test files
//! are modules of `suite`, sharing one copy of the harness (the daemon
//! client) and the support code (the fake model server). Filter as before by
//! module path: `cargo test --test all -- suite::sessions::`.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;
mod suite;
mod support;
