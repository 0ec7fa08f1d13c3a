//! passepartout-sandbox

pub mod control_surface;
pub mod sandbox;

use passepartout_foundation::paths;
use passepartout_foundation::util;
