//! Protected paths: credentials, private keys, system files, and anything
//! outside the working directory.
//!
//! Reads of credential stores (`~/.ssh`, `~/.aws/credentials`, `.env`, ...)
//! are held for approval; reads of private keys and `/etc/shadow` are
//! denied. Writes outside the session's working directory are held for
//! approval; writes to a protected path (credentials, shell start-up files,
//! git hooks, system directories) are denied. The same rules apply to file
//! effects and to the paths a shell script names.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use crate::action::{Action, Effect};
use crate::control_surface::secret_names::{
    is_env_file_name, is_named_like_a_secret, is_private_key_name,
};
use crate::gates::engine::verdict_from_findings;
use crate::gates::shell::static_regex;
use crate::gates::shell::{python_shell_strings, resolve_path, script_of, Command};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// Credential stores relative to the home directory: reading them asks.
const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh/hosts.yml",
    ".netrc",
    ".pgpass",
    ".my.cnf",
    ".docker/config.json",
    ".kube/config",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    ".authinfo",
    ".authinfo.gpg",
    ".config/passepartout/credentials",
];

/// Files relative to home that run code at login or start-up: writing them
/// is persistence.
const HOME_STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".config/autostart",
    ".config/systemd",
    ".config/environment.d",
    ".xinitrc",
    ".xprofile",
    ".emacs",
    ".emacs.d/init.el",
    ".emacs.d/early-init.el",
    ".config/emacs/init.el",
    ".gitconfig",
    ".config/git/config",
    ".vimrc",
    ".inputrc",
    ".pam_environment",
];

/// System trees: writing anywhere under them is denied.
const SYSTEM_DIRS: &[&str] = &[
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/var",
    "/opt", "/root", "/sys", "/proc", "/dev", "/srv", "/snap",
];

/// Device files that are fine to write to.
const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
    "/dev/zero",
];

/// What a path is, if it is worth protecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    /// Decision for reading it.
    pub read: Decision,
    /// A few words on what it is ("an SSH private key").
    pub what: &'static str,
}

/// How a path is shown in reasons: with `~` for the home directory.
pub fn display_path(path: &Path, ctx: &GateContext) -> String {
    if let Some(home) = &ctx.home {
        if let Ok(rest) = path.strip_prefix(home) {
            if rest.as_os_str().is_empty() {
                return "~".into();
            }
            return format!("~/{}", rest.display());
        }
    }
    path.display().to_string()
}

/// Classify a resolved path for reading. `None`: nothing special.
pub fn protection(path: &Path, ctx: &GateContext) -> Option<Protection> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let s = path.to_string_lossy();
    if matches!(
        s.as_ref(),
        "/etc/shadow" | "/etc/gshadow" | "/etc/shadow-" | "/etc/gshadow-" | "/etc/sudoers"
    ) || s.starts_with("/etc/sudoers.d")
        || s.starts_with("/etc/ssh/ssh_host_") && !s.ends_with(".pub")
    {
        return Some(Protection {
            read: Decision::Deny,
            what: "a system password or key file",
        });
    }
    if is_private_key_name(name) && !name.ends_with(".pub") {
        return Some(Protection {
            read: Decision::Deny,
            what: "a private key",
        });
    }
    if let Some(home) = &ctx.home {
        if let Ok(rest) = path.strip_prefix(home) {
            if rest.starts_with(".gnupg/private-keys-v1.d") {
                return Some(Protection {
                    read: Decision::Deny,
                    what: "a private key",
                });
            }
            if HOME_SECRETS.iter().any(|p| rest.starts_with(p)) {
                return Some(Protection {
                    read: Decision::Ask,
                    what: "a credential store",
                });
            }
        }
    }
    if crate::gates::destructive::is_block_device(&s) {
        return Some(Protection {
            read: Decision::Ask,
            what: "a raw disk device",
        });
    }
    if s.starts_with("/proc/") && name == "environ" {
        return Some(Protection {
            read: Decision::Ask,
            what: "a process environment",
        });
    }
    if is_env_file_name(name) {
        return Some(Protection {
            read: Decision::Ask,
            what: ENV_FILE,
        });
    }
    if is_named_like_a_secret(name) {
        return Some(Protection {
            read: Decision::Ask,
            what: NAMED_LIKE_A_SECRET,
        });
    }
    None
}

