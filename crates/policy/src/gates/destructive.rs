//! Destructive commands: what could wipe a disk, a home directory or the
//! system, or take the machine down.
//!
//! Recursive removal or ownership/permission changes on `/`, the home
//! directory or a system tree, block-device writes, file-system creation,
//! fork bombs and shutdown are denied outright; wiping the working directory,
//! `git clean -fdx`, `git reset --hard` and `crontab -r` are held for
//! approval. Judged on normalised commands (see `shell::commands`), so quoting,
//! wrappers and nesting do not hide them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use crate::action::{Action, Effect};
use crate::gates::engine::verdict_from_findings;
use crate::gates::protected_paths::display_path;
use crate::gates::shell::static_regex;
use crate::gates::shell::{basename, resolve_path, script_of, strip_glob, Command};
use crate::gates::{Decision, Gate, GateContext, Verdict};
use crate::util::glob::{self, Glob, Slash};

/// Trees whose recursive removal or mass chmod/chown breaks the system.
const SYSTEM_TREES: &[&str] = &[
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/var",
    "/opt",
    "/root",
    "/sys",
    "/proc",
    "/dev",
    "/home",
    "/srv",
    "/mnt",
    "/media",
    "/snap",
    "/usr/bin",
    "/usr/lib",
    "/usr/local",
    "/usr/share",
    "/usr/sbin",
    "/usr/include",
    "/var/lib",
    "/var/log",
    "/etc/ssh",
    "/efi",
    "/run",
];

/// Directories in home whose loss is as bad as losing home.
const HOME_VITAL: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".config",
    ".local",
    ".emacs.d",
    "Documents",
    ".password-store",
];

/// Whether a path names a disk, partition or memory device.
pub fn is_block_device(path: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        static_regex(r"^/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|dm-\d|md\d|loop\d|mapper/|mem$|kmem$|port$|sr\d|root$|nbd\d)")
    })
    .is_match(path)
}

/// How bad it is to wipe this resolved path: Deny with what it is, Ask, or
/// nothing.
fn severity(path: &Path, ctx: &GateContext) -> Option<(Decision, String)> {
    let (dir, glob) = strip_glob(path);
    let contents = if glob { "the contents of " } else { "" };
    let shown = display_path(&dir, ctx);
    if dir == Path::new("/") {
        return Some((Decision::Deny, format!("{contents}the root directory /")));
    }
    if SYSTEM_TREES.iter().any(|d| dir == Path::new(d)) {
        return Some((
            Decision::Deny,
            format!("{contents}the system directory {shown}"),
        ));
    }
    if let Some(home) = &ctx.home {
        if &dir == home {
            return Some((Decision::Deny, format!("{contents}the home directory")));
        }
        if home.starts_with(&dir) {
            return Some((
                Decision::Deny,
                format!("{contents}{shown}, which contains the home directory"),
            ));
        }
        if let Ok(rest) = dir.strip_prefix(home) {
            if HOME_VITAL.iter().any(|v| rest == Path::new(v)) {
                return Some((Decision::Deny, format!("{contents}{shown}")));
            }
        }
    }
    if dir == ctx.cwd {
        return Some((
            Decision::Ask,
            format!("{contents}the whole working directory"),
        ));
    }
    if ctx.cwd.starts_with(&dir) {
        return Some((
            Decision::Ask,
            format!("{contents}{shown}, which contains the working directory"),
        ));
    }
    if dir.file_name().is_some_and(|n| n == ".git") {
        return Some((
            Decision::Ask,
            format!("{contents}the repository history {shown}"),
        ));
    }
    None
}

/// A path with glob characters before its last component (`/e?c`,
/// `/u*/lib`) may name a vital tree: resolve it against the known ones.
fn vital_glob_target(path: &Path, ctx: &GateContext) -> Option<PathBuf> {
    let (dir, _) = strip_glob(path);
    let text = dir.to_string_lossy();
    if !glob::has_wildcard(&text) {
        return None;
    }
    let mut candidates: Vec<PathBuf> = SYSTEM_TREES.iter().map(PathBuf::from).collect();
    if let Some(home) = &ctx.home {
        candidates.push(home.clone());
        candidates.extend(HOME_VITAL.iter().map(|v| home.join(v)));
    }
    let pattern = Glob::new(&text, Slash::Stops);
    candidates
        .into_iter()
        .find(|c| pattern.is_match(&c.to_string_lossy()))
}

