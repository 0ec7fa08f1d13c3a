//! What the literal commands of a script would do to the project: the
//! commands that destroy or replace files without naming a dangerous path
//! (`find -delete`, `truncate`, `dd of=`, `shred`), interpreter one-liners,
//! a file written and then run by the same script, symlinks out of the
//! project, writes to the control surface, and resource bombs.
//!
//! The destructive gate judges *where* a removal lands (root, home, the
//! working directory); this module asks about *how*: each of these is an
//! ordinary tool used in an unusual way, so the answer is *ask*, with the
//! command named.

use std::path::Path;

use crate::control_surface::control_entry_in;
use crate::gates::shell::{is_shell, Command, Script};
use crate::gates::{Decision, GateContext};

/// Interpreters whose `-c`/`-e` argument is a program.
const ONE_LINER_FLAGS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "-p", "--eval", "--print"]),
    ("nodejs", &["-e", "-p", "--eval", "--print"]),
    ("deno", &["eval"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("Rscript", &["-e"]),
    ("julia", &["-e"]),
];

/// Programs that destroy what they are handed; run by `xargs` or
/// `find -exec`, their operands are only known at run time.
const DESTROYERS: &[&str] = &[
    "rm", "rmdir", "unlink", "shred", "truncate", "dd", "mv", "wipefs", "srm",
];

/// `git config` keys that name no program, path or URL: setting them in the
/// project is everyday work.
const HARMLESS_GIT_KEYS: &[&str] = &[
    "user.name",
    "user.email",
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "merge.ff",
    "rebase.autostash",
    "fetch.prune",
    "color.ui",
    "log.date",
    "commit.verbose",
    "status.short",
    "advice.detachedhead",
];

/// File patterns `find -delete` may clear without asking: build and editor
/// leftovers, never sources.
const DISPOSABLE: &[&str] = &[
    "*.log",
    "*.tmp",
    "*.o",
    "*.obj",
    "*.pyc",
    "*.pyo",
    "*.class",
    "*.orig",
    "*.rej",
    "*.bak",
    "*.swp",
    "*~",
    "__pycache__",
    ".DS_Store",
    "*.d",
    "*.profraw",
];

/// Python modules whose import alone touches no file, process or network.
const HARMLESS_MODULES: &[&str] = &[
    "json",
    "math",
    "sys",
    "re",
    "datetime",
    "time",
    "random",
    "statistics",
    "decimal",
    "fractions",
    "string",
    "textwrap",
    "itertools",
    "functools",
    "collections",
    "platform",
    "uuid",
    "hashlib",
    "requests",
    "pprint",
    "operator",
    "calendar",
    "unicodedata",
];

/// Devices that never run dry.
const ENDLESS: &[&str] = &["/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"];

/// Every finding for the script's literal commands.
pub fn findings(script: &Script, ctx: &GateContext) -> Vec<(Decision, String)> {
    let mut out = Vec::new();
    let mut written: Vec<std::path::PathBuf> = Vec::new();
    for cmd in &script.commands {
        one_command(cmd, ctx, &mut out);
        decoded_into_file(cmd, script, &mut out);
        // Contained, what a script written and run in one command does is
        // its changeset, judged before anything reaches the project.
        if !ctx.contained {
            runs_what_it_wrote(cmd, ctx, &written, &mut out);
        }
        // A script written from a heredoc is judged as if it ran now by the
        // shell gate, so running it later in the same command runs nothing
        // unjudged — when the text judged is the text written: no `$`,
        // backquote or backslash the shell would still expand (printf and
        // `echo -e` interpret escapes, so they keep asking).
        let judged: Vec<String> = if matches!(cmd.program.as_str(), "cat" | "tee") {
            written_scripts(cmd)
                .into_iter()
                .filter(|(_, text)| !text.contains(['$', '`', '\\']))
                .map(|(t, _)| t)
                .collect()
        } else {
            Vec::new()
        };
        for target in cmd.write_targets() {
            let path = cmd.resolve(&target, ctx);
            if let Some(entry) = control_entry_in(&ctx.cwd, &path) {
                out.push((
                    Decision::Ask,
                    format!(
                        "{} writes to {} in the project's control surface: {}",
                        cmd.label(),
                        entry.path,
                        entry.why
                    ),
                ));
            }
            if !matches!(
                cmd.program.as_str(),
                "chmod"
                    | "chown"
                    | "chgrp"
                    | "chattr"
                    | "touch"
                    | "mkdir"
                    | "rm"
                    | "rmdir"
                    | "unlink"
            ) && !judged.contains(&target)
            {
                written.push(path);
            }
        }
    }
    out
}

fn one_command(cmd: &Command, ctx: &GateContext, out: &mut Vec<(Decision, String)>) {
    let ask = |out: &mut Vec<(Decision, String)>, why: String| out.push((Decision::Ask, why));
    // Contained, what a destroyer did is its changeset: deletions and
    // truncations undo can restore are applied and recorded, a loss undo
    // cannot restore is asked with the diff (`gates::consequence`).
    let destroyer_left_to_changeset = ctx.contained && is_destroyer(cmd);
    match cmd.program.as_str() {
        _ if destroyer_left_to_changeset => {}
        "find" if only_disposable(cmd) => {}
        "find" => {
            if cmd.args.iter().any(|a| a == "-delete") {
                ask(out, "`find -delete` removes every file it matches".into());
            }
            let mut args = cmd.args.iter();
            while let Some(a) = args.next() {
                if matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                    if let Some(p) = args.next() {
                        let base = p.rsplit('/').next().unwrap_or(p);
                        if DESTROYERS.contains(&base) {
                            ask(
                                out,
                                format!("`find {a} {base}` destroys every file it matches"),
                            );
                        }
                    }
                }
            }
        }
        "truncate" => ask(out, "`truncate` empties or cuts the files it names".into()),
        "shred" => ask(out, "`shred` destroys the files it names".into()),
        "fallocate" => ask(out, "`fallocate` reserves disk space at once".into()),
        "dd" => {
            if let Some(of) = cmd.args.iter().find_map(|a| a.strip_prefix("of=")) {
                if of != "/dev/null" && !is_disk_image(of) {
                    ask(out, format!("`dd of={of}` overwrites the file in place"));
                }
            }
        }
        "rm" | "rmdir" => {
            for op in cmd.operands() {
                let path = cmd.resolve(op, ctx);
                if is_in_repository(&path, ctx) {
                    ask(
                        out,
                        format!(
                            "`{}` removes `{op}`, the project's git repository",
                            cmd.program
                        ),
                    );
                }
            }
        }
        "cp" | "mv" | "install" => {
            let ops = cmd.operands();
            if ops.len() >= 2
                && ops[..ops.len() - 1]
                    .iter()
                    .any(|o| ENDLESS.contains(o) || *o == "/dev/null")
            {
                ask(
                    out,
                    format!(
                        "`{}` overwrites `{}` with a device's contents",
                        cmd.program,
                        ops[ops.len() - 1]
                    ),
                );
            }
        }
        "ln" => symlink(cmd, ctx, out),
        "git" => git_config(cmd, out),
        "xargs" => {
            if let Some(p) = cmd.args.iter().find(|a| !a.starts_with('-')) {
                let base = p.rsplit('/').next().unwrap_or(p);
                if DESTROYERS.contains(&base) {
                    ask(
                        out,
                        format!("`xargs {base}` destroys files named only at run time"),
                    );
                }
            }
        }
        _ => {}
    }
    if !destroyer_left_to_changeset
        && cmd.wrappers.iter().any(|w| w == "xargs")
        && DESTROYERS.contains(&cmd.program.as_str())
    {
        ask(
            out,
            format!(
                "`xargs {}` destroys files named only at run time",
                cmd.program
            ),
        );
    }
    if let Some(code) = one_liner(cmd).filter(|_| !ctx.contained) {
        if !is_clearly_harmless(code) {
            ask(
                out,
                format!(
                    "a `{}` one-liner that can touch files or run programs: {}",
                    cmd.program,
                    shorten(code)
                ),
            );
        }
    }
    resource_bomb(cmd, out);
}

