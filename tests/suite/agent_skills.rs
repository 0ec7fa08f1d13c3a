//! Agent Skills (a folder with SKILL.md and scripts/) through the real
//! daemon: the body reaches the model, a script runs as a tool that asks
//! first and gets its arguments as data; `skills import` writes an Org
//! skill that `skills check` accepts and that loads the same way.

use crate::harness;
use crate::support;

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider};

use crate::harness::cli;

const SKILL_MD: &str = "---\nname: greeter\ndescription: >\n  Greets people politely\n  by name.\nlicense: MIT\n---\n# Greeter\n\n* Use `scripts/greet.sh NAME` to greet.\n#+begin_src is not Org here. BODY-MARKER\n";

const GREET_SH: &str = "#!/usr/bin/env bash\nprintf 'hello, %s and %s\\n' \"$1\" \"$2\"\n";

fn make_skill(root: &std::path::Path) -> std::path::PathBuf {
    let dir = root.join("greeter");
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("SKILL.md"), SKILL_MD).unwrap();
    std::fs::write(dir.join("scripts/greet.sh"), GREET_SH).unwrap();
    std::fs::write(dir.join("scripts/helper.js"), "console.log(1)\n").unwrap();
    dir
}

#[tokio::test]
async fn a_skill_md_folder_runs_as_a_skill() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let skills = home.path().join("config/passepartout/skills");
    make_skill(&skills);
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[(
            "g1",
            "greeter_greet",
            r#"{"args": "Ada $(touch /tmp/pwned-agent-skill)"}"#,
        )]),
        fake::openai_text("Greeted."),
    ])
    .await;
    let url = fake.openai_url();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url, "--sandbox", "none"],
        json!({}),
        project.path(),
    )
    .await;
    let (r, asked) = c.prompt_allowing(&sid, "greet Ada").await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(asked.len(), 1, "an imported script asks before it runs");
    let body = &fake.requests()[0].body;
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("## skill: greeter"), "{system}");
    assert!(
        system.contains(
            "* Use `scripts/greet.sh NAME` to greet.\n#+begin_src is not Org here. BODY-MARKER"
        ),
        "the Markdown body arrives word for word: {system}"
    );
    let results = fake.tool_results(1);
    assert!(
        results[0].contains("hello, Ada and $(touch"),
        "arguments are data, not code: {results:?}"
    );
    assert!(!std::path::Path::new("/tmp/pwned-agent-skill").exists());
}

#[test]
fn skills_import_writes_an_org_skill_that_check_accepts() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = make_skill(work.path());
    let out_file = work.path().join("greeter.org");
    let (code, out) = cli(
        home.path(),
        work.path(),
        &[
            "skills",
            "import",
            dir.to_str().unwrap(),
            "-o",
            out_file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    let org = std::fs::read_to_string(&out_file).unwrap();
    assert!(
        org.contains("#+SKILL: greeter\n#+DESCRIPTION: Greets people politely by name.\n"),
        "{org}"
    );
    assert!(org.contains("* greeter_greet :tool:"), "{org}");
    assert!(
        org.contains(",* Use `scripts/greet.sh NAME`"),
        "Org escapes keep the body text: {org}"
    );
    assert!(
        org.contains("scripts/helper.js (only sh, bash and python scripts can be tools)"),
        "{org}"
    );
    let (code, out) = cli(
        home.path(),
        work.path(),
        &["skills", "check", out_file.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checked 1 file: 0 errors"), "{out}");
    // The folder itself checks the same way.
    let (code, out) = cli(
        home.path(),
        work.path(),
        &["skills", "check", dir.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
}
