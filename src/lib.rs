//! passepartout: a local-first, safety-first LLM agent that lives beside Emacs.
//!
//! The map of modules is in `docs/architecture.md`.

pub mod action;
pub mod actuators;
pub mod gates;
pub mod llm;
pub mod skills;
pub mod tools;
