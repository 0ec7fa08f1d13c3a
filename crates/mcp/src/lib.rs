//! passepartout-mcp

pub mod mcp;

use passepartout_foundation::action;
use passepartout_foundation::logging;
use passepartout_foundation::paths;
use passepartout_foundation::util;
use passepartout_llm::llm;
use passepartout_protocol::protocol;
use passepartout_protocol::rpc;
use passepartout_skills::skills;
use passepartout_skills::tools;
