//! passepartout-llm

pub mod llm;

use passepartout_foundation::paths;
use passepartout_foundation::util;
use passepartout_protocol::protocol;
