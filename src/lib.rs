//! passepartout: a local-first, safety-first LLM agent that lives beside Emacs.
//!
//! The map of modules is in `docs/architecture.md`.

pub mod action;
pub mod actuators;
pub mod agent;
pub mod approval;
pub mod audit;
pub mod budget;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod control_surface;
pub mod gates;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod modes;
pub mod org;
pub mod paths;
pub mod plans;
pub mod protocol;
pub mod rpc;
pub mod sandbox;
pub mod server;
pub mod session_config;
pub mod sessions;
pub mod setup;
pub mod skills;
pub mod state_lock;
pub mod tools;
pub mod toolsets;
pub mod util;
