//! The sandbox for commands the model proposes: bubblewrap, a pure argument
//! builder ([`bwrap`]), a probe that says whether it can run here and what
//! to do when it cannot ([`probe`]), a runner that holds any program to
//! a time limit and an output cap ([`runner`]), and the network a granted
//! run gets without the host's loopback ([`network`]).
//!
//! The shell actuator (`crate::actuators::shell`) puts them together; it
//! fails closed when the probe says the sandbox is unavailable.

pub mod bwrap;
pub mod enforce;
pub mod limits;
pub mod network;
pub mod overlay;
pub mod probe;
pub mod runner;
pub mod spawn;
pub mod surface;

pub use bwrap::{
    bwrap_args, bwrap_args_with, Boundary, SandboxSpec, SpecError, SystemEntry, SystemLayout,
};
pub use limits::{LimitOverrides, ResourceLimits};
pub use probe::{probe, probe_with, SandboxStatus};
pub use runner::{run, run_limited, RunError, RunLimits, RunOutcome};
