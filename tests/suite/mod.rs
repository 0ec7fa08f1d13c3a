//! One module per area of the integration tests (formerly one test binary
//! each); see `tests/all.rs` for why they share a binary.

mod acp_conformance;
mod agent_turn;
mod attacks_sandbox;
mod attacks_shell;
mod attacks_trust;
mod boundary;
mod bounds;
mod checkpoints;
mod client_fs;
mod discovery;
mod faults;
mod flight_plans;
mod hostile;
mod layers;
mod mcp;
mod modes;
mod plans;
mod providers;
mod sandbox;
mod session_configure;
mod sessions;
mod skills;
mod skills_live;
mod slash_commands;
mod stdio_protocol;
mod text_protocol;
mod transactions;
