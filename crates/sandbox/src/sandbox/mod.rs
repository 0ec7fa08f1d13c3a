//! The sandbox for commands the model proposes: bubblewrap, a pure argument
//! builder ([`bwrap`]), a probe that says whether it can run here and what
//! to do when it cannot ([`probe`]), a runner that holds any program to
//! a time limit and an output cap ([`runner`]), and the network a granted
//! run gets without the host's loopback ([`network`]), with the person's
//! listed local services ([`local_ports`]) and the package registries by
//! grant ([`registry_proxy`]).
//!
//! What the sandbox shows of the person's machine (their toolchains, a
//! `/tmp` per session, `/etc` built from a list, their git identity) is in
//! [`toolchains`], [`session_tmp`], [`etc_view`] and [`git_identity`].
//!
//! The shell actuator (`crate::actuators::shell`) puts them together; it
//! fails closed when the probe says the sandbox is unavailable.

pub mod bwrap;
pub mod enforce;
pub mod etc_view;
pub mod git_identity;
pub mod limits;
pub mod local_ports;
pub mod network;
pub mod overlay;
pub mod probe;
pub mod registry_proxy;
pub mod runner;
pub mod session_tmp;
pub mod spawn;
pub mod surface;
pub mod toolchains;

pub use bwrap::{
    bwrap_args, bwrap_args_with, Boundary, LocalReach, SandboxSpec, SpecError, SystemEntry,
    SystemLayout,
};
pub use limits::{LimitOverrides, ResourceLimits};
pub use probe::{probe, probe_with, SandboxStatus};
pub use runner::{run, run_limited, RunError, RunLimits, RunOutcome};