/// The in-place destroyers a contained action leaves to its changeset:
/// `find -delete`, `find -exec rm` (and the other [`DESTROYERS`]),
/// `xargs rm`, `truncate`, `shred`, `dd of=FILE`. Their targets are the
/// sandbox's view, whose only writable parts are the overlay and the
/// private `/tmp`. Not `dd` onto a device, which the destructive gate
/// denies whatever contains it.
fn is_destroyer(cmd: &Command) -> bool {
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    match cmd.program.as_str() {
        "find" => {
            cmd.args.iter().any(|a| a == "-delete")
                || cmd.args.windows(2).any(|w| {
                    matches!(w[0].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")
                        && DESTROYERS.contains(&base(&w[1]).as_str())
                })
        }
        "truncate" | "shred" => true,
        "dd" => cmd
            .args
            .iter()
            .filter_map(|a| a.strip_prefix("of="))
            .all(|of| !of.starts_with("/dev/")),
        "xargs" => cmd
            .args
            .iter()
            .find(|a| !a.starts_with('-'))
            .is_some_and(|p| DESTROYERS.contains(&base(p).as_str())),
        p => DESTROYERS.contains(&p) && cmd.wrappers.iter().any(|w| w == "xargs"),
    }
}

/// The program text of `python3 -c CODE`, `perl -e CODE`, `node -e CODE`...
pub fn one_liner(cmd: &Command) -> Option<&str> {
    let stem = cmd
        .program
        .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let (_, flags) = ONE_LINER_FLAGS.iter().find(|(p, _)| *p == stem)?;
    let mut args = cmd.args.iter();
    while let Some(a) = args.next() {
        if flags.contains(&a.as_str()) {
            return args.next().map(String::as_str);
        }
        // `-c` glued into a cluster: `python3 -Sc CODE`, `perl -ne CODE`.
        if let Some(cluster) = a.strip_prefix('-') {
            if !a.starts_with("--")
                && flags
                    .iter()
                    .any(|f| f.len() == 2 && cluster.ends_with(&f[1..]))
            {
                return args.next().map(String::as_str);
            }
        }
    }
    None
}

/// Code that can only compute and print: no imports, no file, process or
/// network names, no dynamic evaluation. Anything else is not *clearly*
/// harmless and is asked about.
pub fn is_clearly_harmless(code: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        crate::gates::shell::static_regex(
            r"(?i)\b(?:import|__import__|open|exec|eval|compile|getattr|setattr|globals|locals|vars|builtins|require|system|spawn|popen|unlink|remove|rmtree|rmsync|rmdir|rename|file|dir|io|kernel|fs|os|subprocess|shutil|pathlib|socket|glob|write|syscall|fork|kill|child_process|readfile|readfilesync|load|dlopen|ctypes|chr|fromcharcode|decode|b64decode|atob|unpack|do|qx|sysopen|binding|proc|exit|env|environ|deno|bun|truncate|chmod|link|symlink|mkdir)\b",
        )
    });
    static IMPORTS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let imports = IMPORTS.get_or_init(|| {
        crate::gates::shell::static_regex(r"(?m)(?:^|;)\s*import\s+([A-Za-z0-9_., ]+?)\s*(?:;|$)")
    });
    // Imports of harmless modules are fine; the rest of the code is judged.
    let mut rest = code.to_string();
    for caps in imports.captures_iter(code) {
        let all_harmless = caps[1]
            .split(',')
            .all(|m| HARMLESS_MODULES.contains(&m.trim()));
        if all_harmless {
            rest = rest.replace(&caps[0], ";");
        }
    }
    !re.is_match(&rest) && !rest.contains('`') && !rest.contains("$(")
}

