//! passepartout-protocol

pub mod protocol;
pub mod rpc;

use passepartout_foundation::logging;
