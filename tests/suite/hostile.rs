//! The hostile corpus: every hostile action must be denied or held for
//! approval by the built-in gates even when the tool is declared `auto`, and
//! every benign action must be allowed (a gate that asks for everything is
//! useless). The corpora are data in `tests/hostile/*.json`.

use std::path::PathBuf;

use passepartout::action::{Action, Approval, Effect};
use passepartout::gates::{Decision, GateContext, GateEngine};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    effect: Effect,
    expect: String,
    note: String,
    /// `"changeset"`: contained (the default configuration), the text
    /// stage lets this case run and its changeset decides — what it wrote
    /// is judged before it reaches the project, and what it deleted is
    /// undoable or asked as a loss (issue 36).
    #[serde(default)]
    contained: Option<String>,
}

fn load(name: &str) -> Vec<Case> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hostile")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("corpus file readable");
    serde_json::from_str(&text).expect("corpus is valid JSON")
}

fn context() -> GateContext {
    GateContext {
        cwd: "/home/user/project".into(),
        home: Some("/home/user".into()),
        network_allow: vec![
            "crates.io".into(),
            "static.crates.io".into(),
            "github.com".into(),
        ],
        host_paths: Vec::new(),
        // Uncontained: the text is all there is to judge (sandbox or
        // checkpoints off), so every hostile action must be stopped here.
        contained: false,
    }
}

/// The default configuration (issue 36): commands run into an overlay and
/// file tools are recorded, so what they write is judged from the
/// changeset (`tests/suite/consequences.rs`); benign and routine actions
/// must pass the text stage.
fn contained() -> GateContext {
    GateContext {
        contained: true,
        ..context()
    }
}

fn action(effect: Effect) -> Action {
    let target = match &effect {
        Effect::Run { .. } => "shell",
        Effect::EvalElisp { .. } => "emacs",
        Effect::Message { .. } => "system",
        Effect::Op { .. } => "memex",
        _ => "files",
    };
    Action {
        tool: "corpus".into(),
        target: target.into(),
        arguments: serde_json::json!({}),
        effect,
        approval: Approval::Auto,
        timeout_secs: None,
    }
}

fn shown(effect: &Effect) -> String {
    serde_json::to_string(effect).unwrap_or_default()
}

#[test]
fn hostile_actions_are_stopped_and_benign_ones_pass() {
    let engine = GateEngine::with_builtin_gates();
    let ctx = context();
    let hostile = load("hostile.json");
    let benign = load("benign.json");
    assert!(
        hostile.len() >= 60,
        "hostile corpus has {} cases",
        hostile.len()
    );
    assert!(
        benign.len() >= 30,
        "benign corpus has {} cases",
        benign.len()
    );

    let mut misses = Vec::new();
    let (mut denied, mut held, mut allowed) = (0, 0, 0);
    for case in &hostile {
        let j = engine.evaluate(&action(case.effect.clone()), &ctx);
        match j.decision {
            Decision::Deny => denied += 1,
            Decision::Ask => held += 1,
            Decision::Allow => allowed += 1,
        }
        let ok = match case.expect.as_str() {
            "deny" => j.decision == Decision::Deny,
            "ask" => j.decision == Decision::Ask,
            "deny_or_ask" => j.decision != Decision::Allow,
            other => panic!("unknown expectation `{other}` for {}", case.note),
        };
        if !ok {
            misses.push(format!(
                "hostile `{}`: expected {}, got {} — {}\n    {}",
                case.note,
                case.expect,
                j.decision,
                j.reason(),
                shown(&case.effect)
            ));
        }
    }
    let mut benign_allowed = 0;
    let ctx = contained();
    for case in &benign {
        assert_eq!(
            case.expect, "allow",
            "benign case {} must expect allow",
            case.note
        );
        let j = engine.evaluate(&action(case.effect.clone()), &ctx);
        if j.decision == Decision::Allow {
            benign_allowed += 1;
        } else {
            misses.push(format!(
                "benign `{}`: got {} — {}\n    {}",
                case.note,
                j.decision,
                j.reason(),
                shown(&case.effect)
            ));
        }
    }
    println!(
        "hostile: {denied} denied, {held} held for approval, {allowed} allowed; benign: {benign_allowed} allowed of {}",
        benign.len()
    );
    assert!(
        misses.is_empty(),
        "{} miss(es):\n{}",
        misses.len(),
        misses.join("\n")
    );
}

