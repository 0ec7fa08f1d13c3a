//! passepartout: a local-first, safety-first LLM agent that lives beside Emacs.
//!
//! This crate is the daemon and the command line; the layers below it are
//! crates of their own (`crates/`), re-exported here under their module
//! names so that `passepartout::sandbox` and `crate::sandbox` name the same
//! thing everywhere. The map is in `docs/architecture.md`.

pub use passepartout_foundation::{action, logging, org, paths, state_lock, util};
pub use passepartout_llm::llm;
pub use passepartout_mcp::mcp;
pub use passepartout_policy::{gates, modes};
pub use passepartout_protocol::{protocol, rpc};
pub use passepartout_sandbox::{control_surface, sandbox};
pub use passepartout_skills::{skills, tools};
pub use passepartout_transactions::checkpoint;

pub mod actuators;
pub mod agent;
pub mod approval;
pub mod audit;
pub mod budget;
pub mod cli;
pub mod config;
pub mod plans;
pub mod server;
pub mod session_config;
pub mod sessions;
pub mod setup;
pub mod toolsets;
