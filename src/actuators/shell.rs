//! The shell actuator: runs an approved script under bubblewrap.
//!
//! It performs [`Effect::Run`] and nothing else. The script is one argument
//! to its interpreter and the model's values travel only in argv and the
//! environment (see [`crate::sandbox::bwrap`]). The sandbox status is probed
//! when the actuator is built; if bubblewrap cannot run, every execution
//! fails closed with the reason and the fix, unless the person explicitly
//! chose `sandbox = "none"`, in which case every result says so first.
//!
//! Each sandboxed run is held to [`ResourceLimits`] (the configured ones,
//! with the calling tool's `:LIMITS:` on top) and to the project's control
//! surface: what exists is mounted read-only, what the run creates there
//! is removed afterwards and reported (see [`crate::sandbox::surface`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::action::{Action, Effect};
use crate::control_surface::HostPath;
use crate::sandbox::bwrap::{self, bwrap_args_with, Boundary, SandboxSpec, SystemLayout};
use crate::sandbox::git_identity::{GitIdentity, MISSING_IDENTITY_HINT, MISSING_IDENTITY_MARK};
use crate::sandbox::limits::ResourceLimits;
use crate::sandbox::probe::{self, SandboxStatus};
use crate::sandbox::runner::{self, RunError, RunLimits, RunOutcome};
use crate::sandbox::surface::{SurfaceSnapshot, Undone};
use crate::sandbox::toolchains::{ExtraPathError, HomeView};

use super::{ActContext, ActError, ActOutput, Actuator};

/// The first line of every unsandboxed result.
pub const UNSANDBOXED_WARNING: &str =
    "WARNING: ran WITHOUT a sandbox (sandbox = \"none\" in config)";

/// How commands are isolated. The safe choice is the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Under bubblewrap; fail closed when it cannot run.
    #[default]
    Bwrap,
    /// Directly, with the same argv discipline and limits but no isolation.
    /// Only ever from an explicit `sandbox = "none"` setting.
    Unsandboxed,
}

impl FromStr for SandboxMode {
    type Err = String;

    /// The `sandbox` setting of config.toml: `"bwrap"` or `"none"`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bwrap" | "bubblewrap" => Ok(SandboxMode::Bwrap),
            "none" => Ok(SandboxMode::Unsandboxed),
            other => Err(format!(
                "unknown sandbox `{other}`: use \"bwrap\" (default) or \"none\""
            )),
        }
    }
}

/// Runs `Effect::Run` actions for the `shell` target.
pub struct ShellActuator {
    mode: SandboxMode,
    limits: RunLimits,
    resources: ResourceLimits,
    status: SandboxStatus,
    layout: SystemLayout,
    extra_ro: Vec<PathBuf>,
    extra_rw: Vec<PathBuf>,
    /// The daemon's own directories: hidden when a writable bind holds one.
    hosts: Vec<HostPath>,
    /// The person's toolchains, `PATH` and extra paths (or why the extra
    /// paths cannot be shown: every run is refused with it).
    home: Result<HomeView, ExtraPathError>,
    /// `[git] author`, which wins over the person's git configuration.
    git_author: Option<GitIdentity>,
    /// The person's identity by project, once found (a project without one
    /// is asked again at its next run: the person may have set it).
    identities: std::sync::Mutex<BTreeMap<PathBuf, GitIdentity>>,
}

/// Most projects whose git identity a shell actuator remembers.
const MAX_REMEMBERED_IDENTITIES: usize = 64;

impl ShellActuator {
    /// An actuator for this machine: probes the sandbox (once per process;
    /// a trial bwrap run of a few milliseconds, blocking) and the system
    /// layout. Build it at startup, before serving requests.
    pub fn new(mode: SandboxMode, limits: RunLimits) -> Self {
        Self::with_status(mode, limits, probe::probe(), SystemLayout::probe())
    }