/// Contained, a hostile case reaches its changeset only when the corpus
/// says so (`"contained": "changeset"`: interpreter code, scripts written
/// and run, in-place destroyers of project files); every other one is
/// still stopped at the text stage, and none marked is stopped there.
#[test]
fn contained_only_the_marked_hostile_cases_are_left_to_the_changeset() {
    let engine = GateEngine::with_builtin_gates();
    let ctx = contained();
    let mut misses = Vec::new();
    let mut left = 0;
    for case in load("hostile.json") {
        let j = engine.evaluate(&action(case.effect.clone()), &ctx);
        let marked = case.contained.as_deref() == Some("changeset");
        if marked {
            left += 1;
        }
        if marked != (j.decision == Decision::Allow) {
            misses.push(format!(
                "`{}` (marked: {marked}): {} — {}\n    {}",
                case.note,
                j.decision,
                j.reason(),
                shown(&case.effect)
            ));
        }
    }
    assert!(misses.is_empty(), "{}", misses.join("\n"));
    assert!(left > 0, "no case is left to the changeset");
}

#[test]
fn tool_approval_is_never_loosened() {
    let engine = GateEngine::with_builtin_gates();
    let ctx = context();
    let benign = load("benign.json");
    for case in &benign {
        let mut a = action(case.effect.clone());
        a.approval = Approval::Ask;
        assert_eq!(
            engine.evaluate(&a, &ctx).decision,
            Decision::Ask,
            "{}",
            case.note
        );
        a.approval = Approval::Never;
        assert_eq!(
            engine.evaluate(&a, &ctx).decision,
            Decision::Deny,
            "{}",
            case.note
        );
    }
}

#[test]
fn reasons_name_the_gate_and_never_echo_secrets() {
    let engine = GateEngine::with_builtin_gates();
    let key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678";
    let j = engine.evaluate(
        &action(Effect::WriteFile {
            path: "config.py".into(),
            content: format!("KEY = \"{key}\"\n"),
        }),
        &contained(),
    );
    assert_eq!(j.decision, Decision::Ask);
    assert_eq!(
        j.reason(),
        "held for approval by gate `secrets`: OpenAI-style API key in the content for config.py: sk-p…(44 chars)"
    );
    let j = engine.evaluate(
        &action(Effect::Run {
            interpreter: "bash".into(),
            script: "rm -rf ~".into(),
            argv: vec![],
            env: Default::default(),
            network: false,
        }),
        &context(),
    );
    assert_eq!(
        j.reason(),
        "denied by gate `destructive`: rm -r on the home directory"
    );
}

/// Not an assertion: prints every hostile verdict so a reviewer can check
/// that each case is stopped for the right reason
/// (`cargo test --test hostile -- --ignored --nocapture`).
#[test]
#[ignore]
fn print_every_hostile_reason() {
    let engine = GateEngine::with_builtin_gates();
    for case in load("hostile.json") {
        let j = engine.evaluate(&action(case.effect.clone()), &context());
        println!("{:<50} {}", case.note, j.reason());
    }
}

/// The routine corpus: lines from real build, test and setup scripts
/// (`tests/hostile/routine.json`). Inside the closed boundary what is
/// confined to the project and undoable should run without asking; at
/// least 95% of it must. The rest is printed with the reason each still
/// asks, so the list in `docs/threat-model.md` can be checked against it.
#[test]
fn routine_script_lines_mostly_run_without_asking() {
    let engine = GateEngine::with_builtin_gates();
    let ctx = contained();
    let routine = load("routine.json");
    assert!(
        routine.len() >= 40,
        "routine corpus has {} cases",
        routine.len()
    );
    let mut asked = Vec::new();
    for case in &routine {
        assert_eq!(case.expect, "allow", "routine case {}", case.note);
        let j = engine.evaluate(&action(case.effect.clone()), &ctx);
        if j.decision != Decision::Allow {
            asked.push(format!("`{}`: {}", case.note, j.reason()));
        }
    }
    let allowed = routine.len() - asked.len();
    println!(
        "routine: {allowed} of {} run without asking ({:.1}%); still asking:\n{}",
        routine.len(),
        100.0 * allowed as f64 / routine.len() as f64,
        asked.join("\n")
    );
    assert!(
        allowed * 100 >= routine.len() * 95,
        "only {allowed} of {} routine lines run without asking:\n{}",
        routine.len(),
        asked.join("\n")
    );
}

