//! Sessions benchmark; prints its figures.
//!
//! 1. Request size with 1,000 skill files installed (each with two tools
//!    and a topic trigger): every skill's tools (what was sent before tool
//!    selection) against the tools of the active skills only, and the
//!    per-turn cost of choosing them.
//! 2. One session of 500 short turns through the real daemon (the fake
//!    provider answering at once, the same 1,000 skills installed, the
//!    session journalled and fsync'd every turn): the latency of turns
//!    around 10 and around 500, their ratio (target: within 1.2×), and the
//!    request size at both points (compaction keeps it bounded). Turns
//!    491–500 are measured alternating with turns 1–10 of a fresh session,
//!    so both see the same machine load.
//!
//! `cargo build --bins && cargo run --example bench_sessions` (or both with
//! `--release`); it drives the binary next to it.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "../tests/support/fake_provider.rs"]
mod fake_provider;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use passepartout::agent::{perceive, ToolsetSource};
use passepartout::llm::{OpenAiProvider, ProviderConfig, ProviderKind};
use passepartout::skills::{SkillDirs, SkillLoader};
use passepartout::toolsets::{SkillSources, SkillToolsets};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};

const SKILLS: usize = 1000;
const TURNS: usize = 500;

fn skill(i: usize) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "#+TITLE: Generated skill {i}\n#+SKILL: gen-{i}\n#+DESCRIPTION: Tools for project area {i}.\n#+TRIGGER: /\\barea{i}\\b/\n\n\
         * Guidance :prompt:\nWhen working on area {i}, list before you change.\n\n\
         * area{i}_list :tool:\n:PROPERTIES:\n:APPROVAL: auto\n:KIND: read\n:END:\nList the files of area {i}, newest first, with sizes and dates, so the person can see what changed recently.\n\n\
         | name  | type    | required | description        |\n|-------+---------+----------+--------------------|\n| dir   | string  | no       | Directory to list. |\n| count | integer | no       | How many entries.  |\n\n\
         #+begin_src bash\nls -t \"$ARG_DIR\" | head -n \"$ARG_COUNT\"\n#+end_src\n\n\
         * area{i}_stats :tool:\nCount lines per file type in area {i} and report the ten most common types.\n\n\
         | name | type   | required | description     |\n|------+--------+----------+-----------------|\n| path | string | yes      | Where to count. |\n\n\
         #+begin_src bash\nfind \"$ARG_PATH\" -type f | sed 's/.*\\.//' | sort | uniq -c | sort -rn | head\n#+end_src\n"
    );
    s
}

fn write_skills(dir: &Path) {
    std::fs::create_dir_all(dir).expect("skill dir");
    for i in 0..SKILLS {
        std::fs::write(dir.join(format!("gen-{i:04}.org")), skill(i)).expect("write skill");
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn request_size() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let skills = tmp.path().join("skills");
    write_skills(&skills);
    let cwd = tmp.path().to_path_buf();
    let provider = OpenAiProvider::new(&ProviderConfig::new(
        "bench",
        ProviderKind::OpenAi,
        "http://127.0.0.1:9/v1",
        "bench-model",
    ))
    .expect("provider");
    let toolsets = SkillToolsets::new(SkillSources {
        builtin: true,
        user_dir: Some(skills.clone()),
        policy_file: None,
        trust_file: None,
        project_auto_approval: false,
    });
    let prompt = "Please look at the failing test in area17 and fix it.";
    let selected = toolsets.toolset(&cwd, prompt);
    let selected_body = provider.request_body(&perceive::request(&[], &selected, &cwd));

    // Before selection: every loaded skill's tools.
    let loader = SkillLoader::new(SkillDirs {
        builtin: true,
        user: Some(skills),
        project: None,
        trust: None,
        project_auto_approval: false,
    });
    let set = loader.current();
    let mut all = selected.clone();
    let mut registry = passepartout::tools::ToolRegistry::new();
    passepartout::tools::builtin::register(&mut registry);
    set.register_tools(&mut registry);
    all.tools = registry;
    let all_body = provider.request_body(&perceive::request(&[], &all, &cwd));

    let mut overhead = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        let ts = toolsets.toolset(&cwd, prompt);
        let _ = perceive::request(&[], &ts, &cwd);
        overhead.push(t.elapsed());
    }
    println!(
        "request size with {SKILLS} skill files ({} loaded):",
        set.len()
    );
    println!(
        "  all skills' tools:    {:>5} tools, {:>8} bytes",
        all.tools.len(),
        all_body.to_string().len()
    );
    println!(
        "  active skills' tools: {:>5} tools, {:>8} bytes  (prompt mentions one area)",
        selected.tools.len(),
        selected_body.to_string().len()
    );
    println!(
        "  per-turn toolset + request build: median {:.2} ms (n=21)",
        ms(median(overhead))
    );
}