    /// An actuator with a given sandbox status and layout (tests, or a
    /// caller that probed already).
    pub fn with_status(
        mode: SandboxMode,
        limits: RunLimits,
        status: SandboxStatus,
        layout: SystemLayout,
    ) -> Self {
        ShellActuator {
            mode,
            limits,
            resources: ResourceLimits::default(),
            status,
            layout,
            extra_ro: Vec::new(),
            extra_rw: Vec::new(),
            hosts: Vec::new(),
            home: Ok(HomeView::default()),
            git_author: None,
            identities: Default::default(),
        }
    }

    /// What the sandbox shows of the person (see `docs/sandbox.md`): the
    /// toolchains and `PATH` of this daemon's environment, their
    /// `[sandbox] read_only`/`writable` paths, and `[git] author`.
    pub fn with_person(
        mut self,
        read_only: &[PathBuf],
        writable: &[PathBuf],
        git_author: Option<GitIdentity>,
    ) -> Self {
        self.home = HomeView::of_this_process(&self.layout.shown_trees(), read_only, writable);
        self.git_author = git_author;
        self
    }

    /// The commit identity for a run in `project`.
    fn git_identity(&self, project: &std::path::Path) -> Option<GitIdentity> {
        if let Some(a) = &self.git_author {
            return Some(a.clone());
        }
        let mut known = crate::util::sync::lock(&self.identities);
        if let Some(id) = known.get(project) {
            return Some(id.clone());
        }
        let id = GitIdentity::of_person(project)?;
        if known.len() >= MAX_REMEMBERED_IDENTITIES {
            known.clear();
        }
        known.insert(project.to_path_buf(), id.clone());
        Some(id)
    }

    /// Further paths every sandboxed run sees, read-only and read-write
    /// (e.g. the memex directory). Absolute; they must exist.
    pub fn with_binds(mut self, extra_ro: Vec<PathBuf>, extra_rw: Vec<PathBuf>) -> Self {
        self.extra_ro = extra_ro;
        self.extra_rw = extra_rw;
        self
    }

    /// The daemon's own directories (see
    /// [`crate::control_surface::host_paths_of`]).
    pub fn with_host_paths(mut self, hosts: Vec<HostPath>) -> Self {
        self.hosts = hosts;
        self
    }

    /// The resource limits of every run (before a tool's own `:LIMITS:`);
    /// [`ResourceLimits::default`] unless set.
    pub fn with_resources(mut self, resources: ResourceLimits) -> Self {
        self.resources = resources;
        self
    }

