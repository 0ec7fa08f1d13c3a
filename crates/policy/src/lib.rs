//! passepartout-policy

pub mod gates;
pub mod modes;

use passepartout_foundation::action;
use passepartout_foundation::util;
use passepartout_protocol::protocol;
use passepartout_sandbox::control_surface;
use passepartout_transactions::checkpoint;