struct Daemon {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Daemon {
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
        loop {
            let mut text = String::new();
            assert!(
                self.stdout.read_line(&mut text).await.expect("read") != 0,
                "daemon exited"
            );
            let m: Value = serde_json::from_str(&text).expect("json");
            if m["id"] == json!(id) && m.get("method").is_none() {
                return m;
            }
        }
    }
}

fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("target dir")
        .join("passepartout")
}

async fn long_session() {
    let home = tempfile::tempdir().expect("tempdir");
    let project = tempfile::tempdir().expect("tempdir");
    write_skills(&home.path().join("config/passepartout/skills"));
    let answer = "Done: I looked at it and everything is in order; nothing else to change here.";
    // Generous: compaction summaries take replies too.
    let script: Vec<fake_provider::Reply> = (0..TURNS * 2)
        .map(|_| match fake_provider::openai_text(answer) {
            fake_provider::Reply::OpenAi { chunks, done, .. } => fake_provider::Reply::OpenAi {
                chunks,
                delay_ms: 0,
                done,
            },
            other => other,
        })
        .collect();
    let fake = fake_provider::FakeProvider::start(script).await;
    let mut child = Command::new(binary())
        .args([
            "serve",
            "--provider-url",
            &fake.openai_url(),
            "--model",
            "fake-model",
        ])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("PASSEPARTOUT_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn passepartout (cargo build --bins first)");
    let mut d = Daemon {
        stdin: child.stdin.take().expect("stdin"),
        stdout: BufReader::new(child.stdout.take().expect("stdout")),
        next: 0,
    };
    d.request("initialize", json!({"protocolVersion": 1})).await;
    let r = d
        .request(
            "session/new",
            json!({"cwd": project.path(), "mcpServers": []}),
        )
        .await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("session")
        .to_string();
    let prompt = |sid: &str, turn: usize| {
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": format!(
            "Turn {turn}: please check the build output once more and tell me if anything changed.")}]})
    };
    let mut early_sizes = 0;
    for turn in 1..=TURNS - 10 {
        let t = Instant::now();
        let r = d.request("session/prompt", prompt(&sid, turn)).await;
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        if turn % 50 == 0 {
            eprintln!("  … turn {turn}: {:.2} ms", ms(t.elapsed()));
        }
        if turn == 10 {
            early_sizes = fake
                .requests()
                .last()
                .map(|r| r.body.to_string().len())
                .unwrap_or(0);
        }
    }
    // The last ten turns of the long session alternate with the first ten
    // of a fresh one, so both are measured under the same machine load
    // (this machine is shared; a drift over minutes would otherwise show
    // as a difference between turn 10 and turn 500).
    let r = d
        .request(
            "session/new",
            json!({"cwd": project.path(), "mcpServers": []}),
        )
        .await;
    let fresh = r["result"]["sessionId"]
        .as_str()
        .expect("session")
        .to_string();
    let (mut early, mut late) = (Vec::new(), Vec::new());
    let (mut late_size, mut fresh_size) = (0, 0);
    for i in 1..=10 {
        let t = Instant::now();
        let r = d.request("session/prompt", prompt(&fresh, i)).await;
        early.push(t.elapsed());
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        fresh_size = fake
            .requests()
            .last()
            .map(|r| r.body.to_string().len())
            .unwrap_or(0);
        let t = Instant::now();
        let r = d
            .request("session/prompt", prompt(&sid, TURNS - 10 + i))
            .await;
        late.push(t.elapsed());
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        late_size = fake
            .requests()
            .last()
            .map(|r| r.body.to_string().len())
            .unwrap_or(0);
    }
    // Turns 6..10 of the fresh session (the first ones load skills).
    let early = median(early[5..].to_vec());
    let late = median(late[5..].to_vec());
    let reqs = fake.requests();
    let compactions = reqs
        .iter()
        .filter(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("You are compacting"))
        })
        .count();
    println!("one session, {TURNS} turns, {SKILLS} skill files installed:");
    println!(
        "  turn ~10:  median {:.2} ms, request {} bytes (at turn 10: {early_sizes} bytes)",
        ms(early),
        fresh_size
    );
    println!(
        "  turn ~500: median {:.2} ms, request {} bytes",
        ms(late),
        late_size
    );
    println!(
        "  ratio {:.2}× (target ≤ 1.2×); {} compactions; {} provider requests",
        late.as_secs_f64() / early.as_secs_f64(),
        compactions,
        reqs.len()
    );
    let journal = home
        .path()
        .join("state/passepartout/sessions")
        .join(format!("{sid}.jsonl"));
    if let Ok(m) = std::fs::metadata(&journal) {
        println!("  journal {} bytes", m.len());
    }
}

#[tokio::main]
async fn main() {
    request_size();
    long_session().await;
}
