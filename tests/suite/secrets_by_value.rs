//! Secrets by value, not by shape (issue 38): each case the issue found
//! unredacted, through the real binary with a scripted model and a person
//! who approves every call, checked in the request bodies the model
//! received, in what the client was told and in the audit log. Redaction
//! changes only what is shown: the files stay as they were.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::Client;
use passepartout::gates::known_values::base64;
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

const PROVIDER_KEY: &str = "pp-provider-key-Wn52Tr81Kd07Gh";
const REMOTE_PASSWORD: &str = "Hq7v2Lx9WpRt4s";
const GITLAB_TOKEN: &str = "glpat-xY3kP9mQ2vL7nR4wZ8tB";
const GITHUB_TOKEN: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";
const REGISTRY_PASSWORD: &str = "Dk8Registry-Pw55";
const DB_PASSWORD: &str = "Pg5Secret-Value9";
const NPM_TOKEN: &str = "npm_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5";
/// The body of a private key, as the lines of its PEM block.
const KEY_LINES: [&str; 3] = [
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
];

fn home(fake: &FakeProvider) -> tempfile::TempDir {
    let home = harness::home_with_config(&format!(
        "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\napi_key = \"{PROVIDER_KEY}\"\n",
        fake.openai_url()
    ));
    // The person's npm token, kept in their home.
    std::fs::write(
        home.path().join(".npmrc"),
        format!("//registry.npmjs.org/:_authToken={NPM_TOKEN}\n"),
    )
    .expect("write .npmrc");
    home
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .expect("git runs")
        .success();
    assert!(ok, "git {args:?}");
}

/// A project holding each of the issue's secrets where it found them.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::write(p.join("README.md"), "# app\n").expect("write");
    git(p, &["init", "-q"]);
    git(
        p,
        &[
            "remote",
            "add",
            "origin",
            &format!("https://deploy:{REMOTE_PASSWORD}@git.example.com/team/app.git"),
        ],
    );
    git(
        p,
        &[
            "remote",
            "add",
            "gitlab",
            &format!("https://oauth2:{GITLAB_TOKEN}@gitlab.com/team/app.git"),
        ],
    );
    git(
        p,
        &[
            "remote",
            "add",
            "github",
            &format!("https://{GITHUB_TOKEN}@github.com/team/app.git"),
        ],
    );
    std::fs::create_dir_all(p.join(".docker")).expect("mkdir");
    let auth = base64(format!("deploy:{REGISTRY_PASSWORD}").as_bytes());
    std::fs::write(
        p.join(".docker/config.json"),
        json!({"auths": {"registry.example.com": {"auth": format!("{auth}=")}}}).to_string(),
    )
    .expect("write");
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        KEY_LINES.join("\n")
    );
    std::fs::write(
        p.join("my-project-4f2a91c3.json"),
        serde_json::to_string_pretty(&json!({
            "type": "service_account",
            "project_id": "my-project",
            "private_key": pem,
            "client_email": "deployer@my-project.iam.gserviceaccount.com",
        }))
        .expect("json"),
    )
    .expect("write");
    std::fs::write(
        p.join("docker-compose.yml"),
        format!(
            "services:\n  app:\n    image: example/app:1.4\n    environment:\n      - DATABASE_URL=postgres://app:{DB_PASSWORD}@db/app\n      - NODE_ENV=production\n"
        ),
    )
    .expect("write");
    // What the person's hook wrote: keys base64-encoded into a project file.
    std::fs::write(
        p.join("build-stamp.txt"),
        format!(
            "{}\n{}\n",
            base64(format!("provider={PROVIDER_KEY}").as_bytes()),
            base64(format!("npm={NPM_TOKEN}").as_bytes())
        ),
    )
    .expect("write");
    dir
}

/// The last tool result in request `n`.
fn tool_result(fake: &FakeProvider, n: usize) -> String {
    fake.tool_results(n)
        .pop()
        .unwrap_or_else(|| panic!("no tool message in request {n}"))
}