/// `bash c.sh`, `./c.sh`, `source c.sh` or `python3 c.py` after the same
/// script wrote that file: the analysis never saw what runs.
fn runs_what_it_wrote(
    cmd: &Command,
    ctx: &GateContext,
    written: &[std::path::PathBuf],
    out: &mut Vec<(Decision, String)>,
) {
    if written.is_empty() {
        return;
    }
    let mut candidates: Vec<&str> = Vec::new();
    if cmd.program_path.contains('/') {
        candidates.push(&cmd.program_path);
    }
    let stem = cmd
        .program
        .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let runs_files = is_shell(&cmd.program)
        || matches!(cmd.program.as_str(), "source" | ".")
        || ONE_LINER_FLAGS.iter().any(|(p, _)| *p == stem);
    if runs_files {
        if let Some(first) = cmd.operands().first() {
            candidates.push(first);
        }
    }
    for c in candidates {
        let path = cmd.resolve(c, ctx);
        if written.contains(&path) {
            out.push((
                Decision::Ask,
                format!("runs `{c}`, which the same command wrote: what it does was never judged"),
            ));
        }
    }
}

/// Whether a command decodes hidden text (`base64 -d`, `xxd -r`).
fn decodes(cmd: &Command) -> bool {
    match cmd.program.as_str() {
        "base64" | "base32" | "basenc" => cmd.has_flag(&['d', 'D'], &["decode"]),
        "xxd" => cmd.has_flag(&['r'], &["revert"]),
        "uudecode" => true,
        "openssl" => cmd.args.iter().any(|a| a == "-d" || a == "base64"),
        _ => false,
    }
}

