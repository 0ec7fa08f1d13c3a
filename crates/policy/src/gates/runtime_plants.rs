//! The runtime-plants gate: files the agent leaves where a language runtime
//! picks them up and runs them on the host, outside any sandbox (issue 24,
//! item 4).
//!
//! Python runs code from the project without being asked to: `python3 -m
//! NAME`, `python3 -c` and the interactive interpreter put the current
//! directory first on the import path, so a top-level `pip/__main__.py`
//! (or `json.py`) the agent planted runs at the person's next `python3 -m
//! pip` in the project; a `*.pth` file's `import` lines run at every start
//! of an interpreter whose `site-packages` holds it (a project's `.venv`);
//! `sitecustomize.py` and `usercustomize.py` are imported at every start.
//! Creating any of these is *ask*, judged twice like the history gate: from
//! the command (its write targets, a `write_file` path) by [`RuntimePlantsGate`],
//! and from the changeset (the files an action actually created or changed)
//! by [`judge_changes`], which the effect stage calls with the observed
//! effect.
//!
//! "Named like a standard or installed tool module" is a fixed list:
//! [`STDLIB_MODULES`] (Python 3.11's `sys.stdlib_module_names` without the
//! private `_` ones and `test`, `this`, `antigravity`, `idlelib`,
//! `turtledemo`, which nothing runs) and [`TOOL_MODULES`] (packaging,
//! test and lint tools people run as `python3 -m NAME`). A module counts
//! when it is at the top of the project (where `-m` and `-c` look first):
//! `NAME.py`, `NAME.pyc`, `NAME.so` / `NAME.*.so`, or a package
//! `NAME/__init__.py` / `NAME/__main__.py`. A folder named `json/` holding
//! no Python entry point is not a module and does not ask.

use std::path::Path;

use crate::action::{Action, Effect};
use crate::checkpoint::effect::{ChangeKind, FileChange};
use crate::gates::engine::verdict_from_findings;
use crate::gates::shell::{resolve_path, script_of};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// Python's standard-library top-level modules (3.11), as a project-level
/// module of the same name would shadow them.
pub const STDLIB_MODULES: &[&str] = &[
    "abc",
    "aifc",
    "argparse",
    "array",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "atexit",
    "audioop",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "cProfile",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "msilib",
    "msvcrt",
    "multiprocessing",
    "netrc",
    "nis",
    "nntplib",
    "nt",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "ossaudiodev",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "spwd",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "termios",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "winreg",
    "winsound",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
];

/// Tools people run as `python3 -m NAME` (or that import each other at
/// start): packaging, environments, tests, linters, notebooks.
pub const TOOL_MODULES: &[&str] = &[
    "pip",
    "setuptools",
    "wheel",
    "pkg_resources",
    "_distutils_hack",
    "ensurepip",
    "virtualenv",
    "pipx",
    "poetry",
    "pdm",
    "hatch",
    "hatchling",
    "flit",
    "flit_core",
    "twine",
    "uv",
    "pytest",
    "_pytest",
    "pluggy",
    "py",
    "tox",
    "nox",
    "coverage",
    "black",
    "isort",
    "flake8",
    "pyflakes",
    "pycodestyle",
    "pylint",
    "mypy",
    "ruff",
    "IPython",
    "ipykernel",
    "jupyter",
    "notebook",
    "conda",
    "certifi",
    "requests",
    "urllib3",
    "six",
];

/// Why creating or changing the project-relative path `rel` (`/`-separated)
/// plants code a runtime runs on the host, or `None`. `created`: the file
/// is new (an existing module of the project is the project's own).
pub fn plant(rel: &str, created: bool) -> Option<String> {
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let name = *parts.last()?;
    if name.ends_with(".pth") {
        return Some(format!(
            "`{rel}` is a `.pth` file: Python runs its `import` lines at every start of an \
             interpreter whose site-packages holds it"
        ));
    }
    if matches!(name, "sitecustomize.py" | "usercustomize.py") {
        return Some(format!(
            "`{rel}`: Python imports `{name}` at every start of an interpreter that finds it"
        ));
    }
    if !created {
        return None;
    }
    let module = match parts.as_slice() {
        [file] => module_of_file(file)?,
        [package, "__init__.py" | "__main__.py"] => package,
        _ => return None,
    };
    let kind = if STDLIB_MODULES.contains(&module) {
        "Python's standard module"
    } else if TOOL_MODULES.contains(&module) {
        "the installed tool"
    } else {
        return None;
    };
    Some(format!(
        "`{rel}` is a module named like {kind} `{module}` at the top of the project: the \
         person's next `python3 -m {module}` (or `python3 -c`, or a script there that imports \
         it) runs this file instead"
    ))
}

/// The module a top-level file defines: `json.py`, `json.pyc`, `json.so`,
/// `json.cpython-311-x86_64-linux-gnu.so`.
fn module_of_file(file: &str) -> Option<&str> {
    if let Some(stem) = file
        .strip_suffix(".py")
        .or_else(|| file.strip_suffix(".pyc"))
    {
        return Some(stem);
    }
    let stem = file.strip_suffix(".so")?;
    Some(stem.split('.').next().unwrap_or(stem))
}

/// Judge an action's changeset: created plants, and changed `.pth` or
/// `*customize.py` files, are held for a person.
pub fn judge_changes(changes: &[FileChange]) -> Vec<Verdict> {
    let found: Vec<String> = changes
        .iter()
        .filter(|c| c.kind != ChangeKind::Deleted)
        .filter_map(|c| plant(&c.path, c.kind == ChangeKind::Created))
        .collect();
    verdict_for(found)
}

