//! Deterministic gates: pure judges of an [`Action`].
//!
//! Every gate returns at most one [`Verdict`]; the engine runs all that apply
//! and the strictest decision wins (`Decision` is `Ord`: allow < ask < deny).
//! The whole trace is kept with the action, so a flight plan can show why a
//! person is being asked.

pub mod verdict;

pub use verdict::{Decision, Verdict};
