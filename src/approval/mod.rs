//! Approval: everything between a gate saying *ask* and an approved action
//! reaching the act stage's last-mile check, in one place.
//!
//! The agent loop asks through the [`Approver`] trait (declared beside the
//! loop in [`crate::agent`], so the loop does not depend on this module);
//! [`Approvals`] is the daemon's implementation. It sends the question
//! either to the flight desk ([`flight`]: plans written before asking,
//! decided from the editor or a terminal, run exactly once, also after a
//! restart) or, for ACP clients without flight plans, to the client's
//! permission prompt ([`acp`], with the remembered "always" choices). The
//! last-mile check itself (the exact action hashes to what was approved,
//! and neither the gates nor the session mode deny it now) lives once, in
//! `agent::act::execute_action`, for live turns and for plans run
//! later alike.
//!
//! Layering: this module sits in the agent layer beside `agent/` (the desk
//! runs approved plans through `execute_action`), and talks to the client
//! only through [`crate::rpc::Outgoing`].

pub mod acp;
pub mod flight;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::action::Action;
use crate::agent::act::ActStatus;
use crate::agent::{AgentEnv, ApprovalOutcome, ApprovalRequest, Approver, NotBegun};
use crate::rpc::Outgoing;

pub use acp::AcpPrompt;
pub use flight::{DecideError, FlightDesk, ModeSource};

/// The daemon's approver: the flight desk or the ACP permission prompt,
/// as the editor asked in `initialize`.
pub struct Approvals {
    pub desk: Arc<FlightDesk>,
    pub prompt: AcpPrompt,
    /// The client takes flight plans (set by `initialize`; read at each
    /// question, so a client that re-initialises switches at once).
    flight_plans: AtomicBool,
}

impl Approvals {
    /// `modes` tells the desk a session's mode now, for plans run after
    /// their turn is gone.
    pub fn new(env: Arc<AgentEnv>, out: Outgoing, modes: ModeSource) -> Approvals {
        Approvals {
            desk: FlightDesk::new(env.clone(), out.clone(), modes),
            prompt: AcpPrompt::new(env, out),
            flight_plans: AtomicBool::new(false),
        }
    }

    pub fn set_flight_plans(&self, on: bool) {
        self.flight_plans.store(on, Ordering::SeqCst);
    }

    pub fn uses_flight_plans(&self) -> bool {
        self.flight_plans.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Approver for Approvals {
    async fn approve(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        if self.uses_flight_plans() {
            self.desk.ask(request, cancel).await
        } else {
            self.prompt.ask(request, cancel).await
        }
    }

    fn begin(&self, session_id: &str, tool_call_id: &str, action: &Action) -> Result<(), NotBegun> {
        self.desk.begin(session_id, tool_call_id, action)
    }

    fn plan_id(&self, session_id: &str, tool_call_id: &str) -> Option<String> {
        self.desk.plan_of(session_id, tool_call_id)
    }

    fn settle(&self, session_id: &str, tool_call_id: &str, status: &ActStatus, text: &str) {
        self.desk.settle(session_id, tool_call_id, status, text)
    }
}
