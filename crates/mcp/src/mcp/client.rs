//! passepartout's side of an MCP session: who it says it is (`clientInfo`
//! names passepartout and its version), what it offers (roots: the session
//! directory; elicitation, form and URL, routed to the person by
//! [`super::elicitation`]), and what it does with a server's notifications
//! (a changed tool, prompt or resource list is listed again, so the next
//! turn sees it).

// Roots are deprecated upstream (SEP-2577) and still asked for by servers.
#![allow(deprecated)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CustomNotification, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
    ListRootsResult, ProgressNotificationParam, Prompt, Resource, Root, RootsCapabilities, Tool,
    UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ClientHandler, RoleClient};

use super::elicitation::{Asker, MCP_ELICITATION_COMPLETE};
use crate::util::sync::lock;

/// How long a re-list after a `list_changed` notification may take.
const RELIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most entries kept of any one list (tools, prompts, resources): a server
/// cannot grow the daemon's memory or the model's tool belt without bound.
pub const MAX_LISTED: usize = 512;

/// Where a call's `notifications/progress` go.
pub type ProgressFn = Arc<dyn Fn(&ProgressNotificationParam) + Send + Sync>;

/// The call in flight on one server, whose `notifications/progress` go to
/// its function. A session's calls run one after the other, so a server
/// has at most one; the slot is filled for the call and emptied after.
pub type ProgressSlot = Arc<Mutex<Option<ProgressFn>>>;

/// Fills a [`ProgressSlot`] for one call; dropping it empties the slot.
pub struct ProgressRoute {
    slot: ProgressSlot,
}

impl ProgressRoute {
    pub fn new(slot: &ProgressSlot, to: ProgressFn) -> ProgressRoute {
        *lock(slot) = Some(to);
        ProgressRoute { slot: slot.clone() }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        *lock(&self.slot) = None;
    }
}

/// What a server offers, as last listed.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
}

/// The handler rmcp calls for one server's requests and notifications.
#[derive(Clone)]
pub struct PassepartoutClient {
    server: String,
    root: PathBuf,
    catalog: Arc<Mutex<Catalog>>,
    /// Who asks the person for this server (None: `mcp list`, no person;
    /// every question is declined).
    asker: Option<Asker>,
    /// Where the progress of the call in flight goes.
    progress: ProgressSlot,
}

impl PassepartoutClient {
    pub fn new(
        server: &str,
        root: &Path,
        catalog: Arc<Mutex<Catalog>>,
        asker: Option<Asker>,
        progress: ProgressSlot,
    ) -> Self {
        PassepartoutClient {
            server: server.to_string(),
            root: root.to_path_buf(),
            catalog,
            asker,
            progress,
        }
    }
}

/// `file://` URI of a directory (percent-encoding what a URI cannot hold).
fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// Which list to refresh.
#[derive(Clone, Copy, Debug)]
enum List {
    Tools,
    Prompts,
    Resources,
}

/// The server did not list its tools (the reason, said for a person).
#[derive(Debug, thiserror::Error)]
#[error("listing its tools failed: {0}")]
pub struct ListError(String);

/// List what the server offers (tools always; prompts and resources when
/// it declares them), each list capped at [`MAX_LISTED`].
pub async fn list_catalog(peer: &Peer<RoleClient>) -> Result<Catalog, ListError> {
    let mut tools = peer
        .list_all_tools()
        .await
        .map_err(|e| ListError(super::readable_service_error(&e)))?;
    tools.truncate(MAX_LISTED);
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let mut catalog = Catalog {
        tools,
        ..Catalog::default()
    };
    if caps.as_ref().is_some_and(|c| c.prompts.is_some()) {
        catalog.prompts = peer.list_all_prompts().await.unwrap_or_default();
        catalog.prompts.truncate(MAX_LISTED);
    }
    if caps.as_ref().is_some_and(|c| c.resources.is_some()) {
        catalog.resources = peer.list_all_resources().await.unwrap_or_default();
        catalog.resources.truncate(MAX_LISTED);
    }
    Ok(catalog)
}

impl PassepartoutClient {
    /// Re-list in the background: a request sent from inside the
    /// notification handler would wait on the loop that runs it.
    fn relist(&self, which: List, peer: Peer<RoleClient>) {
        let catalog = self.catalog.clone();
        let server = self.server.clone();
        tokio::spawn(async move {
            let listed = tokio::time::timeout(RELIST_TIMEOUT, async {
                match which {
                    List::Tools => peer.list_all_tools().await.map(|mut t| {
                        t.truncate(MAX_LISTED);
                        lock(&catalog).tools = t;
                    }),
                    List::Prompts => peer.list_all_prompts().await.map(|mut p| {
                        p.truncate(MAX_LISTED);
                        lock(&catalog).prompts = p;
                    }),
                    List::Resources => peer.list_all_resources().await.map(|mut r| {
                        r.truncate(MAX_LISTED);
                        lock(&catalog).resources = r;
                    }),
                }
            })
            .await;
            match listed {
                Ok(Ok(())) => {
                    tracing::info!(%server, ?which, "MCP server's list changed; listed again")
                }
                Ok(Err(e)) => tracing::info!(%server, ?which, "listing again failed: {e}"),
                Err(_) => tracing::info!(%server, ?which, "listing again took too long"),
            }
        });
    }
}

impl ClientHandler for PassepartoutClient {
    fn get_info(&self) -> ClientConfig {
        // Roots: deprecated upstream (SEP-2577), still what servers ask for.
        let mut capabilities = ClientCapabilities::default();
        capabilities.roots = Some(RootsCapabilities::default());
        // Always offered: a question the person's client cannot show is
        // declined at once (and the person told), never left hanging.
        let mut elicitation = ElicitationCapability::default();
        elicitation.form = Some(FormElicitationCapability::new().with_schema_validation(true));
        elicitation.url = Some(UrlElicitationCapability::new());
        capabilities.elicitation = Some(elicitation);
        ClientConfig::new(
            capabilities,
            Implementation::new("passepartout", env!("CARGO_PKG_VERSION"))
                .with_title("passepartout"),
        )
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let name = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.root.display().to_string());
        Ok(ListRootsResult::new(vec![
            Root::new(file_uri(&self.root)).with_name(name)
        ]))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match &self.asker {
            Some(asker) => Ok(asker.ask(request, context.ct).await),
            None => Ok(ElicitResult::new(ElicitationAction::Decline)),
        }
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        if notification.method == MCP_ELICITATION_COMPLETE {
            if let (Some(asker), Some(params)) = (&self.asker, &notification.params) {
                asker.completed(params);
            }
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Progress with no call in flight (late, or of a call that did not
        // ask for it) is dropped.
        let to = lock(&self.progress).clone();
        if let Some(to) = to {
            to(&params);
        }
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        self.relist(List::Tools, context.peer);
    }

    async fn on_prompt_list_changed(&self, context: NotificationContext<RoleClient>) {
        self.relist(List::Prompts, context.peer);
    }

    async fn on_resource_list_changed(&self, context: NotificationContext<RoleClient>) {
        self.relist(List::Resources, context.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_file_uris() {
        assert_eq!(
            file_uri(Path::new("/tmp/a b/ü")),
            "file:///tmp/a%20b/%C3%BC"
        );
    }
}