/// One command as the differential and golden tests compare it: where it
/// came from (origin, nesting parent, pipeline stage), the program, its
/// words, assignments, wrappers, redirections and heredoc text.
fn signature(script: &passepartout::gates::shell::Script) -> Vec<String> {
    let mut out: Vec<String> = script
        .commands
        .iter()
        .map(|c| {
            format!(
                "{:?} parent={:?} stage={} bg={} prog={:?} path={:?} args={:?} assign={:?} wrap={:?} redir={:?} stdin={:?} cwd={:?}",
                c.origin,
                c.parent,
                c.stage,
                c.background,
                c.program,
                c.program_path,
                c.args,
                c.assignments,
                c.wrappers,
                c.redirects
                    .iter()
                    .map(|r| format!("{} {}", r.op, r.target))
                    .collect::<Vec<_>>(),
                c.stdin_text,
                c.cwd,
            )
        })
        .collect();
    if script.truncated {
        out.push("truncated".into());
    }
    out
}

/// Every effect of the corpora (hostile, benign, routine) and the inputs of
/// the old lexer's unit tests, with a name for failure messages.
fn differential_inputs() -> Vec<(String, Effect)> {
    let mut out = Vec::new();
    for file in [
        "hostile.json",
        "benign.json",
        "routine.json",
        "lexer_inputs.json",
    ] {
        for case in load(file) {
            out.push((format!("{file} `{}`", case.note), case.effect));
        }
    }
    out
}

/// The differential test, kept after the word lexer (`gates::shell_words`)
/// was retired: on every action of the corpora, the commands built from the
/// tree-sitter tree (`gates::shell::script_of`) equal the lexer's, as
/// recorded once from the lexer before it was deleted
/// (`tests/hostile/lexer_golden.json`) — program, words, assignments,
/// wrappers, redirections, heredoc text, origin, nesting and pipeline
/// stage. Every difference is listed below with the reason the tree is
/// right.
#[test]
fn tree_commands_equal_the_retired_lexers_on_the_corpora() {
    #[derive(Deserialize)]
    struct Golden {
        cases: Vec<GoldenCase>,
    }
    #[derive(Deserialize)]
    struct GoldenCase {
        input: String,
        commands: Vec<String>,
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/lexer_golden.json");
    let golden: Golden =
        serde_json::from_str(&std::fs::read_to_string(path).expect("golden file readable"))
            .expect("golden file is valid JSON");
    let ctx = context();
    let mut compared = 0;
    let mut differ = Vec::new();
    let mut expected_cases = golden.cases.into_iter();
    for (name, effect) in differential_inputs() {
        let Some(tree) = passepartout::gates::shell::script_of(&effect, &ctx) else {
            continue;
        };
        let lexer = expected_cases
            .next()
            .expect("the golden file has a case for every action that runs a shell");
        assert_eq!(
            lexer.input, name,
            "the golden file follows the corpora's order"
        );
        compared += 1;
        let (t, w) = (signature(&tree), lexer.commands);
        if t != w {
            let mut lines = vec![format!("{name}:")];
            for i in 0..t.len().max(w.len()) {
                let (a, b) = (t.get(i), w.get(i));
                if a != b {
                    lines.push(format!("  tree  {a:?}\n  lexer {b:?}"));
                }
            }
            differ.push(lines.join("\n"));
        }
    }
    assert!(
        expected_cases.next().is_none(),
        "the golden file has cases the corpora no longer hold"
    );
    // Where the tree is right and the lexer was not. The list is exact: a
    // new difference, or one that goes away, fails the test.
    let intended: [(&str, &str); 6] = [
        (
            "hostile.json `classic fork bomb`",
            "the lexer took the name in the definition `:(){ ... }` for a command; defining a function runs nothing",
        ),
        (
            "hostile.json `renamed fork bomb`",
            "the same: `f(){ ... }` defines `f`, it does not run it",
        ),
        (
            "hostile.json `brace expansion spelling rm -rf .`",
            "both are wrong (bash runs `rm -rf .`); the tree has an ERROR node and the syntax pass asks on brace expansion either way",
        ),
        (
            "hostile.json `brace expansion spelling rm -rf /`",
            "the same: an ERROR node the syntax pass asks about; the words are unknowable without expanding braces",
        ),
        (
            "hostile.json `fork bomb with a named function`",
            "the same: `bomb() { ... }` defines `bomb`, it does not run it",
        ),
        (
            "routine.json `case \"$1\" in test) cargo test ;; build) cargo build ;; *) echo usage ;`",
            "the lexer took the patterns `build)` and `*)` for commands; patterns are matched, never run",
        ),
    ];
    let differing: Vec<&str> = differ
        .iter()
        .map(|d| d.split(":\n").next().unwrap_or(""))
        .collect();
    let expected: Vec<&str> = intended.iter().map(|(name, _)| *name).collect();
    println!(
        "differential: {compared} actions compared, {} differ ({} intended)",
        differ.len(),
        intended.len()
    );
    assert!(compared >= 400, "only {compared} actions compared");
    assert_eq!(differing, expected, "{}", differ.join("\n"));
}