#[tokio::test]
async fn the_persons_secrets_reach_neither_the_model_nor_the_client_nor_the_audit_log() {
    let strings = |v: &[&str]| {
        v.iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
    };
    let auth = format!(
        "{}=",
        base64(format!("deploy:{REGISTRY_PASSWORD}").as_bytes())
    );
    let cases: Vec<(&str, Vec<String>, Vec<String>)> = vec![
        (
            "git remote -v",
            strings(&[REMOTE_PASSWORD, GITLAB_TOKEN, GITHUB_TOKEN]),
            strings(&[
                "https://deploy:[redacted: password in the remote URL from .git/config]@git.example.com/team/app.git",
                "https://oauth2:[redacted: password in the remote URL from .git/config]@gitlab.com",
            ]),
        ),
        (
            "cat .docker/config.json",
            vec![auth.clone()],
            strings(&["[redacted: value of auth from .docker/config.json]"]),
        ),
        (
            "cat my-project-4f2a91c3.json",
            strings(&KEY_LINES),
            strings(&[
                "[redacted: private key]",
                "deployer@my-project.iam.gserviceaccount.com",
            ]),
        ),
        (
            "cat docker-compose.yml",
            strings(&[DB_PASSWORD]),
            strings(&[
                "DATABASE_URL=[redacted: value of DATABASE_URL from docker-compose.yml]",
                "NODE_ENV=production",
            ]),
        ),
        (
            "cat build-stamp.txt",
            strings(&[PROVIDER_KEY, NPM_TOKEN]),
            strings(&[
                "[redacted: configured API key, base64-encoded]",
                "[redacted: value of //registry.npmjs.org/:_authToken from ~/.npmrc, base64-encoded]",
            ]),
        ),
    ];
    let mut script = Vec::new();
    for (i, (cmd, _, _)) in cases.iter().enumerate() {
        script.push(fake::shell_call(&format!("s{i}"), cmd));
        script.push(fake::openai_text("ok"));
    }
    let fake = FakeProvider::start(script).await;
    let home = home(&fake);
    let project = project();
    let before: Vec<(String, Vec<u8>)> = [
        "docker-compose.yml",
        ".docker/config.json",
        "build-stamp.txt",
        ".git/config",
    ]
    .iter()
    .map(|f| {
        (
            f.to_string(),
            std::fs::read(project.path().join(f)).expect("read"),
        )
    })
    .collect();
    let (mut c, sid) = Client::with_session(home.path(), &[], json!({}), project.path()).await;
    let mut wrong = Vec::new();
    let mut told_client: Vec<Value> = Vec::new();
    for (i, (cmd, secrets, shown)) in cases.iter().enumerate() {
        let (m, notes) = c.prompt_allowing(&sid, "go").await;
        assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
        told_client.extend(notes);
        let raw = harness::raw_output(project.path(), cmd);
        let encoded = *cmd == "cat build-stamp.txt";
        for secret in secrets.iter() {
            assert!(
                encoded || raw.contains(secret.as_str()),
                "`{cmd}` prints {secret}: {raw}"
            );
        }
        let result = tool_result(&fake, 2 * i + 1);
        for secret in secrets.iter() {
            if result.contains(secret.as_str()) {
                wrong.push(format!("`{cmd}`: the model reads {secret}: {result}"));
            }
        }
        for line in raw.lines().filter(|l| l.trim().len() >= 16) {
            let secret_line = encoded || secrets.iter().any(|s| line.contains(s.as_str()));
            if secret_line && result.contains(line) {
                wrong.push(format!("`{cmd}`: the model reads `{line}`"));
            }
        }
        for expected in shown.iter() {
            if !result.contains(expected) {
                wrong.push(format!("`{cmd}`: no `{expected}` in {result}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    let all_secrets: Vec<String> = cases
        .iter()
        .flat_map(|(_, s, _)| s.iter().cloned())
        .chain([REGISTRY_PASSWORD.to_string()])
        .collect();
    for (i, req) in fake.requests().iter().enumerate() {
        let body = req.body.to_string();
        for secret in &all_secrets {
            assert!(
                !body.contains(secret.as_str()),
                "request {i} carries {secret}"
            );
        }
    }
    let client = serde_json::to_string(&told_client).expect("json");
    for secret in &all_secrets {
        assert!(
            !client.contains(secret.as_str()),
            "the client was told {secret}"
        );
    }
    drop(c);
    let audit = std::fs::read_to_string(home.path().join("state/passepartout/audit.jsonl"))
        .expect("the audit log");
    assert!(audit.contains("executed"), "{audit}");
    for secret in &all_secrets {
        assert!(
            !audit.contains(secret.as_str()),
            "the audit log holds {secret}"
        );
    }
    // Only what was shown changed: the files are as they were.
    for (file, bytes) in before {
        assert_eq!(
            std::fs::read(project.path().join(&file)).expect("read"),
            bytes,
            "{file} changed"
        );
    }
}

/// Every file under `dir` whose name ends with `suffix`, read.
fn files_ending(dir: &Path, suffix: &str) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push((path, text));
            }
        }
    }
    out
}

/// A flight plan shows the person's secret values redacted, wherever the
/// plan is read (its Org file, `plans show`, the terminal), while approving
/// it applies exactly what was proposed, values included.
#[tokio::test]
async fn a_flight_plan_hides_the_persons_values_and_approving_it_keeps_them() {
    assert!(harness::bwrap_available(), "this test needs bubblewrap");
    let home = tempfile::tempdir().expect("home");
    let project = tempfile::tempdir().expect("project");
    let p = project.path();
    std::fs::write(p.join(".env"), format!("DB_PASSWORD={DB_PASSWORD}\n")).expect("write");
    std::fs::write(p.join("app.py"), "print('app')\n").expect("write");
    std::fs::write(p.join(".gitignore"), ".venv/\n").expect("write");
    std::fs::create_dir_all(p.join(".venv/bin")).expect("mkdir");
    std::fs::write(p.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").expect("write");
    std::fs::write(p.join(".venv/bin/activate"), "# activate\n").expect("write");
    git(p, &["init", "-q"]);
    git(p, &["add", "-A"]);
    git(
        p,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-qm",
            "init",
        ],
    );
    let command = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(harness::BIN);
        cmd.args(args)
            .current_dir(p)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_DATA_HOME", home.path().join("data"))
            .stdin(std::process::Stdio::null());
        cmd
    };
    // The person gave the model the value; the model writes it into the
    // virtual environment's activation script, which is asked.
    let script = format!("sed -i '$a psql --password {DB_PASSWORD}' .venv/bin/activate");
    let fake = FakeProvider::start(vec![
        fake::shell_call("call_1", &script),
        fake::openai_text("done"),
    ])
    .await;
    let url = fake.openai_url();
    let out = command(&["run", "--provider-url", &url, "go"])
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    // (The tool call's own line shows the command the model wrote; what
    // the terminal says of the plan hides the value.)
    let waiting = stderr
        .find("passepartout: waiting for a person")
        .map(|at| &stderr[at..])
        .expect(&stderr);
    assert!(
        !waiting.contains(DB_PASSWORD),
        "the plan's text showed it: {stderr}"
    );
    let activate = || std::fs::read_to_string(p.join(".venv/bin/activate")).unwrap_or_default();
    assert_eq!(activate(), "# activate\n", "applied while asked: {stderr}");

    let plans = files_ending(&home.path().join("state"), ".org");
    assert_eq!(plans.len(), 1, "{plans:?}");
    let (path, org) = &plans[0];
    assert!(!org.contains(DB_PASSWORD), "{}: {org}", path.display());
    assert!(
        org.contains("[redacted: value of DB_PASSWORD from .env]"),
        "{org}"
    );
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .expect("id");
    let shown = command(&["plans", "show", &id])
        .output()
        .await
        .expect("show");
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains(&id), "{shown}");
    assert!(!shown.contains(DB_PASSWORD), "{shown}");

    // The record keeps the value: approving applies what was proposed.
    let approved = command(&["plans", "approve", &id])
        .output()
        .await
        .expect("approve");
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    let fake = FakeProvider::start(vec![fake::openai_text("noted")]).await;
    let url = fake.openai_url();
    let out = command(&["run", "--provider-url", &url, "--continue", "go"])
        .output()
        .await
        .expect("continue");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        activate(),
        format!("# activate\npsql --password {DB_PASSWORD}\n"),
        "{stderr}\n{:?}",
        files_ending(&home.path().join("state"), ".org")
    );
}