    /// What the probe found, for the daemon to announce at startup.
    pub fn sandbox_status(&self) -> &SandboxStatus {
        &self.status
    }

    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    async fn run_sandboxed(
        &self,
        bwrap_path: &std::path::Path,
        spec: SandboxSpec,
        limits: &RunLimits,
        resources: &ResourceLimits,
        ctx: &ActContext,
    ) -> Result<ActOutput, ActError> {
        // The control surface as it is now: what exists is mounted
        // read-only, what does not is swept after the run.
        if let Some(host) = crate::control_surface::steering_host_path_around(&ctx.cwd, &self.hosts)
        {
            return Ok(ActOutput::error(format!(
                "refused to run: the working directory lies inside {} ({}), which the sandbox \
                 cannot hide from a run there; start the session in a project directory",
                host.path.display(),
                host.why
            )));
        }
        let surface = SurfaceSnapshot::take(&ctx.cwd);
        let mut hidden = Vec::new();
        // The daemon's own directories inside a writable bind (a session
        // in `$HOME`): hidden. One that does not exist yet is created
        // first (empty, private): the mount needs it, and otherwise the
        // run could create it.
        let mut writable = vec![spec.cwd.clone()];
        writable.extend(spec.extra_rw.iter().cloned());
        for host in crate::control_surface::host_paths_within(&writable, &self.hosts) {
            if let Err(e) = crate::paths::create_private_dir(&host.path) {
                return Ok(ActOutput::error(format!(
                    "refused to run: {} ({}) lies inside the working directory and could not \
                     be protected: {e}",
                    host.path.display(),
                    host.why
                )));
            }
            hidden.push(host.path);
        }
        let mut mounts = surface.mounts().clone();
        // Secrets stay masked unless a person approved this exact run (the
        // gates ask before a command that reads one by name).
        if ctx.approved_by.is_some() {
            mounts.masked.clear();
        }
        let home = match &self.home {
            Ok(h) => h.clone(),
            Err(why) => return Ok(ActOutput::error(format!("refused to run: {why}"))),
        };
        // The session's own /tmp: what one action leaves there is there
        // for the next. Without it (the temporary directory is not
        // writable) the run gets a private tmpfs, as before.
        let session_tmp = match crate::sandbox::session_tmp::dir_for(&ctx.session_id) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!("the session's /tmp cannot be made, this run gets its own: {e}");
                None
            }
        };
        // What the toolchains write goes to the session's layers in that
        // /tmp (see `sandbox::toolchains::LAYERS`); without one, their
        // homes stay read-only.
        let home = match &session_tmp {
            Some(dir) => home.with_session_layers(dir),
            None => home,
        };
        let boundary = Boundary {
            surface: mounts,
            tmp_size: resources.tmp_size,
            hidden,
            session_tmp: session_tmp.clone(),
            env: self
                .git_identity(&ctx.cwd)
                .map(|id| id.env())
                .unwrap_or_default(),
            home,
            reach: bwrap::LocalReach {
                ports: crate::sandbox::local_ports::ports().to_vec(),
                registries: crate::sandbox::registry_proxy::granted_for(&ctx.session_id),
            },
        };
        let boundary_registries = boundary.reach.registries;
        // The copies in the sandbox's /etc follow the host's files.
        crate::sandbox::etc_view::refresh();
        let args = match bwrap_args_with(&spec, &self.layout, &boundary) {
            Ok(args) => args,
            Err(e) => return Ok(ActOutput::error(format!("refused to run: {e}"))),
        };
        // bwrap needs nothing from our environment; --clearenv builds the
        // sandbox's own.
        // A transactional action (see `crate::checkpoint::txn`) runs with
        // the project as the lower layer of an overlay: its writes land in
        // the upper layer, and reach the project only once judged.
        let overlay = crate::sandbox::overlay::current();
        // What this run is, as one JSON value: `scripts/peer-compare.sh`
        // times a bare bwrap with exactly these arguments and this overlay.
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(
                argv = %sandbox_argv_json(bwrap_path, &args, &ctx.cwd, overlay.as_ref()),
                "sandbox argv"
            );
        }
        let outcome = runner::run_limited_in(
            &bwrap_path.to_string_lossy(),
            &args,
            &ctx.cwd,
            Some(&BTreeMap::new()),
            limits,
            resources,
            overlay.as_ref(),
            ctx.cancel.clone(),
        )
        .await;
        // Every process of the sandbox is gone by now (bwrap's pid
        // namespace dies with it), so nothing races the sweep.
        // In an overlay the run created nothing on the host: what it did
        // to the control surface (the fixed list, and what this run's
        // snapshot found: the person's git settings' files, in-progress
        // state, planted repositories) is undone in the upper layer before
        // the changeset is read; a sweep of the project could only remove
        // what the person made meanwhile.
        let undone = match &overlay {
            Some(mount) => surface.sweep_upper(&mount.upper),
            None => surface.sweep(),
        };
        let outcome = outcome
            .map_err(|e| ActError::Unavailable(unavailable_message(&e.to_string(), fix_for(&e))))?;
        let tmp_over = session_tmp
            .zip(resources.tmp_size)
            .and_then(|(dir, limit)| crate::sandbox::session_tmp::enforce_size(&dir, limit));
        let mut out = finish(outcome, None, &undone)?;
        if out.is_error && !spec.network && !boundary_registries {
            if let Some(installer) = installer_in(&spec.script) {
                out.text.push_str(&offline_installer_note(&installer));
            }
        }
        if let Some(note) = tmp_over {
            out = ActOutput::error(format!("{}{note}\n", out.text));
        }
        Ok(out)
    }

    async fn run_unsandboxed(
        &self,
        spec: SandboxSpec,
        limits: &RunLimits,
        resources: &ResourceLimits,
        ctx: &ActContext,
    ) -> Result<ActOutput, ActError> {
        let refused = |e: bwrap::SpecError| {
            Ok(ActOutput::error(format!(
                "{UNSANDBOXED_WARNING}\nrefused to run: {e}"
            )))
        };
        let command = match bwrap::interpreter_command(&spec.interpreter, &spec.script, &spec.argv)
        {
            Ok(c) => c,
            Err(e) => return refused(e),
        };
        if let Err(e) = bwrap::check_env(&spec.env) {
            return refused(e);
        }
        // The person's own PATH and HOME: there is no sandbox to describe.
        let path = std::env::var("PATH").unwrap_or_else(|_| bwrap::SANDBOX_PATH.to_string());
        let home = std::env::var("HOME").unwrap_or_else(|_| spec.cwd.to_string_lossy().into());
        let mut env: BTreeMap<String, String> = bwrap::base_env(&path, &home)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        env.extend(spec.env.clone());
        let outcome = runner::run_limited(
            &command[0],
            &command[1..],
            &ctx.cwd,
            Some(&env),
            limits,
            resources,
            ctx.cancel.clone(),
        )
        .await;
        match outcome {
            Ok(outcome) => finish(outcome, Some(UNSANDBOXED_WARNING), &[]),
            Err(e @ (RunError::Spawn { .. } | RunError::Wait { .. })) => {
                Ok(ActOutput::error(format!("{UNSANDBOXED_WARNING}\n{e}")))
            }
        }
    }
}

