//! Shared helpers for the integration tests: the fake model server.
//!
//! The examples include the same file by path (`examples/fake_provider.rs`,
//! the benches) and each uses only part of it, hence the allowance.

#[allow(dead_code)]
pub mod endless_provider;
#[allow(dead_code)]
pub mod fake_provider;
#[allow(dead_code)]
pub mod mcp_echo;
#[allow(dead_code)]
pub mod oauth_server;
#[allow(dead_code)]
pub mod sse_server;
