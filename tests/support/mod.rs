//! Shared helpers for the integration tests.
//!
//! Each test binary compiles this module on its own and uses only part of
//! it, hence the `dead_code` allowance.

#[allow(dead_code)]
pub mod fake_provider;