/// A value the model writes into its own call (here one of the person's,
/// as if the person had pasted it into the prompt) is hidden from what the
/// client is shown of the call — its title, its arguments, the round's
/// plan — and from the journal's copy of those updates, while the command
/// runs with the value itself. The model's own history keeps its words.
#[tokio::test]
async fn a_value_the_model_writes_is_hidden_from_the_calls_the_client_is_shown() {
    let command = format!("printf '%s' '{DB_PASSWORD}' > db.txt");
    let args = json!({ "command": command }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[
            ("w1", "shell", &args),
            ("w2", "shell", r#"{"command": "echo written"}"#),
        ]),
        fake::openai_text("done"),
    ])
    .await;
    let home = home(&fake);
    let project = project();
    let (mut c, sid) = Client::with_session(home.path(), &[], json!({}), project.path()).await;
    let (m, asked) = c.prompt_allowing(&sid, "store the password").await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
    let mut notes: Vec<Value> = std::mem::take(&mut c.backlog);
    notes.extend(asked);
    drop(c);

    // The command ran with the value itself.
    assert_eq!(
        std::fs::read_to_string(project.path().join("db.txt")).expect("written"),
        DB_PASSWORD
    );
    let label = "[redacted: password in DATABASE_URL from docker-compose.yml]";
    let update = |n: &Value| n["params"]["update"].clone();
    let call = notes
        .iter()
        .map(update)
        .find(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == "w1")
        .unwrap_or_else(|| panic!("the client is told of the call: {notes:?}"));
    let title = call["title"].as_str().expect("a title");
    assert!(title.contains(label), "{title}");
    assert!(
        call["rawInput"]["command"]
            .as_str()
            .is_some_and(|c| c.contains(label)),
        "{call}"
    );
    let plan = notes
        .iter()
        .map(update)
        .find(|u| u["sessionUpdate"] == "plan")
        .expect("two calls in a round make a plan");
    assert!(plan.to_string().contains(label), "{plan}");
    let told = serde_json::to_string(&notes).expect("json");
    assert!(
        !told.contains(DB_PASSWORD),
        "the client was told the value: {told}"
    );

    let journal = std::fs::read_to_string(
        home.path()
            .join(format!("state/passepartout/sessions/{sid}.jsonl")),
    )
    .expect("the journal");
    let (updates, history): (Vec<&str>, Vec<&str>) = journal
        .lines()
        .filter(|l| l.contains(r#""kind":"update""#) || l.contains(r#""kind":"message""#))
        .partition(|l| l.contains(r#""kind":"update""#));
    assert!(updates.iter().any(|l| l.contains(label)), "{journal}");
    assert!(
        updates.iter().all(|l| !l.contains(DB_PASSWORD)),
        "the journal's updates hold the value: {journal}"
    );
    // Resuming the conversation needs the call as the model made it.
    assert!(history.iter().any(|l| l.contains(DB_PASSWORD)), "{journal}");
}