/// Classify a word from a shell command that may name a file. URLs, words
/// with spaces and unexpanded variables are skipped, and a bare word (no `/`
/// or `.`) is not taken for a secret-named file: in `grep password src` it
/// is a pattern.
pub fn word_protection(
    cmd: &Command,
    word: &str,
    ctx: &GateContext,
) -> Option<(PathBuf, Protection)> {
    if word.contains("://")
        || word.contains(char::is_whitespace)
        || word.starts_with('$')
        || word.starts_with('-')
    {
        return None;
    }
    let path = cmd.resolve(word, ctx);
    let p = protection(&path, ctx)?;
    let bare = !word.contains(['/', '.', '~']);
    if bare && p.what == NAMED_LIKE_A_SECRET {
        return None;
    }
    Some((path, p))
}

/// Whether a protection marks a file whose values the daemon redacts from
/// output: environment files, files named like secrets, private keys.
pub fn is_project_secret(p: &Protection) -> bool {
    matches!(p.what, ENV_FILE | NAMED_LIKE_A_SECRET | "a private key")
}

const NAMED_LIKE_A_SECRET: &str = "a file named like a secret";
const ENV_FILE: &str = "an environment file with secrets";

/// Whether a directory holds the home directory's credential stores (it is
/// the home directory or one of its ancestors): reading it recursively
/// reads them too.
pub fn holds_credentials(path: &Path, ctx: &GateContext) -> bool {
    ctx.home.as_ref().is_some_and(|home| home.starts_with(path))
}