#[async_trait::async_trait]
impl Actuator for ShellActuator {
    fn target(&self) -> &str {
        "shell"
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let Effect::Run {
            interpreter,
            script,
            argv,
            env,
            network,
        } = &action.effect
        else {
            return Err(ActError::Unsupported {
                target: "shell".into(),
                effect: effect_name(&action.effect),
            });
        };
        if ctx.cancel.is_cancelled() {
            return Err(ActError::Cancelled);
        }
        let mut limits = self.limits;
        // `shell_timeout_secs` bounds every run; a skill's `:TIMEOUT:` may
        // only shorten it.
        if let Some(secs) = action.timeout_secs {
            limits.timeout = limits.timeout.min(Duration::from_secs(secs));
        }
        if !ctx.cwd.is_dir() {
            return Ok(ActOutput::error(format!(
                "the working directory {} does not exist",
                ctx.cwd.display()
            )));
        }
        let (mut extra_ro, mut extra_rw) = (self.extra_ro.clone(), self.extra_rw.clone());
        if let Ok(home) = &self.home {
            extra_ro.extend(home.extra_read_only.iter().cloned());
            extra_rw.extend(home.writable.iter().cloned());
        }
        let spec = SandboxSpec {
            cwd: ctx.cwd.clone(),
            read_only: ctx.read_only,
            network: *network,
            extra_ro,
            extra_rw,
            env: env.clone(),
            interpreter: interpreter.clone(),
            script: script.clone(),
            argv: argv.clone(),
        };
        let resources = self.resources.with(&ctx.limits);
        match (self.mode, &self.status) {
            // Read-only mode is kept by the sandbox's read-only bind;
            // without one nothing would keep it.
            (SandboxMode::Unsandboxed, _) if ctx.read_only => Ok(ActOutput::error(
                "refused to run: the session is in read-only mode and commands run without a                  sandbox (sandbox = \"none\"), so nothing would keep the project unchanged; \
                 the person can switch modes",
            )),
            (SandboxMode::Unsandboxed, _) => {
                self.run_unsandboxed(spec, &limits, &resources, ctx).await
            }
            (SandboxMode::Bwrap, SandboxStatus::Available { bwrap, .. }) => {
                self.run_sandboxed(bwrap, spec, &limits, &resources, ctx)
                    .await
            }
            (SandboxMode::Bwrap, SandboxStatus::Unavailable { reason, fix }) => {
                Err(ActError::Unavailable(unavailable_message(reason, fix)))
            }
        }
    }
}

