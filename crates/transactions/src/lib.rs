//! passepartout-transactions

pub mod checkpoint;

use passepartout_foundation::action;
use passepartout_foundation::paths;
use passepartout_foundation::util;
use passepartout_protocol::protocol;
use passepartout_sandbox::control_surface;
use passepartout_sandbox::sandbox;
