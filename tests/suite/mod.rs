//! One module per area of the integration tests (formerly one test binary
//! each); see `tests/all.rs` for why they share a binary.

mod acp_conformance;
mod agent_skills;
mod agent_turn;
mod agents_md;
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
mod host_side;
mod hostile;
mod layers;
mod mcp;
mod mcp_features;
mod mcp_limits;
mod mcp_trust;
mod modes;
mod plans;
mod process_limit;
mod providers;
mod run_cli;
mod sandbox;
mod session_configure;
mod sessions;
mod skills;
mod skills_live;
mod slash_commands;
mod stdio_protocol;
mod text_protocol;
mod transactions;