/// The fail-closed message: what happened, why, and how to fix it.
/// What to do when a sandboxed run could not start: install bubblewrap
/// only when it is missing; a refusal of the run's setup needs another fix.
fn fix_for(e: &RunError) -> &'static str {
    match e {
        RunError::Spawn { missing: true, .. } => probe::INSTALL_FIX,
        _ => probe::SETUP_FIX,
    }
}

fn unavailable_message(reason: &str, fix: &str) -> String {
    format!(
        "the sandbox is unavailable, so the command was not run.\nwhy: {reason}\nfix: {fix}; \
         or set `sandbox = \"none\"` in config.toml to run unsandboxed at your own risk"
    )
}

/// The outcome as the tool result: an error when the command did not exit
/// 0 or when the sandbox had to undo a change to the control surface,
/// `Cancelled` when it was cancelled.
fn finish(
    outcome: RunOutcome,
    warning: Option<&str>,
    undone: &[Undone],
) -> Result<ActOutput, ActError> {
    if outcome.cancelled {
        return Err(ActError::Cancelled);
    }
    let mut text = match warning {
        Some(w) => format!("{w}\n{}", outcome.render()),
        None => outcome.render(),
    };
    if outcome.stderr.contains(MISSING_IDENTITY_MARK) {
        text.push_str(MISSING_IDENTITY_HINT);
        text.push('\n');
    }
    if !undone.is_empty() {
        text.push_str(
            "the sandbox undid changes to the control surface, which the agent may not change \
             on its own (ask the person, e.g. with a flight plan):\n",
        );
        for u in undone {
            text.push_str(&format!("- {u}\n"));
        }
    }
    Ok(if outcome.success() && undone.is_empty() {
        ActOutput::ok(text)
    } else {
        ActOutput::error(text)
    })
}

/// One rule of [`installers.toml`](installers.toml): a command that
/// fetches packages from a registry.
#[derive(Debug, serde::Deserialize)]
struct Installer {
    programs: Vec<String>,
    #[serde(default)]
    subcommands: Vec<String>,
    #[serde(default)]
    bare: bool,
    #[serde(default)]
    module: Option<String>,
    #[cfg_attr(not(test), allow(dead_code))]
    examples: Vec<String>,
    #[serde(default)]
    #[cfg_attr(not(test), allow(dead_code))]
    not: Vec<String>,
}

#[derive(serde::Deserialize)]
struct InstallerFile {
    installer: Vec<Installer>,
}

/// The installer rules (parsed once from the file compiled in; a test
/// checks it parses and that each rule's examples are recognised).
fn installers() -> &'static [Installer] {
    static LIST: std::sync::OnceLock<Vec<Installer>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        toml::from_str::<InstallerFile>(include_str!("installers.toml"))
            .map(|f| f.installer)
            .unwrap_or_default()
    })
}

impl Installer {
    /// Whether `program args` is this installer fetching.
    fn fetches(&self, program: &str, args: &[String]) -> bool {
        if !self.programs.iter().any(|p| p == program) {
            return false;
        }
        let args: &[String] = match &self.module {
            Some(m) => match args.windows(2).position(|w| w[0] == "-m" && w[1] == *m) {
                Some(i) => &args[i + 2..],
                None => return false,
            },
            None => args,
        };
        let words: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .filter(|a| !a.starts_with('-'))
            .take(2)
            .collect();
        if words.is_empty() {
            return self.bare;
        }
        self.subcommands.iter().any(|sub| {
            let parts: Vec<&str> = sub.split_whitespace().collect();
            words.len() >= parts.len() && words[..parts.len()] == parts[..]
        })
    }
}

/// The first command of `script` that fetches packages from a registry
/// (`pip install`, `npm ci`, `cargo add`, …: [`installers.toml`]), as
/// written (the program and its first two arguments).
pub(crate) fn installer_in(script: &str) -> Option<String> {
    let parsed = crate::gates::shell::commands::parse(script, None);
    parsed.commands.iter().find_map(|c| {
        installers()
            .iter()
            .any(|i| i.fetches(&c.program, &c.args))
            .then(|| {
                let words: Vec<&str> = std::iter::once(c.program.as_str())
                    .chain(c.args.iter().take(2).map(String::as_str))
                    .collect();
                words.join(" ")
            })
    })
}