/// Scripts this command writes into a runnable file, with their text:
/// `echo 'rm -rf .' > c.sh`, `printf … > run`, `cat > x.sh <<EOF`. A later
/// `bash c.sh` runs text the gates never saw, so the text is judged now.
pub fn written_scripts(cmd: &Command) -> Vec<(String, String)> {
    let targets: Vec<String> = cmd
        .redirects
        .iter()
        .filter(|r| r.writes() && could_run(&r.target))
        .map(|r| r.target.clone())
        .chain(
            (cmd.program == "tee")
                .then(|| {
                    cmd.operands()
                        .into_iter()
                        .filter(|o| could_run(o))
                        .map(String::from)
                })
                .into_iter()
                .flatten(),
        )
        .collect();
    if targets.is_empty() {
        return Vec::new();
    }
    let text = match cmd.program.as_str() {
        "echo" => cmd
            .args
            .iter()
            .skip_while(|a| matches!(a.as_str(), "-n" | "-e" | "-E" | "-ne" | "-en"))
            .cloned()
            .collect::<Vec<_>>()
            .join(" "),
        "printf" => cmd
            .operands()
            .first()
            .map(|f| f.replace("\\n", "\n").replace("\\t", "\t"))
            .unwrap_or_default(),
        "cat" | "tee" => cmd.stdin_text.clone().unwrap_or_default(),
        _ => return Vec::new(),
    };
    if text.trim().is_empty() {
        return Vec::new();
    }
    targets
        .into_iter()
        .filter(|t| is_shell_script(t, &text))
        .map(|t| (t, text.clone()))
        .collect()
}

/// Whether a file holds shell text a later `bash FILE` or `./FILE` runs:
/// a shell extension, no extension, or a shell `#!` line.
pub fn is_shell_script(path: &str, text: &str) -> bool {
    if let Some(first) = text.lines().next().filter(|l| l.starts_with("#!")) {
        return first.ends_with("sh") || first.contains("sh ") || first.contains("bash");
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        None => true,
        Some((_, ext)) => matches!(ext, "sh" | "bash" | "zsh" | "ksh"),
    }
}