/// Judge the files an action wrote that checkpoints do not record (an
/// overlay's passthrough: ignored trees such as `.venv`, `node_modules`,
/// build folders) — where a `.pth` file hides best. Each counts as created.
pub fn judge_written<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<Verdict> {
    verdict_for(paths.into_iter().filter_map(|p| plant(p, true)).collect())
}

fn verdict_for(found: Vec<String>) -> Vec<Verdict> {
    if found.is_empty() {
        return Vec::new();
    }
    let more = found.len().saturating_sub(3);
    let mut reason = format!(
        "the action left code a runtime runs on the host: {}",
        found[..found.len().min(3)].join("; ")
    );
    if more > 0 {
        reason.push_str(&format!(" and {more} more"));
    }
    vec![Verdict::new(Decision::Ask, "effect-runtime", reason)]
}

/// Asks before a command or `write_file` that writes a plant by name (the
/// changeset check catches the ones the text hides).
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimePlantsGate;

impl Gate for RuntimePlantsGate {
    fn name(&self) -> &str {
        "runtime_plants"
    }

    fn priority(&self) -> i32 {
        45
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings = Vec::new();
        let mut judge = |path: &Path| {
            let Ok(rel) = path.strip_prefix(&ctx.cwd) else {
                return;
            };
            let rel = rel.to_string_lossy();
            // Whether the file is new cannot be known from the text; an
            // existing module of the project written again asks too.
            if let Some(why) = plant(&rel, true) {
                findings.push((Decision::Ask, why));
            }
        };
        if let Some(script) = script_of(&action.effect, ctx) {
            for cmd in &script.commands {
                if matches!(
                    cmd.program.as_str(),
                    "mkdir" | "rm" | "rmdir" | "unlink" | "shred"
                ) {
                    continue; // makes a folder or removes: plants nothing
                }
                for target in cmd.write_targets() {
                    judge(&cmd.resolve(&target, ctx));
                }
            }
        }
        if let Effect::WriteFile { path, .. } = &action.effect {
            judge(&resolve_path(&path.to_string_lossy(), ctx));
        }
        verdict_from_findings(self.name(), findings)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pth_file_in_an_ignored_tree_is_asked_about() {
        let v = judge_written([".venv/lib/python3.11/site-packages/zz.pth", "build/out.o"]);
        assert_eq!(v.len(), 1);
        assert!(v[0].reason.contains("zz.pth"), "{}", v[0].reason);
        assert!(judge_written(["node_modules/x/index.js"]).is_empty());
    }

    use super::*;
    use crate::action::{Action, Effect};
    use std::path::PathBuf;

    #[test]
    fn plants_are_named_and_ordinary_files_are_not() {
        for (p, created) in [
            ("pip/__main__.py", true),
            ("pip/__init__.py", true),
            ("json.py", true),
            ("setuptools/__init__.py", true),
            ("os.cpython-311-x86_64-linux-gnu.so", true),
            (".venv/lib/python3.11/site-packages/evil.pth", true),
            ("distutils-precedence.pth", false),
            ("lib/sitecustomize.py", false),
            ("usercustomize.py", true),
        ] {
            assert!(plant(p, created).is_some(), "{p}");
        }
        for (p, created) in [
            ("src/json.py", true),
            ("json/README.md", true),
            ("json.py", false),
            ("mytool/__main__.py", true),
            ("types/index.d.ts", true),
            ("test/__init__.py", true),
            ("setup.py", true),
            ("conftest.py", true),
        ] {
            assert!(plant(p, created).is_none(), "{p}");
        }
    }

    #[test]
    fn the_changeset_asks_once_for_all_plants() {
        let change = |path: &str, kind| FileChange {
            path: path.into(),
            kind,
            old_size: None,
            new_size: Some(1),
            old: None,
            new: None,
        };
        let v = judge_changes(&[
            change("pip/__main__.py", ChangeKind::Created),
            change("pip/__init__.py", ChangeKind::Created),
            change("README.md", ChangeKind::Modified),
        ]);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].decision, Decision::Ask);
        assert!(v[0].reason.contains("pip/__main__.py"), "{}", v[0].reason);
        assert!(judge_changes(&[change("src/main.py", ChangeKind::Created)]).is_empty());
        assert!(judge_changes(&[change("evil.pth", ChangeKind::Deleted)]).is_empty());
    }

    fn shell(script: &str) -> Action {
        Action {
            tool: "shell".into(),
            target: "shell".into(),
            arguments: serde_json::json!({ "command": script }),
            effect: Effect::Run {
                interpreter: "bash".into(),
                script: script.into(),
                argv: vec![],
                env: Default::default(),
                network: false,
            },
            approval: crate::action::Approval::Auto,
            timeout_secs: None,
        }
    }

    #[test]
    fn commands_that_write_a_plant_by_name_ask() {
        let ctx = GateContext {
            cwd: PathBuf::from("/p"),
            ..GateContext::default()
        };
        for bad in [
            "mkdir -p pip && printf 'x' > pip/__main__.py",
            "echo 'import os' > .venv/lib/python3.11/site-packages/x.pth",
            "cp /tmp/x.py sitecustomize.py",
            "cat > json.py <<'EOF'\nx = 1\nEOF",
        ] {
            let v = RuntimePlantsGate.check(&shell(bad), &ctx);
            assert_eq!(v.map(|v| v.decision), Some(Decision::Ask), "{bad}");
        }
        for ok in [
            "mkdir pip",
            "echo hi > notes.txt",
            "cp a.py src/json.py",
            "rm -f json.py",
        ] {
            assert!(RuntimePlantsGate.check(&shell(ok), &ctx).is_none(), "{ok}");
        }
    }
}