/// What a failed install in a sandbox without network is told.
fn offline_installer_note(installer: &str) -> String {
    format!(
        "\n[passepartout] no network in the sandbox: `{}` cannot reach a package registry here. \
         The person can grant `registries` in config (`grant_registries = true` in the \
         `[sandbox]` table: installers then reach only the package registries), or run it \
         themselves in a terminal (what it writes is then part of the project); or use a \
         skill tool declared `:NETWORK: yes`.\n",
        crate::util::terminal::escape_line(installer)
    )
}

fn effect_name(e: &Effect) -> String {
    serde_json::to_value(e)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_else(|| "this effect".into())
}

/// The `sandbox argv` debug line's value: the bwrap program, its
/// arguments, the directory it starts in and the overlay it runs in (the
/// project mounted over with this upper layer and work directory).
fn sandbox_argv_json(
    bwrap: &std::path::Path,
    args: &[String],
    cwd: &std::path::Path,
    overlay: Option<&crate::sandbox::overlay::OverlayMount>,
) -> serde_json::Value {
    serde_json::json!({
        "bwrap": bwrap,
        "args": args,
        "cwd": cwd,
        "overlay": overlay.map(|o| serde_json::json!({
            "project": o.project,
            "upper": o.upper,
            "work": o.work,
        })),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn installers_are_recognised_and_other_commands_are_not() {
        for (script, found) in [
            ("pip install requests", Some("pip install requests")),
            ("cd app && npm ci", Some("npm ci")),
            ("python3 -m pip install -e .", Some("python3 -m pip")),
            ("cargo add serde --features derive", Some("cargo add serde")),
            ("yarn", Some("yarn")),
            ("pip list", None),
            ("npm test", None),
            ("cargo build", None),
            ("echo pip install", None),
        ] {
            assert_eq!(super::installer_in(script).as_deref(), found, "{script}");
        }
    }

    #[test]
    fn every_installer_rule_recognises_its_examples_and_not_the_others() {
        let rules = super::installers();
        assert!(rules.len() >= 10, "installers.toml did not parse");
        for rule in rules {
            assert!(!rule.examples.is_empty(), "{rule:?}");
            for e in &rule.examples {
                assert!(super::installer_in(e).is_some(), "{e}");
            }
            for e in &rule.not {
                assert_eq!(super::installer_in(e), None, "{e}");
            }
        }
    }

    use super::*;

    #[test]
    fn mode_parses_the_config_values() {
        assert_eq!("bwrap".parse(), Ok(SandboxMode::Bwrap));
        assert_eq!("none".parse(), Ok(SandboxMode::Unsandboxed));
        assert_eq!(
            "off".parse::<SandboxMode>(),
            Err("unknown sandbox `off`: use \"bwrap\" (default) or \"none\"".to_string())
        );
        assert_eq!(SandboxMode::default(), SandboxMode::Bwrap);
    }

    #[test]
    fn only_a_missing_program_is_fixed_by_installing_bubblewrap() {
        let spawn = |missing| RunError::Spawn {
            program: "/usr/bin/bwrap".into(),
            message: "Operation not permitted (os error 1)".into(),
            missing,
        };
        assert_eq!(fix_for(&spawn(true)), probe::INSTALL_FIX);
        assert_eq!(fix_for(&spawn(false)), probe::SETUP_FIX);
        let lost = RunError::Wait {
            program: "/usr/bin/bwrap".into(),
            message: "gone".into(),
        };
        assert_eq!(fix_for(&lost), probe::SETUP_FIX);
    }

    #[test]
    fn unavailable_message_says_why_and_how() {
        assert_eq!(
            unavailable_message("bwrap said: nope", "install it"),
            "the sandbox is unavailable, so the command was not run.\nwhy: bwrap said: nope\n\
             fix: install it; or set `sandbox = \"none\"` in config.toml to run unsandboxed at \
             your own risk"
        );
    }
}
