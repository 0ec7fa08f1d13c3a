//! TEMPORARY stub until the llm branch lands.
use super::{ChatRequest, EventStream, ProviderError};
use tokio_util::sync::CancellationToken;
pub struct Cascade;
pub struct Answered {
    pub provider: String,
    pub native_tools: bool,
    pub events: EventStream,
}
#[derive(Debug, thiserror::Error)]
pub enum CascadeError {
    #[error("cancelled")]
    Cancelled,
    #[error("all failed")]
    AllFailed {
        attempts: Vec<(String, ProviderError)>,
    },
    #[error("{0}")]
    Fatal(ProviderError),
}
impl Cascade {
    pub async fn stream(
        &self,
        _req: &ChatRequest,
        _cancel: CancellationToken,
    ) -> Result<Answered, CascadeError> {
        Err(CascadeError::Cancelled)
    }
}