/// Whether a command reads the contents of whole directory trees (`grep -r`,
/// `rg`, `tar`, `zip -r`, `cp -r`, `rsync`, `scp -r`, `find -exec`).
pub fn reads_recursively(cmd: &Command) -> bool {
    match cmd.program.as_str() {
        "rg" | "ag" | "ack" | "tar" | "rsync" | "7z" | "restic" | "borg" => true,
        "grep" | "egrep" | "fgrep" | "cp" | "scp" | "zip" => {
            cmd.has_flag(&['r', 'R'], &["recursive", "dereference-recursive"])
        }
        "find" => cmd
            .args
            .iter()
            .any(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-print0" | "-ls")),
        _ => false,
    }
}

/// Whether writing to this resolved path plants code that runs later: shell
/// start-up files, desktop autostart, user systemd units, git hooks,
/// `authorized_keys`, cron spools, `/etc/ld.so.preload`.
pub fn is_startup_path(path: &Path, ctx: &GateContext) -> bool {
    let s = path.to_string_lossy();
    if let Some(home) = &ctx.home {
        if let Ok(rest) = path.strip_prefix(home) {
            if HOME_STARTUP.iter().any(|p| rest.starts_with(p))
                || rest.starts_with(".ssh/authorized_keys")
            {
                return true;
            }
        }
    }
    (s.contains("/.git/hooks") && !in_project(path, ctx))
        || s.starts_with("/var/spool/cron")
        || s.starts_with("/etc/cron")
        || s == "/etc/ld.so.preload"
        || s.starts_with("/etc/profile")
        || s.starts_with("/etc/bash")
        || s.starts_with("/etc/systemd")
        || s.starts_with("/etc/rc")
}

/// Whether a resolved path lies inside the working directory.
fn in_project(path: &Path, ctx: &GateContext) -> bool {
    ctx.cwd.is_absolute() && path.starts_with(&ctx.cwd)
}

/// Decision and reason for writing to a resolved path.
pub fn write_decision(path: &Path, ctx: &GateContext) -> Option<(Decision, String)> {
    let shown = display_path(path, ctx);
    let s = path.to_string_lossy();
    // Sockets under /dev/tcp are network traffic, judged by the
    // exfiltration and injection gates.
    if HARMLESS_DEVICES.contains(&s.as_ref())
        || s.starts_with("/dev/fd/")
        || s.starts_with("/dev/tcp/")
        || s.starts_with("/dev/udp/")
    {
        return None;
    }
    if let Some(p) = protection(path, ctx) {
        // A project's own `.env` or `secrets.yaml` is the person's to edit:
        // ask. Credential stores, keys and system files: deny.
        let project_file = matches!(p.what, ENV_FILE | NAMED_LIKE_A_SECRET)
            && ctx.cwd.is_absolute()
            && path.starts_with(&ctx.cwd);
        let decision = if project_file {
            Decision::Ask
        } else {
            Decision::Deny
        };
        return Some((decision, format!("writes to {shown} ({})", p.what)));
    }
    if let Some(home) = &ctx.home {
        if let Ok(rest) = path.strip_prefix(home) {
            if HOME_STARTUP.iter().any(|p| rest.starts_with(p)) {
                return Some((
                    Decision::Deny,
                    format!("writes to {shown}, a start-up file that runs code later"),
                ));
            }
        }
    }
    if let Some(host) = crate::control_surface::host_entry(path, &ctx.host_paths) {
        return Some((Decision::Ask, format!("writes to {shown}, {}", host.why)));
    }
    if in_project(path, ctx) {
        // The project's own hooks, git config, .envrc...: a person may
        // approve the change (a flight plan), so ask rather than deny.
        if let Some(entry) = crate::control_surface::control_entry_in(&ctx.cwd, path) {
            return Some((
                Decision::Ask,
                format!(
                    "writes to {shown} in the project's control surface: {}",
                    entry.why
                ),
            ));
        }
    }
    if path.components().any(|c| c.as_os_str() == ".git")
        && path.to_string_lossy().contains("/.git/hooks")
    {
        return Some((
            Decision::Deny,
            format!("writes to {shown}, a git hook that runs code later"),
        ));
    }
    if path == Path::new("/")
        || SYSTEM_DIRS
            .iter()
            .any(|d| path.starts_with(d) && !path.starts_with("/var/tmp"))
    {
        return Some((Decision::Deny, format!("writes to {shown}, a system path")));
    }
    // A contained command's `/tmp` is the sandbox's own, private and gone
    // when the command ends.
    if ctx.contained && path.starts_with("/tmp") {
        return None;
    }
    // Without an absolute working directory nothing counts as inside it.
    if !(ctx.cwd.is_absolute() && path.starts_with(&ctx.cwd)) {
        return Some((
            Decision::Ask,
            format!("writes to {shown}, outside the working directory"),
        ));
    }
    None
}

fn read_finding(path: &Path, ctx: &GateContext, verb: &str) -> Option<(Decision, String)> {
    protection(path, ctx).map(|p| {
        (
            p.read,
            format!("{verb} {} ({})", display_path(path, ctx), p.what),
        )
    })
}

/// Files a command reads that are not among its words as paths: the
/// `PATH` of git's `REV:PATH` (`git show HEAD:.env`, `git cat-file -p
/// HEAD~3:.env`: the file as it was in history is the file), and
/// `readfile('PATH')` in SQL given to sqlite3.
pub fn indirect_reads(cmd: &Command) -> Vec<String> {
    let mut out = Vec::new();
    match cmd.program.as_str() {
        "git" => {
            for arg in &cmd.args {
                if arg.starts_with('-') || arg.contains("://") {
                    continue;
                }
                if let Some((_, path)) = arg.split_once(':') {
                    let path = path.trim_start_matches("./");
                    if !path.is_empty() && !path.starts_with('/') {
                        out.push(path.to_string());
                    }
                }
            }
        }
        p if p.starts_with("sqlite") => {
            static READFILE: OnceLock<Regex> = OnceLock::new();
            let re = READFILE
                .get_or_init(|| static_regex(r#"(?i)\b(?:readfile|edit)\s*\(\s*['"]([^'"]+)['"]"#));
            for arg in &cmd.args {
                for caps in re.captures_iter(arg) {
                    if let Some(m) = caps.get(1) {
                        out.push(m.as_str().to_string());
                    }
                }
            }
            if let Some(text) = &cmd.stdin_text {
                for caps in re.captures_iter(text) {
                    if let Some(m) = caps.get(1) {
                        out.push(m.as_str().to_string());
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// String literals in Python code that look like paths (`'~/.ssh/id_rsa'`,
/// `"/etc/shadow"`, `'.env'`).
pub fn python_path_literals(code: &str) -> Vec<String> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| static_regex(r#"["']((?:[~/.]|\$HOME)[^"'\s]*)["']"#));
    re.captures_iter(code)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str().to_string())
        .collect()
}

/// Reading credentials asks (private keys deny); writing outside the
/// working directory asks; writing protected paths denies.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtectedPathsGate;

impl Gate for ProtectedPathsGate {
    fn name(&self) -> &str {
        "protected_paths"
    }

    fn priority(&self) -> i32 {
        40
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings = Vec::new();
        let abs = |p: &PathBuf| resolve_path(&p.to_string_lossy(), ctx);
        match &action.effect {
            Effect::ReadFile { path } => findings.extend(read_finding(&abs(path), ctx, "reads")),
            Effect::ListDir { path } => findings.extend(read_finding(&abs(path), ctx, "lists")),
            Effect::SearchText { path, .. } => {
                let path = abs(path);
                findings.extend(read_finding(&path, ctx, "searches"));
                if holds_credentials(&path, ctx) {
                    findings.push((
                        Decision::Ask,
                        format!(
                            "searches all of {}, credential stores included",
                            display_path(&path, ctx)
                        ),
                    ));
                }
            }
            Effect::WriteFile { path, .. } => {
                // The sandbox's private `/tmp` is a command's, never a
                // file tool's (which writes on the host).
                let host = GateContext {
                    contained: false,
                    ..ctx.clone()
                };
                findings.extend(write_decision(&abs(path), &host))
            }
            Effect::Run {
                interpreter,
                script,
                ..
            } => {
                if let Some(parsed) = script_of(&action.effect, ctx) {
                    for cmd in &parsed.commands {
                        for target in cmd.write_targets() {
                            // `mkdir -p "$(dirname "$f")"` creates empty
                            // directories: nothing is overwritten or read.
                            if target.starts_with('$') && cmd.program != "mkdir" {
                                findings.push((
                                    Decision::Ask,
                                    format!(
                                        "{} writes to `{target}`, a location only known at run time",
                                        cmd.label()
                                    ),
                                ));
                                continue;
                            }
                            let path = cmd.resolve(&target, ctx);
                            if let Some((d, r)) = write_decision(&path, ctx) {
                                findings.push((d, format!("{} {r}", cmd.label())));
                            }
                        }
                        if reads_recursively(cmd) {
                            for op in cmd.operands() {
                                let path = cmd.resolve(op, ctx);
                                if !op.starts_with('-') && holds_credentials(&path, ctx) {
                                    findings.push((
                                        Decision::Ask,
                                        format!(
                                            "{} reads all of {}, credential stores included",
                                            cmd.label(),
                                            display_path(&path, ctx)
                                        ),
                                    ));
                                }
                            }
                        }
                        for word in cmd.path_words() {
                            if let Some((path, p)) = word_protection(cmd, &word, ctx) {
                                findings.push((
                                    p.read,
                                    format!(
                                        "{} touches {} ({})",
                                        cmd.label(),
                                        display_path(&path, ctx),
                                        p.what
                                    ),
                                ));
                            }
                        }
                        for word in indirect_reads(cmd) {
                            if let Some((path, p)) = word_protection(cmd, &word, ctx) {
                                findings.push((
                                    p.read,
                                    format!(
                                        "{} reads {} by another route ({})",
                                        cmd.label(),
                                        display_path(&path, ctx),
                                        p.what
                                    ),
                                ));
                            }
                        }
                        if cmd.program.starts_with("python") {
                            for code in cmd.option_values(&["-c"], &[]) {
                                for lit in python_path_literals(code) {
                                    let path = cmd.resolve(&lit, ctx);
                                    findings.extend(read_finding(
                                        &path,
                                        ctx,
                                        "the Python code opens",
                                    ));
                                }
                            }
                        }
                    }
                }
                if interpreter.contains("python") {
                    let embedded = python_shell_strings(script).join("\n");
                    for lit in python_path_literals(script) {
                        if embedded.contains(&lit) {
                            continue;
                        }
                        let path = resolve_path(&lit, ctx);
                        findings.extend(read_finding(&path, ctx, "the Python script opens"));
                    }
                }
            }
            _ => {}
        }
        verdict_from_findings(self.name(), findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;
    use std::collections::BTreeMap;

    fn ctx() -> GateContext {
        GateContext {
            cwd: "/home/u/proj".into(),
            home: Some("/home/u".into()),
            network_allow: vec![],
            host_paths: Vec::new(),
            contained: false,
        }
    }

    fn judge(effect: Effect) -> Option<(Decision, String)> {
        let action = Action {
            tool: "t".into(),
            target: "x".into(),
            arguments: serde_json::json!({}),
            effect,
            approval: Approval::Auto,
            timeout_secs: None,
        };
        ProtectedPathsGate
            .check(&action, &ctx())
            .map(|v| (v.decision, v.reason))
    }

    fn bash(script: &str) -> Option<(Decision, String)> {
        judge(Effect::Run {
            interpreter: "bash".into(),
            script: script.into(),
            argv: vec![],
            env: BTreeMap::new(),
            network: false,
        })
    }

    fn read(path: &str) -> Option<(Decision, String)> {
        judge(Effect::ReadFile { path: path.into() })
    }

    fn write(path: &str) -> Option<(Decision, String)> {
        judge(Effect::WriteFile {
            path: path.into(),
            content: "x".into(),
        })
    }

    /// A contained command's `/tmp` is the sandbox's private one (issue
    /// 36); a file tool's `/tmp` would be the host's.
    #[test]
    fn a_contained_commands_tmp_is_its_own() {
        let contained = GateContext {
            contained: true,
            ..ctx()
        };
        let judge_in = |effect: Effect| {
            let action = Action {
                tool: "t".into(),
                target: "x".into(),
                arguments: serde_json::json!({}),
                effect,
                approval: Approval::Auto,
                timeout_secs: None,
            };
            ProtectedPathsGate
                .check(&action, &contained)
                .map(|v| v.decision)
        };
        let run = |script: &str| Effect::Run {
            interpreter: "bash".into(),
            script: script.into(),
            argv: vec![],
            env: BTreeMap::new(),
            network: false,
        };
        assert_eq!(judge_in(run("echo x > /tmp/scratch")), None);
        assert_eq!(
            bash("echo x > /tmp/scratch").map(|f| f.0),
            Some(Decision::Ask)
        );
        assert_eq!(judge_in(run("echo x > /etc/passwd")), Some(Decision::Deny));
        let write = Effect::WriteFile {
            path: "/tmp/x".into(),
            content: "x".into(),
        };
        assert_eq!(judge_in(write), Some(Decision::Ask));
    }

    #[test]
    fn reads_of_credentials_ask_and_keys_deny() {
        assert_eq!(
            read("/home/u/.aws/credentials"),
            Some((
                Decision::Ask,
                "reads ~/.aws/credentials (a credential store)".into()
            ))
        );
        assert_eq!(
            read("/home/u/.ssh/id_ed25519"),
            Some((
                Decision::Deny,
                "reads ~/.ssh/id_ed25519 (a private key)".into()
            ))
        );
        assert_eq!(
            read("/etc/shadow"),
            Some((
                Decision::Deny,
                "reads /etc/shadow (a system password or key file)".into()
            ))
        );
        assert_eq!(
            read(".env.local"),
            Some((
                Decision::Ask,
                "reads ~/proj/.env.local (an environment file with secrets)".into()
            ))
        );
        assert_eq!(read("api_token.txt").map(|f| f.0), Some(Decision::Ask));
        assert_eq!(read("src/tokenizer.rs"), None);
        assert_eq!(read("src/gates/secrets.rs"), None);
        assert_eq!(read(".env.example"), None);
        assert_eq!(read("README.md"), None);
    }

    #[test]
    fn writes_inside_cwd_pass_outside_ask_protected_deny() {
        assert_eq!(write("src/main.rs"), None);
        assert_eq!(
            write(".env"),
            Some((
                Decision::Ask,
                "writes to ~/proj/.env (an environment file with secrets)".into()
            ))
        );
        assert_eq!(
            bash("cp out.txt \"$DEST\""),
            Some((
                Decision::Ask,
                "`cp` writes to `$DEST`, a location only known at run time".into()
            ))
        );
        assert_eq!(
            write("/tmp/x"),
            Some((
                Decision::Ask,
                "writes to /tmp/x, outside the working directory".into()
            ))
        );
        assert_eq!(
            write("../../u/.bashrc"),
            Some((
                Decision::Deny,
                "writes to ~/.bashrc, a start-up file that runs code later".into()
            ))
        );
        assert_eq!(
            write(".git/hooks/pre-commit"),
            Some((
                Decision::Ask,
                "writes to ~/proj/.git/hooks/pre-commit in the project's control surface: git hooks run on the host at the next commit, checkout or push".into()
            ))
        );
        assert_eq!(
            write("/home/u/other/.git/hooks/pre-commit"),
            Some((
                Decision::Deny,
                "writes to ~/other/.git/hooks/pre-commit, a git hook that runs code later".into()
            ))
        );
        assert_eq!(write("/etc/hosts").map(|f| f.0), Some(Decision::Deny));
        assert_eq!(
            write("/home/u/.ssh/authorized_keys").map(|f| f.0),
            Some(Decision::Deny)
        );
    }

    #[test]
    fn shell_paths_are_judged_too() {
        assert_eq!(
            bash("cat ~/.ssh/id_rsa"),
            Some((
                Decision::Deny,
                "`cat` touches ~/.ssh/id_rsa (a private key)".into()
            ))
        );
        assert_eq!(
            bash("echo 'export X=1' >> ~/.bashrc").map(|f| f.0),
            Some(Decision::Deny)
        );
        assert_eq!(
            bash("sed -i s/a/b/ /etc/hosts"),
            Some((
                Decision::Deny,
                "`sed` writes to /etc/hosts, a system path".into()
            ))
        );
        assert_eq!(
            bash("cp notes.txt /tmp/notes.txt"),
            Some((
                Decision::Ask,
                "`cp` writes to /tmp/notes.txt, outside the working directory".into()
            ))
        );
        assert_eq!(bash("cargo build 2>/dev/null > build.log"), None);
        assert_eq!(bash("echo \"$HOME\""), None);
        assert_eq!(bash("cat .env").map(|f| f.0), Some(Decision::Ask));
        assert_eq!(
            bash("grep -rn PRIVATE ~"),
            Some((
                Decision::Ask,
                "`grep` reads all of ~, credential stores included".into()
            ))
        );
        assert_eq!(bash("grep -rn foo src"), None);
        assert_eq!(bash("ls ~"), None);
    }

    #[test]
    fn python_literals_are_judged() {
        let v = judge(Effect::Run {
            interpreter: "python3".into(),
            script: "print(open('/home/u/.ssh/id_rsa').read())".into(),
            argv: vec![],
            env: BTreeMap::new(),
            network: false,
        });
        assert_eq!(v.map(|f| f.0), Some(Decision::Deny));
    }
}