fn resolve(cmd: &Command, word: &str, ctx: &GateContext) -> PathBuf {
    let path = cmd.resolve(word, ctx);
    vital_glob_target(&path, ctx).unwrap_or(path)
}

/// Whether every operand of `cmd` names a path inside the working
/// directory (not the directory itself, not its `.git`), none built from a
/// variable.
fn all_in_project(cmd: &Command, ctx: &GateContext) -> bool {
    let ops = cmd.operands();
    !ops.is_empty()
        && ops.iter().all(|op| {
            let path = resolve(cmd, op, ctx);
            !op.starts_with('$')
                && ctx.cwd.is_absolute()
                && path.starts_with(&ctx.cwd)
                && path != ctx.cwd
                && !path.starts_with(ctx.cwd.join(".git"))
        })
}

fn check_command(cmd: &Command, ctx: &GateContext, out: &mut Vec<(Decision, String)>) {
    let prog = cmd.program.as_str();
    let recursive = cmd.has_flag(&['r', 'R'], &["recursive"]);
    if let Some(w) = cmd
        .wrappers
        .iter()
        .find(|w| matches!(w.as_str(), "sudo" | "doas" | "su" | "runuser" | "pkexec"))
    {
        out.push((
            Decision::Ask,
            format!("`{prog}` runs with elevated privileges through `{w}`"),
        ));
    }
    if matches!(prog, "sudo" | "doas" | "su" | "pkexec") {
        out.push((Decision::Ask, format!("`{prog}` elevates privileges")));
    }
    match prog {
        "rm" | "rmdir" | "srm" | "trash" | "trash-put" | "gio" => {
            if cmd.args.iter().any(|a| a == "--no-preserve-root") {
                out.push((Decision::Deny, "rm --no-preserve-root".into()));
            }
            let recursive = recursive || prog != "rm";
            for op in cmd.operands() {
                if op.starts_with('$') {
                    if recursive {
                        out.push((
                            Decision::Ask,
                            format!("{prog} -r on `{op}`, a path built from an unknown variable"),
                        ));
                    }
                    continue;
                }
                let path = resolve(cmd, op, ctx);
                if let Some((d, what)) = severity(&path, ctx) {
                    if recursive || d == Decision::Ask && strip_glob(&path).1 {
                        out.push((d, format!("{prog} -r on {what}")));
                    }
                }
            }
        }
        "chmod" | "chown" | "chgrp" | "setfacl" | "chattr" => {
            let ops = cmd.operands();
            let targets = if prog == "setfacl" {
                &ops[..]
            } else {
                ops.get(1..).unwrap_or(&[])
            };
            for op in targets {
                let path = resolve(cmd, op, ctx);
                if let Some((Decision::Deny, what)) = severity(&path, ctx) {
                    let flag = if recursive { " -R" } else { "" };
                    out.push((Decision::Deny, format!("{prog}{flag} on {what}")));
                }
            }
        }
        "dd" => {
            for of in cmd.args.iter().filter_map(|a| a.strip_prefix("of=")) {
                if is_block_device(of) {
                    out.push((Decision::Deny, format!("dd writes to the device {of}")));
                }
            }
        }
        _ if prog.starts_with("mkfs")
            || matches!(
                prog,
                "mke2fs"
                    | "mkswap"
                    | "wipefs"
                    | "mkdosfs"
                    | "newfs"
                    | "blkdiscard"
                    | "zpool"
                    | "lvremove"
                    | "vgremove"
                    | "pvremove"
                    | "cryptsetup"
            ) =>
        {
            let is_read_only = prog == "zpool"
                && cmd
                    .operands()
                    .first()
                    .is_some_and(|s| matches!(*s, "list" | "status"));
            if !is_read_only {
                out.push((
                    Decision::Deny,
                    format!("`{prog}` erases or reformats storage"),
                ));
            }
        }
        // Contained, shredding project files overwrites the overlay's
        // copies, never the project's: the changeset shows them deleted or
        // rewritten, and undo restores them. Anything else is beyond
        // recovery.
        "shred" if !(ctx.contained && all_in_project(cmd, ctx)) => out.push((
            Decision::Deny,
            "shred destroys file contents beyond recovery".into(),
        )),
        "fdisk" | "sfdisk" | "gdisk" | "sgdisk" | "cfdisk" | "parted" => {
            let listing = cmd.has_flag(&['l', 'd', 's'], &["list", "dump", "show"])
                || cmd.args.iter().any(|a| a == "print");
            if !listing {
                out.push((
                    Decision::Deny,
                    format!("`{prog}` rewrites a partition table"),
                ));
            }
        }
        "find" => {
            let roots: Vec<&str> = cmd
                .args
                .iter()
                .take_while(|a| !a.starts_with('-') && *a != "(" && *a != "!")
                .map(String::as_str)
                .collect();
            let deletes = cmd.args.iter().any(|a| a == "-delete")
                || cmd.args.windows(2).any(|w| {
                    matches!(w[0].as_str(), "-exec" | "-execdir" | "-ok")
                        && matches!(basename(&w[1]), "rm" | "shred" | "unlink" | "mv")
                });
            if deletes {
                for root in roots {
                    // Deleting matches under the working directory is
                    // ordinary cleanup; only vital trees matter here.
                    if let Some((Decision::Deny, what)) = severity(&resolve(cmd, root, ctx), ctx) {
                        out.push((Decision::Deny, format!("find deletes files across {what}")));
                    }
                }
            }
        }
        "mv" => {
            let ops = cmd.operands();
            if let Some((dest, sources)) = ops.split_last() {
                for src in sources {
                    if let Some((d, what)) = severity(&resolve(cmd, src, ctx), ctx) {
                        out.push((d, format!("mv moves away {what}")));
                    }
                }
                if *dest == "/dev/null" && !sources.is_empty() {
                    out.push((
                        Decision::Deny,
                        "mv into /dev/null destroys the source".into(),
                    ));
                }
            }
        }
        "truncate" => {
            let mut skip_next = false;
            let operands = cmd.args.iter().filter(|a| {
                let skip = skip_next;
                skip_next = matches!(a.as_str(), "-s" | "-r" | "--size" | "--reference");
                !skip && !a.starts_with('-')
            });
            for op in operands {
                let path = resolve(cmd, op, ctx);
                if SYSTEM_TREES.iter().any(|d| path.starts_with(d)) {
                    out.push((
                        Decision::Deny,
                        format!("truncate empties the system file {}", path.display()),
                    ));
                }
            }
        }
        "shutdown" | "reboot" | "halt" | "poweroff" | "kexec" => {
            out.push((Decision::Deny, format!("`{prog}` takes the machine down")));
        }
        "init" | "telinit"
            if cmd
                .operands()
                .first()
                .is_some_and(|r| matches!(*r, "0" | "6" | "1" | "s" | "S")) =>
        {
            out.push((Decision::Deny, format!("`{prog}` changes the run level")));
        }
        "systemctl" | "loginctl" => {
            let verbs = [
                "poweroff",
                "reboot",
                "halt",
                "kexec",
                "emergency",
                "rescue",
                "suspend",
                "hibernate",
                "isolate",
                "soft-reboot",
            ];
            if let Some(v) = cmd.operands().iter().find(|v| verbs.contains(v)) {
                out.push((
                    Decision::Deny,
                    format!("`{prog} {v}` takes the machine down"),
                ));
            }
        }
        "killall5" => out.push((Decision::Deny, "killall5 signals every process".into())),
        "kill" | "pkill" | "killall" => {
            let ops = cmd.operands();
            // `kill -1 PID` sends SIGHUP; `-1` as the last word is the pid
            // "every process I can signal".
            let everything = prog == "kill" && cmd.args.last().is_some_and(|a| a == "-1");
            let init = prog == "kill" && ops.contains(&"1");
            let all_names = prog != "kill"
                && (ops.iter().any(|o| matches!(*o, "." | ".*" | "-u"))
                    || cmd.args.iter().any(|a| a == "--user"));
            if everything {
                out.push((Decision::Deny, "kill -1 signals every process".into()));
            } else if init {
                out.push((Decision::Deny, "kill signals init (pid 1)".into()));
            } else if all_names && prog != "kill" {
                out.push((Decision::Ask, format!("`{prog}` matches many processes")));
            }
        }
        "rsync" if cmd.args.iter().any(|a| a.starts_with("--delete")) => {
            if let Some(dest) = cmd.operands().last() {
                if let Some((d, what)) = severity(&resolve(cmd, dest, ctx), ctx) {
                    out.push((d, format!("rsync --delete mirrors over {what}")));
                }
            }
        }
        "docker" | "podman" | "nerdctl" => {
            let mounts_root = cmd.args.iter().any(|a| {
                a.starts_with("/:")
                    || a == "--privileged"
                    || a.contains("source=/,")
                    || a == "--pid=host"
            });
            if mounts_root {
                out.push((
                    Decision::Ask,
                    format!("`{prog}` gives a container the host's root or full privileges"),
                ));
            }
        }
        "mount" | "umount" | "swapoff" | "modprobe" | "insmod" | "rmmod" | "setenforce"
        | "useradd" | "userdel" | "usermod" | "passwd" | "chpasswd" | "visudo" | "ufw" => {
            let listing = cmd.args.is_empty()
                || (prog == "ufw" && cmd.args.first().is_some_and(|a| a == "status"));
            if !listing {
                out.push((
                    Decision::Ask,
                    format!("`{prog}` changes the system's configuration"),
                ));
            }
        }
        "iptables" | "ip6tables" | "nft" | "sysctl" => {
            let changes = cmd.args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "-F" | "-X"
                        | "-P"
                        | "-A"
                        | "-D"
                        | "-I"
                        | "-w"
                        | "--flush"
                        | "flush"
                        | "add"
                        | "delete"
                        | "--write"
                )
            }) || (prog == "sysctl" && cmd.args.iter().any(|a| a.contains('=')));
            if changes {
                out.push((
                    Decision::Ask,
                    format!("`{prog}` changes the system's configuration"),
                ));
            }
        }
        "crontab" if cmd.has_flag(&['r'], &[]) => {
            out.push((
                Decision::Ask,
                "crontab -r removes every scheduled job".into(),
            ));
        }
        "git" => {
            let sub = cmd.operands().first().copied().unwrap_or("");
            if sub == "clean" && cmd.has_flag(&['f'], &["force"]) {
                let extent = if cmd.has_flag(&['x', 'X'], &[]) {
                    "untracked and ignored files"
                } else {
                    "untracked files"
                };
                out.push((Decision::Ask, format!("git clean -f deletes {extent}")));
            }
            if sub == "reset" && cmd.args.iter().any(|a| a == "--hard") {
                out.push((
                    Decision::Ask,
                    "git reset --hard discards uncommitted changes".into(),
                ));
            }
        }
        _ => {}
    }
    for r in &cmd.redirects {
        if r.writes() && is_block_device(&r.target) {
            out.push((
                Decision::Deny,
                format!("redirection writes to the device {}", r.target),
            ));
        }
        if r.writes() && r.target.starts_with("/proc/sysrq-trigger") {
            out.push((Decision::Deny, "writes to /proc/sysrq-trigger".into()));
        }
    }
}

