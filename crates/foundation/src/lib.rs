//! passepartout-foundation

pub mod action;
pub mod logging;
pub mod org;
pub mod paths;
pub mod state_lock;
pub mod util;