/// A file name a later command could run as a program: a script extension
/// or none at all (`c.sh`, `run`, not `logo.png`).
pub fn could_run(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        None => true,
        Some((_, ext)) => matches!(
            ext,
            "sh" | "bash"
                | "zsh"
                | "py"
                | "pl"
                | "rb"
                | "js"
                | "mjs"
                | "php"
                | "lua"
                | "el"
                | "bin"
                | "run"
                | "exe"
        ),
    }
}

/// `echo … | base64 -d > c.sh`: the file holds text nobody judged, and the
/// next command may run it.
fn decoded_into_file(cmd: &Command, script: &Script, out: &mut Vec<(Decision, String)>) {
    let writes: Vec<String> = cmd
        .redirects
        .iter()
        .filter(|r| r.writes() && !r.target.starts_with("/dev/") && could_run(&r.target))
        .map(|r| r.target.clone())
        .collect();
    if writes.is_empty() {
        return;
    }
    let fed_decoded = decodes(cmd) || script.upstream(cmd).any(decodes);
    if fed_decoded {
        out.push((
            Decision::Ask,
            format!(
                "writes decoded data to `{}`: what it holds was never judged",
                writes.join("`, `")
            ),
        ));
    }
}

/// `dd of=disk.img`: writing an image file is what dd is for.
fn is_disk_image(path: &str) -> bool {
    [".img", ".iso", ".raw", ".bin", ".qcow2", ".vhd"]
        .iter()
        .any(|ext| path.ends_with(ext))
}

/// `find . -name '*.log' -delete`: every `-name` names a disposable kind.
fn only_disposable(cmd: &Command) -> bool {
    let mut patterns = Vec::new();
    let mut args = cmd.args.iter();
    while let Some(a) = args.next() {
        if matches!(a.as_str(), "-name" | "-iname") {
            patterns.extend(args.next());
        }
    }
    !patterns.is_empty() && patterns.iter().all(|p| DISPOSABLE.contains(&p.as_str()))
}

fn is_in_repository(path: &Path, ctx: &GateContext) -> bool {
    ctx.cwd.is_absolute() && path.starts_with(ctx.cwd.join(".git"))
}

/// `ln -s TARGET LINK`: a link that points outside the project opens it to
/// everything beneath the target.
fn symlink(cmd: &Command, ctx: &GateContext, out: &mut Vec<(Decision, String)>) {
    if !cmd.has_flag(&['s'], &["symbolic"]) {
        return;
    }
    let ops = cmd.operands();
    let Some(target) = ops.first() else {
        return;
    };
    let link_dir = match ops.get(1) {
        Some(link) => cmd
            .resolve(link, ctx)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| ctx.cwd.clone()),
        None => ctx.cwd.clone(),
    };
    let anchored = target.starts_with('/') || target.starts_with('~') || target.starts_with('$');
    let points_to = if anchored {
        cmd.resolve(target, ctx)
    } else {
        crate::gates::shell::normalize(&link_dir.join(target))
    };
    if !(ctx.cwd.is_absolute() && points_to.starts_with(&ctx.cwd)) {
        out.push((
            Decision::Ask,
            format!("`ln -s` makes a link to `{target}`, outside the project"),
        ));
    }
}

/// `git config` that writes the repository's configuration (not `--global`,
/// not a read): git runs programs named there on the host.
fn git_config(cmd: &Command, out: &mut Vec<(Decision, String)>) {
    let mut args = cmd.args.iter().skip_while(|a| a.starts_with('-'));
    if args.next().map(String::as_str) != Some("config") {
        return;
    }
    let rest: Vec<&str> = args.map(String::as_str).collect();
    let elsewhere = rest
        .iter()
        .any(|a| matches!(*a, "--global" | "--system" | "--file" | "-f"));
    let reads = rest.iter().any(|a| {
        matches!(
            *a,
            "--get" | "--get-all" | "--get-regexp" | "--list" | "-l" | "get" | "list"
        )
    });
    let values: Vec<&str> = rest
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-'))
        .collect();
    let harmless_key = values
        .first()
        .is_some_and(|k| HARMLESS_GIT_KEYS.contains(&k.to_ascii_lowercase().as_str()));
    if !elsewhere && !reads && values.len() >= 2 && !harmless_key {
        out.push((
            Decision::Ask,
            "`git config` writes .git/config in the project's control surface: git configuration can name programs git runs on the host".into(),
        ));
    }
}