fn fork_bomb(script: &str) -> Option<String> {
    static FN_DEF: OnceLock<Regex> = OnceLock::new();
    static LOOP: OnceLock<Regex> = OnceLock::new();
    static SELF: OnceLock<Regex> = OnceLock::new();
    let fn_def = FN_DEF.get_or_init(|| {
        static_regex(r"(?:function\s+)?([^\s(){};|&]+)\s*\(\s*\)\s*\{([^}]*)\}|function\s+([^\s(){};|&]+)\s*\{([^}]*)\}")
    });
    for caps in fn_def.captures_iter(script) {
        let (Some(name), Some(body)) = (caps.get(1).or(caps.get(3)), caps.get(2).or(caps.get(4)))
        else {
            continue;
        };
        let name = name.as_str();
        let body = body.as_str();
        // Count the body's commands that call the function itself (the
        // first word of each), so `build() { cargo build & }` is no bomb.
        let calls = body
            .split(|c: char| "|&;\n".contains(c))
            .filter(|part| part.split_whitespace().next() == Some(name))
            .count();
        let backgrounds = body.replace("&&", "").contains('&');
        if calls >= 2 && (body.contains('|') || backgrounds) || calls >= 1 && backgrounds {
            return Some(format!(
                "fork bomb: function `{name}` spawns copies of itself"
            ));
        }
    }
    let lp = LOOP.get_or_init(|| {
        static_regex(r"(?s)(?:while|until)\s+(?:true|:|\[\s*1\s*\]|1|\(\(\s*1\s*\)\))\s*;?\s*do\b(.*?)\bdone|for\s*\(\(\s*;\s*;\s*\)\)\s*;?\s*do\b(.*?)\bdone")
    });
    for caps in lp.captures_iter(script) {
        let body = caps
            .get(1)
            .or(caps.get(2))
            .map(|m| m.as_str())
            .unwrap_or("");
        let cleaned = body.replace("&&", "").replace(">&", "").replace("&>", "");
        if cleaned.contains('&') {
            return Some("fork bomb: an endless loop starts background processes".into());
        }
    }
    let selfexec = SELF.get_or_init(|| {
        static_regex(r#"\$0\s*[|&]\s*\$0|fork\s+while\s+fork|while\s*\(?\s*(?:True|1)\s*\)?\s*:\s*os\.fork\(\)|while\s*\(\s*1\s*\)\s*\{?\s*fork\(\)"#)
    });
    if selfexec.is_match(script) {
        return Some("fork bomb: the script forks itself without end".into());
    }
    None
}

/// Denies commands that destroy data or the system; asks for those that
/// destroy the working directory's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct DestructiveGate;

impl Gate for DestructiveGate {
    fn name(&self) -> &str {
        "destructive"
    }

    fn priority(&self) -> i32 {
        10
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings = Vec::new();
        if let Some(script) = script_of(&action.effect, ctx) {
            for cmd in &script.commands {
                check_command(cmd, ctx, &mut findings);
            }
        }
        match &action.effect {
            Effect::Run { script, .. } => {
                if let Some(reason) = fork_bomb(script) {
                    findings.push((Decision::Deny, reason));
                }
                if script.contains("shutil.rmtree") {
                    static RMTREE: OnceLock<Regex> = OnceLock::new();
                    let re = RMTREE.get_or_init(|| {
                        static_regex(
                            r#"shutil\.rmtree\(\s*(?:os\.path\.expanduser\()?\s*["']([^"']+)["']"#,
                        )
                    });
                    for caps in re.captures_iter(script) {
                        if let Some(p) = caps.get(1) {
                            let path = resolve_path(p.as_str(), ctx);
                            if let Some((d, what)) = severity(&path, ctx) {
                                findings.push((d, format!("shutil.rmtree on {what}")));
                            }
                        }
                    }
                }
            }
            Effect::EvalElisp { code, .. } => {
                static ELISP: OnceLock<Regex> = OnceLock::new();
                let re =
                    ELISP.get_or_init(|| static_regex(r#"\(delete-directory\s+"([^"]+)"\s+t"#));
                for caps in re.captures_iter(code) {
                    if let Some(p) = caps.get(1) {
                        let path = resolve_path(p.as_str(), ctx);
                        if let Some((d, what)) = severity(&path, ctx) {
                            findings.push((d, format!("delete-directory on {what}")));
                        }
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

    fn judge(script: &str) -> Option<(Decision, String)> {
        let ctx = GateContext {
            cwd: "/home/u/proj".into(),
            home: Some("/home/u".into()),
            network_allow: vec![],
            host_paths: Vec::new(),
            contained: false,
        };
        let action = Action {
            tool: "shell".into(),
            target: "shell".into(),
            arguments: serde_json::json!({}),
            effect: Effect::Run {
                interpreter: "bash".into(),
                script: script.into(),
                argv: vec![],
                env: BTreeMap::new(),
                network: false,
            },
            approval: Approval::Auto,
            timeout_secs: None,
        };
        DestructiveGate
            .check(&action, &ctx)
            .map(|v| (v.decision, v.reason))
    }

    fn deny(script: &str) -> String {
        match judge(script) {
            Some((Decision::Deny, r)) => r,
            other => panic!("{script}: expected deny, got {other:?}"),
        }
    }

    fn ask(script: &str) -> String {
        match judge(script) {
            Some((Decision::Ask, r)) => r,
            other => panic!("{script}: expected ask, got {other:?}"),
        }
    }

    #[test]
    fn recursive_removal_of_vital_trees_is_denied() {
        assert_eq!(deny("rm -rf /"), "rm -r on the root directory /");
        assert_eq!(
            deny("rm -fr /*"),
            "rm -r on the contents of the root directory /"
        );
        assert_eq!(deny("rm -r -f ~"), "rm -r on the home directory");
        assert_eq!(
            deny("rm --recursive --force ~/*"),
            "rm -r on the contents of the home directory"
        );
        assert_eq!(
            deny("sudo /bin/rm -R /etc"),
            "rm -r on the system directory /etc"
        );
        assert_eq!(
            deny("rm -rf /usr/./lib//"),
            "rm -r on the system directory /usr/lib"
        );
        assert_eq!(deny("rm -rf ~/.ssh"), "rm -r on ~/.ssh");
        assert_eq!(
            deny("rm -rf --no-preserve-root /"),
            "rm --no-preserve-root; rm -r on the root directory /"
        );
        assert_eq!(deny("rm -rf ../../.."), "rm -r on the root directory /");
    }

    #[test]
    fn globs_cd_and_mirrors_cannot_hide_the_target() {
        assert_eq!(deny("rm -rf /e?c"), "rm -r on the system directory /etc");
        assert_eq!(deny("rm -rf /[u]sr"), "rm -r on the system directory /usr");
        // A range is a class like any other (it once only asked, unnamed).
        assert_eq!(
            deny("rm -rf /[d-f]tc"),
            "rm -r on the system directory /etc"
        );
        assert_eq!(
            deny("rm -rf /[!a-d]tc"),
            "rm -r on the system directory /etc"
        );
        assert_eq!(
            deny("rm -rf /u*/lib"),
            "rm -r on the system directory /usr/lib"
        );
        assert_eq!(
            deny("cd / && rm -rf *"),
            "rm -r on the contents of the root directory /"
        );
        assert_eq!(deny("cd ~; rm -rf .ssh"), "rm -r on ~/.ssh");
        assert_eq!(judge("cd build && rm -rf *"), None);
        assert_eq!(
            deny("rsync -a --delete empty/ ~/"),
            "rsync --delete mirrors over the home directory"
        );
        assert_eq!(judge("rsync -a --delete src/ backup/"), None);
        assert_eq!(deny("rm -rf ~root"), "rm -r on the system directory /root");
    }

    #[test]
    fn working_directory_wipes_ask() {
        assert_eq!(ask("rm -rf ."), "rm -r on the whole working directory");
        assert_eq!(
            ask("rm -rf ./*"),
            "rm -r on the contents of the whole working directory"
        );
        assert_eq!(
            ask("rm -rf .git"),
            "rm -r on the repository history ~/proj/.git"
        );
        assert_eq!(
            ask("rm -rf \"$BUILD_DIR/\""),
            "rm -r on `$BUILD_DIR/`, a path built from an unknown variable"
        );
        assert_eq!(
            ask("git clean -fdx"),
            "git clean -f deletes untracked and ignored files"
        );
        assert_eq!(ask("crontab -r"), "crontab -r removes every scheduled job");
        assert_eq!(judge("rm -rf build target/debug"), None);
        assert_eq!(judge("rm build/out.o"), None);
    }

    #[test]
    fn disks_and_filesystems() {
        assert_eq!(
            deny("dd if=/dev/zero of=/dev/sda bs=1M"),
            "dd writes to the device /dev/sda"
        );
        assert_eq!(judge("dd if=/dev/zero of=disk.img bs=1M count=1"), None);
        assert_eq!(
            deny("mkfs.ext4 /dev/nvme0n1p1"),
            "`mkfs.ext4` erases or reformats storage"
        );
        assert_eq!(
            deny("wipefs -a /dev/sdb"),
            "`wipefs` erases or reformats storage"
        );
        assert_eq!(
            deny("shred -u notes.txt"),
            "shred destroys file contents beyond recovery"
        );
        assert_eq!(
            deny("cat /dev/urandom > /dev/sda"),
            "redirection writes to the device /dev/sda"
        );
        assert_eq!(deny("fdisk /dev/sda"), "`fdisk` rewrites a partition table");
        assert_eq!(judge("fdisk -l"), None);
    }

    /// Contained (issue 36), shredding project files is the changeset's
    /// to judge; shredding anything else stays denied.
    #[test]
    fn contained_shred_of_project_files_is_left_to_the_changeset() {
        let ctx = GateContext {
            cwd: "/home/u/proj".into(),
            home: Some("/home/u".into()),
            contained: true,
            ..GateContext::default()
        };
        let judge = |script: &str| {
            DestructiveGate
                .check(&Action::shell_for_tests(script), &ctx)
                .map(|v| v.decision)
        };
        assert_eq!(judge("shred -u notes.txt src/a.rs"), None);
        assert_eq!(judge("shred -u ~/.bash_history"), Some(Decision::Deny));
        assert_eq!(judge("shred .git/index"), Some(Decision::Deny));
        assert_eq!(judge("shred -u \"$F\""), Some(Decision::Deny));
        assert_eq!(judge("shred /dev/sda"), Some(Decision::Deny));
        assert_eq!(
            deny("shred -u notes.txt"),
            "shred destroys file contents beyond recovery"
        );
    }

    #[test]
    fn fork_bombs_in_several_spellings() {
        assert_eq!(
            deny(":(){ :|:& };:"),
            "fork bomb: function `:` spawns copies of itself"
        );
        assert_eq!(
            deny("f(){ f|f& };f"),
            "fork bomb: function `f` spawns copies of itself"
        );
        assert_eq!(
            deny("bomb() { bomb | bomb & }; bomb"),
            "fork bomb: function `bomb` spawns copies of itself"
        );
        assert_eq!(
            deny("while true; do sleep 100 & done"),
            "fork bomb: an endless loop starts background processes"
        );
        assert_eq!(judge("while true; do cargo test && break; done"), None);
        assert_eq!(judge("build() { cargo build & }; build; wait"), None);
    }

    #[test]
    fn system_wide_changes() {
        assert_eq!(deny("chmod -R 777 /"), "chmod -R on the root directory /");
        assert_eq!(
            deny("chown -R nobody /usr"),
            "chown -R on the system directory /usr"
        );
        assert_eq!(
            deny("find / -name '*.log' -delete"),
            "find deletes files across the root directory /"
        );
        assert_eq!(judge("find . -name '*.o' -delete"), None);
        assert_eq!(
            ask("sudo apt-get install -y ripgrep"),
            "`apt-get` runs with elevated privileges through `sudo`"
        );
        assert_eq!(
            deny("find ~ -type f -exec rm -f {} +"),
            "find deletes files across the home directory"
        );
        assert_eq!(
            deny("mv ~ /dev/null"),
            "mv moves away the home directory; mv into /dev/null destroys the source"
        );
        assert_eq!(
            deny("truncate -s 0 /var/log/syslog"),
            "truncate empties the system file /var/log/syslog"
        );
        assert_eq!(deny("shutdown -h now"), "`shutdown` takes the machine down");
        assert_eq!(
            deny("systemctl reboot"),
            "`systemctl reboot` takes the machine down"
        );
        assert_eq!(deny("init 0"), "`init` changes the run level");
        assert_eq!(deny("kill -9 -1"), "kill -1 signals every process");
        assert_eq!(deny("killall5 -9"), "killall5 signals every process");
        assert_eq!(judge("kill -9 12345"), None);
        assert_eq!(judge("chmod +x script.sh"), None);
    }
}
