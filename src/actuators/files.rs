//! The files actuator: reads, lists, searches and writes inside the session's
//! working directory. Paths were confined when the action was planned; they
//! are confined again here because a flight-plan edit may have changed them.

use std::fmt::Write as _;
use std::path::Path;

use crate::action::{Action, Effect};
use crate::tools::confine_to;

use super::{ActContext, ActError, ActOutput, Actuator};

/// Largest file the actuator will return whole to the model.
const MAX_READ_BYTES: u64 = 256 * 1024;
/// Most directory entries or search hits listed.
const MAX_ENTRIES: usize = 1000;

pub struct FilesActuator;

#[async_trait::async_trait]
impl Actuator for FilesActuator {
    fn target(&self) -> &str {
        "files"
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let confine = |p: &Path| confine_to(&ctx.cwd, &p.to_string_lossy());
        let out = match &action.effect {
            Effect::ReadFile { path } => match confine(path) {
                Ok(p) => read_file(&p).await,
                Err(e) => ActOutput::error(e.to_string()),
            },
            Effect::ListDir { path } => match confine(path) {
                Ok(p) => list_dir(&p, &ctx.cwd).await,
                Err(e) => ActOutput::error(e.to_string()),
            },
            Effect::WriteFile { path, content } => match confine(path) {
                Ok(p) => write_file(&p, content).await,
                Err(e) => ActOutput::error(e.to_string()),
            },
            Effect::SearchText { path, pattern } => match confine(path) {
                Ok(p) => search(&p, pattern, &ctx.cwd).await,
                Err(e) => ActOutput::error(e.to_string()),
            },
            other => {
                return Err(ActError::Unsupported {
                    target: "files".into(),
                    effect: effect_name(other),
                })
            }
        };
        Ok(out)
    }
}

fn effect_name(e: &Effect) -> String {
    serde_json::to_value(e)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_else(|| "this effect".into())
}

async fn read_file(path: &Path) -> ActOutput {
    let meta = match tokio::fs::metadata(path).await {
        Ok(m) => m,
        Err(e) => return ActOutput::error(format!("cannot read {}: {e}", path.display())),
    };
    if meta.is_dir() {
        return ActOutput::error(format!(
            "{} is a directory; list it instead",
            path.display()
        ));
    }
    if meta.len() > MAX_READ_BYTES {
        return ActOutput::error(format!(
            "{} is {} bytes, more than the {MAX_READ_BYTES}-byte read limit; search it instead",
            path.display(),
            meta.len()
        ));
    }
    match tokio::fs::read(path).await {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => ActOutput::ok(text),
            Err(_) => ActOutput::error(format!("{} is not UTF-8 text", path.display())),
        },
        Err(e) => ActOutput::error(format!("cannot read {}: {e}", path.display())),
    }
}

async fn list_dir(path: &Path, cwd: &Path) -> ActOutput {
    let mut rd = match tokio::fs::read_dir(path).await {
        Ok(rd) => rd,
        Err(e) => return ActOutput::error(format!("cannot list {}: {e}", path.display())),
    };
    let mut entries = Vec::new();
    while let Ok(Some(entry)) = rd.next_entry().await {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().await.map(|t| t.is_dir()).unwrap_or(false);
        entries.push(if is_dir { format!("{name}/") } else { name });
    }
    entries.sort();
    let total = entries.len();
    entries.truncate(MAX_ENTRIES);
    let shown = display_relative(path, cwd);
    let mut text = format!("{shown}: {total} entries\n");
    for e in &entries {
        let _ = writeln!(text, "{e}");
    }
    if total > MAX_ENTRIES {
        let _ = writeln!(text, "[… {} more entries not shown]", total - MAX_ENTRIES);
    }
    ActOutput::ok(text)
}

async fn write_file(path: &Path, content: &str) -> ActOutput {
    if let Some(parent) = path.parent() {
        if let Err(e) = tokio::fs::create_dir_all(parent).await {
            return ActOutput::error(format!("cannot create {}: {e}", parent.display()));
        }
    }
    match tokio::fs::write(path, content).await {
        Ok(()) => ActOutput::ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            path.display()
        )),
        Err(e) => ActOutput::error(format!("cannot write {}: {e}", path.display())),
    }
}

/// Plain substring search, line by line, over text files under `path`.
async fn search(path: &Path, pattern: &str, cwd: &Path) -> ActOutput {
    let path = path.to_path_buf();
    let cwd = cwd.to_path_buf();
    let needle = pattern.to_string();
    let result = tokio::task::spawn_blocking(move || {
        let pattern = needle;
        let mut hits = Vec::new();
        let mut stack = vec![path];
        while let Some(p) = stack.pop() {
            if hits.len() >= MAX_ENTRIES {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
                if matches!(name.as_deref(), Some(".git" | "target" | "node_modules")) {
                    continue;
                }
                if let Ok(rd) = std::fs::read_dir(&p) {
                    let mut children: Vec<_> =
                        rd.filter_map(Result::ok).map(|e| e.path()).collect();
                    children.sort();
                    stack.extend(children.into_iter().rev());
                }
            } else if meta.is_file() && meta.len() <= MAX_READ_BYTES {
                let Ok(text) = std::fs::read_to_string(&p) else {
                    continue;
                };
                for (n, line) in text.lines().enumerate() {
                    if line.contains(&pattern) {
                        hits.push(format!(
                            "{}:{}: {}",
                            display_relative(&p, &cwd),
                            n + 1,
                            line.trim()
                        ));
                        if hits.len() >= MAX_ENTRIES {
                            break;
                        }
                    }
                }
            }
        }
        hits
    })
    .await
    .unwrap_or_default();
    if result.is_empty() {
        ActOutput::ok(format!("no matches for `{pattern}`"))
    } else {
        ActOutput::ok(result.join("\n"))
    }
}

fn display_relative(path: &Path, cwd: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}