/// Output from an endless source into a file, or a huge fixed size.
fn resource_bomb(cmd: &Command, out: &mut Vec<(Decision, String)>) {
    let to_file = cmd.write_targets().iter().any(|t| !t.starts_with("/dev/"));
    let endless_input = cmd.program == "yes"
        || (matches!(cmd.program.as_str(), "cat" | "tail" | "tr" | "pv")
            && cmd.operands().iter().any(|o| ENDLESS.contains(o)));
    if endless_input && to_file {
        out.push((
            Decision::Ask,
            format!("{} writes an endless stream into a file", cmd.label()),
        ));
    }
    if cmd.program == "head" {
        let huge = cmd
            .option_values(&["-c"], &["bytes"])
            .iter()
            .any(|v| v.ends_with(['G', 'T', 'P', 'E']) || v.trim().len() > 10);
        if huge {
            out.push((
                Decision::Ask,
                "`head -c` copies gigabytes or more".to_string(),
            ));
        }
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(MAX).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::shell::parse;

    fn ctx() -> GateContext {
        GateContext {
            cwd: "/home/u/proj".into(),
            home: Some("/home/u".into()),
            network_allow: vec![],
            host_paths: Vec::new(),
            contained: false,
        }
    }

    fn reasons(script: &str) -> Vec<String> {
        findings(&parse(script, Some(Path::new("/home/u"))), &ctx())
            .into_iter()
            .map(|(d, r)| {
                assert_eq!(d, Decision::Ask, "{r}");
                r
            })
            .collect()
    }

    /// Contained (issue 36), interpreter code and a script written and run
    /// are judged by their changeset; in-place destruction still asks.
    #[test]
    fn contained_code_is_left_to_the_changeset() {
        let contained = GateContext {
            contained: true,
            ..ctx()
        };
        let judge = |s: &str| findings(&parse(s, Some(Path::new("/home/u"))), &contained);
        for left in [
            "python3 -c \"import shutil; shutil.rmtree('dist')\"",
            "node -e \"require('fs').rmSync('dist', {recursive: true})\"",
            "printf 'x' > x.sh; chmod +x x.sh; ./x.sh",
        ] {
            assert!(judge(left).is_empty(), "{left}: {:?}", judge(left));
            assert!(!reasons(left).is_empty(), "{left} asks uncontained");
        }
        // In-place destroyers too: what they deleted or emptied is the
        // changeset's (undoable, or asked as a loss).
        for left in [
            "truncate -s 0 src/a.rs",
            "find . -mindepth 1 -delete",
            "find src -type f -exec rm {} +",
            "find . -name '*.rs' -print0 | xargs -0 rm",
            "git ls-files | xargs shred -u",
            "shred -u notes.txt",
            "dd of=src/main.rs if=/dev/zero",
        ] {
            assert!(judge(left).is_empty(), "{left}: {:?}", judge(left));
            assert!(!reasons(left).is_empty(), "{left} asks uncontained");
        }
        // The repository is what checkpoints do not restore; a device is
        // not the project's.
        for kept in ["rm -rf .git/objects", "fallocate -l 10G big"] {
            assert!(!judge(kept).is_empty(), "{kept}");
        }
        assert!(!is_destroyer(
            &parse("dd if=x of=/dev/sda", None).commands[0]
        ));
    }

    #[test]
    fn ordinary_tools_used_destructively_are_named() {
        assert_eq!(
            reasons("find . -mindepth 1 -delete"),
            ["`find -delete` removes every file it matches"]
        );
        assert!(reasons("find . -name '*.log' -delete").is_empty());
        assert_eq!(
            reasons("dd of=src/main.rs if=/dev/zero"),
            ["`dd of=src/main.rs` overwrites the file in place"]
        );
        assert!(reasons("dd if=/dev/zero of=disk.img count=4").is_empty());
        assert_eq!(
            reasons("rm -rf ./.git/objects"),
            ["`rm` removes `./.git/objects`, the project's git repository"]
        );
        assert_eq!(
            reasons("ln -s .. up"),
            ["`ln -s` makes a link to `..`, outside the project"]
        );
        assert!(reasons("ln -s ../lib/x.rs src/x.rs").is_empty());
    }

    #[test]
    fn one_liners_ask_unless_clearly_harmless() {
        assert!(is_clearly_harmless("print(1+1)"));
        assert!(is_clearly_harmless(
            "import json, sys; print(json.dumps([1]))"
        ));
        assert!(is_clearly_harmless("console.log(process.version)"));
        assert!(!is_clearly_harmless("__import__('shutil').rmtree('.')"));
        assert!(!is_clearly_harmless("import os; os.remove('x')"));
        assert!(!is_clearly_harmless("print(open('.e'+'nv').read())"));
        assert!(!is_clearly_harmless("unlink glob '*'"));
        assert_eq!(reasons("python3 -c 'print(2)'"), Vec::<String>::new());
        assert_eq!(reasons("perl -ne 'unlink $_'").len(), 1);
    }

    #[test]
    fn running_what_the_script_wrote_asks() {
        assert_eq!(
            reasons("printf 'x' > x.sh; chmod +x x.sh; ./x.sh"),
            ["runs `./x.sh`, which the same command wrote: what it does was never judged"]
        );
        assert!(reasons("chmod +x run.sh && ./run.sh").is_empty());
        // A heredoc's text is judged when written; running it is no blind spot.
        assert!(reasons("cat > t.sh <<'EOF'\ncargo test\nEOF\nbash t.sh").is_empty());
        assert_eq!(
            reasons("cat > t.sh <<EOF\n\\$(rm -rf .)\nEOF\nbash t.sh"),
            ["runs `t.sh`, which the same command wrote: what it does was never judged"]
        );
        assert_eq!(
            reasons("echo cm0K | base64 -d > c.sh"),
            ["writes decoded data to `c.sh`: what it holds was never judged"]
        );
    }

    #[test]
    fn control_surface_and_git_config_writes_ask() {
        assert_eq!(
            reasons("echo x > .envrc"),
            ["`echo` writes to .envrc in the project's control surface: direnv runs it in the person's shell"]
        );
        assert_eq!(reasons("git config core.pager less").len(), 1);
        assert!(reasons("git config user.email a@b.c").is_empty());
        assert!(reasons("git config --global core.pager less").is_empty());
        assert!(reasons("git config --get core.pager").is_empty());
    }

    #[test]
    fn scripts_written_for_later_are_found_with_their_text() {
        let written = |s: &str| {
            parse(s, None)
                .commands
                .iter()
                .flat_map(written_scripts)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            written("printf 'rm -rf .\\n' > c.sh"),
            [("c.sh".to_string(), "rm -rf .\n".to_string())]
        );
        assert_eq!(
            written("echo -e 'find . -delete' > run"),
            [("run".to_string(), "find . -delete".to_string())]
        );
        assert!(written("echo 'print(1)' > x.py").is_empty());
        assert!(written("echo hello > out.txt").is_empty());
        assert!(is_shell_script("x.py", "#!/bin/bash\nls"));
    }

    #[test]
    fn resource_bombs_ask() {
        assert_eq!(reasons("yes > f").len(), 1);
        assert_eq!(reasons("cat /dev/urandom > big").len(), 1);
        assert!(reasons("head -c 16 /dev/urandom | base64").is_empty());
    }
}
