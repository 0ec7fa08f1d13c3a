//! passepartout-skills

pub mod skills;
pub mod tools;

use passepartout_foundation::action;
use passepartout_foundation::org;
use passepartout_foundation::paths;
use passepartout_foundation::util;
use passepartout_llm::llm;
use passepartout_policy::gates;
use passepartout_sandbox::sandbox;
