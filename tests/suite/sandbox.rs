//! The sandbox against the real bubblewrap: isolation, limits, argv
//! discipline, and failing closed.
//!
//! Tests that need bwrap print why and check the fail-closed path instead
//! when it cannot run here. Tests run one at a time (`SERIAL`) so the timing
//! checks see no other sandboxed run beside theirs; the memory measurement
//! runs in a process of its own (`harness::run_alone`), away from the other
//! tests of the one test binary.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use passepartout::action::{Action, Approval, Effect};
use passepartout::actuators::shell::{SandboxMode, ShellActuator, UNSANDBOXED_WARNING};
use passepartout::actuators::{ActContext, ActError, ActOutput, Actuator};
use passepartout::sandbox::bwrap::{bwrap_args, SandboxSpec, SystemLayout};
use passepartout::sandbox::enforce::LimitHit;
use passepartout::sandbox::probe::{self, probe_with, SandboxStatus, INSTALL_FIX};
use passepartout::sandbox::runner::{self, RunLimits};
use tokio_util::sync::CancellationToken;

use crate::harness;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn run_action(script: &str) -> Action {
    Action {
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
        approval: Approval::Ask,
        timeout_secs: None,
    }
}

fn with_effect(mut action: Action, edit: impl FnOnce(&mut Effect)) -> Action {
    edit(&mut action.effect);
    action
}

fn set_env(action: Action, pairs: &[(&str, String)]) -> Action {
    with_effect(action, |e| {
        if let Effect::Run { env, .. } = e {
            env.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())));
        }
    })
}

fn ctx(cwd: &Path) -> ActContext {
    ActContext {
        session_id: "test".into(),
        cwd: cwd.to_path_buf(),
        cancel: CancellationToken::new(),
        say: None,
        approved_by: None,
        read_only: false,
        limits: Default::default(),
        progress: None,
    }
}

/// The sandboxed actuator, or `None` (after checking that it fails closed)
/// when bwrap cannot run here.
async fn sandboxed() -> Option<ShellActuator> {
    let actuator = ShellActuator::new(SandboxMode::Bwrap, RunLimits::default());
    match actuator.sandbox_status().clone() {
        SandboxStatus::Available { .. } => Some(actuator),
        SandboxStatus::Unavailable { reason, .. } => {
            assert!(
                !crate::harness::under_ci(),
                "bubblewrap cannot run here ({reason}), and under CI a sandbox test may not skip"
            );
            eprintln!(
                "bubblewrap cannot run here, checking the fail-closed path instead: {reason}"
            );
            let dir = tempfile::tempdir().unwrap();
            let result = actuator
                .execute(&run_action("touch ran"), &ctx(dir.path()))
                .await;
            match result {
                Err(ActError::Unavailable(msg)) => assert!(msg.contains(&reason), "{msg}"),
                other => panic!("expected a fail-closed error, got {other:?}"),
            }
            assert!(!dir.path().join("ran").exists());
            None
        }
    }
}

fn bwrap_path() -> Option<PathBuf> {
    match probe::probe() {
        SandboxStatus::Available { bwrap, .. } => Some(bwrap),
        SandboxStatus::Unavailable { reason, .. } => {
            assert!(
                !crate::harness::under_ci(),
                "bubblewrap cannot run here ({reason}), and under CI a sandbox test may not skip"
            );
            None
        }
    }
}

/// A marker no other process on this machine has in its command line.
fn unique_sleep_arg() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("1000.{:09}", nanos ^ std::process::id())
}

/// Pids of live processes whose argv is exactly `sleep ARG`.
fn sleepers(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let want = format!("sleep\0{arg}\0");
        if cmdline == want.as_bytes() && is_alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Whether a pid names a running (not zombie) process.
fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(3);
    while !check() {
        assert!(Instant::now() < until, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn vm_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn no_network_inside_by_default() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();

    let connect = set_env(
        run_action("echo hi > /dev/tcp/127.0.0.1/$PORT"),
        &[("PORT", port)],
    );
    let out = shell.execute(&connect, &ctx(dir.path())).await.unwrap();
    // 127.0.0.1 inside is the sandbox's own loopback: nobody listens there.
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.starts_with("exit code: 1\n"), "{}", out.text);
    assert!(out.text.contains("Connection refused"), "{}", out.text);
    listener.set_nonblocking(true).unwrap();
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the host listener was reached from inside"
    );

    // Anything beyond loopback has no route at all.
    let out = shell
        .execute(
            &run_action("echo hi > /dev/tcp/192.0.2.1/80"),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.contains("Network is unreachable"), "{}", out.text);

    let interfaces = run_action("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    let out = shell.execute(&interfaces, &ctx(dir.path())).await.unwrap();
    assert_eq!(out, ActOutput::ok("exit code: 0\nstdout:\nlo\n"));
}

/// A non-loopback address of this host (the source address of its default
/// route), when it has one.
fn host_address() -> Option<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // No packet is sent: connecting a UDP socket only picks the route.
    probe.connect("192.0.2.123:9").ok()?;
    Some(probe.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

fn granted(action: Action) -> Action {
    with_effect(action, |e| {
        if let Effect::Run { network, .. } = e {
            *network = true;
        }
    })
}

/// Issue 17, attack 7: a run granted network has an interface and a
/// resolver, but reaches neither the host's loopback (as 127.0.0.1 or
/// through slirp's alias for it, 10.0.2.2) nor a listener on the host's
/// own non-loopback address (refused by the network scope's routes). That
/// the world outside is reached is `network_scope.rs`'s test, which builds
/// a stand-in for it.
#[tokio::test]
async fn network_when_granted_reaches_neither_host_loopback_nor_the_hosts_addresses() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    if !passepartout::sandbox::network::available() {
        eprintln!("slirp4netns is not installed; checking the fail-closed path instead");
        let dir = tempfile::tempdir().unwrap();
        let err = shell
            .execute(&granted(run_action("true")), &ctx(dir.path()))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("apt-get install slirp4netns"),
            "{err}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let loopback = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = loopback.local_addr().unwrap().port().to_string();
    let connect = |host: &str| {
        granted(set_env(
            run_action("echo secret-please > /dev/tcp/$HOST/$PORT && echo reached"),
            &[("HOST", host.to_string()), ("PORT", port.clone())],
        ))
    };
    let out = shell
        .execute(&connect("127.0.0.1"), &ctx(dir.path()))
        .await
        .unwrap();
    assert!(out.text.contains("Connection refused"), "{}", out.text);
    let out = shell
        .execute(&connect("10.0.2.2"), &ctx(dir.path()))
        .await
        .unwrap();
    assert!(out.is_error, "{}", out.text);
    assert!(!out.text.contains("reached"), "{}", out.text);
    loopback.set_nonblocking(true).unwrap();
    assert_eq!(
        loopback.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the host's loopback was reached from inside"
    );

    // The sandbox has an interface besides its own loopback, and a
    // resolver it can reach.
    let out = shell
        .execute(
            &granted(run_action(
                "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort; cat /etc/resolv.conf",
            )),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        ActOutput::ok("exit code: 0\nstdout:\nlo\ntap0\nnameserver 10.0.2.3\n")
    );

    let Some(host) = host_address() else {
        eprintln!("no non-loopback address here: the outbound half is not checked");
        return;
    };
    let own = TcpListener::bind((host, 0)).unwrap();
    let port = own.local_addr().unwrap().port().to_string();
    let out = shell
        .execute(
            &granted(set_env(
                run_action("echo hello-from-inside > /dev/tcp/$HOST/$PORT && echo reached"),
                &[("HOST", host.to_string()), ("PORT", port)],
            )),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.contains("No route to host"), "{}", out.text);
    own.set_nonblocking(true).unwrap();
    assert_eq!(
        own.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the host's own address was reached from inside"
    );
}

/// The sandbox's `/etc/passwd` and `/etc/group` name root and the user it
/// runs as, not the host's accounts.
#[tokio::test]
async fn passwd_and_group_are_synthetic() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = shell
        .execute(
            &run_action("cut -d: -f1,3 /etc/passwd; cut -d: -f1,3 /etc/group; id -un"),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let me = if uid == 0 {
        "root".to_string()
    } else {
        out.text.lines().last().unwrap().to_string()
    };
    let mut want = String::from("exit code: 0\nstdout:\nroot:0\n");
    if uid != 0 {
        want.push_str(&format!("{me}:{uid}\n"));
    }
    want.push_str("root:0\n");
    if gid != 0 {
        let group = out.text.lines().nth(if uid == 0 { 3 } else { 4 }).unwrap();
        want.push_str(&format!("{group}\n"));
    }
    want.push_str(&format!("{me}\n"));
    assert_eq!(out, ActOutput::ok(want));
    let host_accounts = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .count();
    assert!(
        host_accounts > 2,
        "this host has only {host_accounts} accounts: nothing shown"
    );
}

#[tokio::test]
async fn writes_only_in_cwd_and_a_private_tmp() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let cwd = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let name = format!("passepartout-sandbox-test-{}", std::process::id());
    let tmp_marker = PathBuf::from("/tmp").join(&name);

    let script = r#"
        touch /etc/"$NAME" 2>/dev/null && echo etc-writable
        touch /usr/"$NAME" 2>/dev/null && echo usr-writable
        touch "$OUTSIDE/x" 2>/dev/null && echo outside-writable
        touch "$REAL_HOME/$NAME" 2>/dev/null && echo home-writable
        touch in-cwd && echo cwd-ok
        touch /tmp/"$NAME" && echo tmp-ok
        touch "$HOME/.dotfile" && echo "home=$HOME"
    "#;
    let action = set_env(
        run_action(script),
        &[
            ("NAME", name.clone()),
            ("OUTSIDE", outside.path().display().to_string()),
            ("REAL_HOME", real_home.clone()),
        ],
    );
    let out = shell.execute(&action, &ctx(cwd.path())).await.unwrap();
    let home_file = Path::new(&real_home).join(&name);
    let leaked = home_file.exists();
    let _ = std::fs::remove_file(&home_file);
    assert_eq!(
        out,
        ActOutput::ok("exit code: 0\nstdout:\ncwd-ok\ntmp-ok\nhome=/tmp/home\n")
    );
    assert!(cwd.path().join("in-cwd").is_file());
    assert!(!outside.path().join("x").exists());
    assert!(!leaked);
    assert!(!Path::new("/etc").join(&name).exists());
    assert!(
        !tmp_marker.exists(),
        "the sandbox's /tmp leaked to the host"
    );
}

#[tokio::test]
async fn secrets_in_etc_are_absent() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    // `/etc` is built up from a list (issue 38): the shadow file and TLS
    // private keys are not in it, the synthetic passwd is.
    let dir = tempfile::tempdir().unwrap();
    let out = shell
        .execute(
            &run_action(
                "test -e /etc/shadow || echo shadow-absent; \
                 test -e /etc/ssl/private || echo keys-absent; \
                 test -s /etc/passwd && echo passwd-visible",
            ),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        ActOutput::ok("exit code: 0\nstdout:\nshadow-absent\nkeys-absent\npasswd-visible\n")
    );
}

#[tokio::test]
async fn runaway_commands_are_killed_with_their_children() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let arg = unique_sleep_arg();
    let mut action = set_env(
        run_action(r#"sleep "$T" & sleep "$T"; wait"#),
        &[("T", arg.clone())],
    );
    action.timeout_secs = Some(1);

    let started = Instant::now();
    let context = ctx(dir.path());
    let (out, seen) = tokio::join!(shell.execute(&action, &context), async {
        // Both sleepers exist while the command runs: the check below is
        // not vacuous.
        let until = Instant::now() + Duration::from_millis(1000);
        loop {
            let n = sleepers(&arg).len();
            if n == 2 || Instant::now() > until {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let out = out.unwrap();
    assert_eq!(seen, 2, "the two sleepers were never seen running");
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "timed out after 1 s: the command and every process it started were killed\n\
         (no output)\n"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    eventually("a sleeper survived the timeout", || {
        sleepers(&arg).is_empty()
    })
    .await;
}

#[tokio::test]
async fn runner_kills_the_whole_process_group() {
    // Without a pid namespace, only the process group takes children down.
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let limits = RunLimits {
        timeout: Duration::from_secs(1),
        output_cap: 1000,
    };
    let args = vec![
        "-c".to_string(),
        "sleep 1000 & echo $! > child.pid; sleep 1000; wait".to_string(),
    ];
    let outcome = runner::run(
        "bash",
        &args,
        dir.path(),
        None,
        &limits,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(outcome.timed_out);
    assert_eq!(outcome.signal, Some(9));
    assert_eq!(outcome.exit_code, None);
    let pid: u32 = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually("the background child survived", || !is_alive(pid)).await;
}

#[tokio::test]
async fn background_jobs_end_with_the_command() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let args = vec![
        "-c".to_string(),
        "sleep 1000 & echo $! > child.pid; echo started".to_string(),
    ];
    let started = Instant::now();
    let outcome = runner::run(
        "bash",
        &args,
        dir.path(),
        None,
        &RunLimits::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(!outcome.timed_out);
    assert_eq!(outcome.render(), "exit code: 0\nstdout:\nstarted\n");
    let pid: u32 = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually("the background job outlived the command", || !is_alive(pid)).await;
}

#[tokio::test]
async fn ten_megabytes_of_output_keep_memory_flat() {
    let _serial = SERIAL.lock().await;
    // The process's RSS would also count what other tests of the binary
    // allocate meanwhile: the measurement runs in a process of its own.
    if !harness::alone() {
        harness::run_alone(module_path!(), "ten_megabytes_of_output_keep_memory_flat");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let limits = RunLimits::default();
    let script = "head -c 10000000 /dev/zero | tr '\\0' a";
    // Through the real bwrap argument list when possible, else plain bash.
    let (program, args) = match bwrap_path() {
        Some(bwrap) => {
            let spec = SandboxSpec {
                cwd: dir.path().to_path_buf(),
                read_only: false,
                network: false,
                extra_ro: vec![],
                extra_rw: vec![],
                env: BTreeMap::new(),
                interpreter: "bash".into(),
                script: script.into(),
                argv: vec![],
            };
            let args = bwrap_args(&spec, &SystemLayout::probe()).unwrap();
            (bwrap.display().to_string(), args)
        }
        None => {
            eprintln!("bubblewrap cannot run here; measuring the runner with plain bash");
            (
                "bash".to_string(),
                vec!["-c".to_string(), script.to_string()],
            )
        }
    };
    let empty_env = BTreeMap::new();
    let once = || {
        runner::run(
            &program,
            &args,
            dir.path(),
            Some(&empty_env),
            &limits,
            CancellationToken::new(),
        )
    };
    // Warm up first: the runtime's and the allocator's one-time costs are
    // not what is measured.
    once().await.unwrap();
    let before = vm_rss_kb();
    let outcome = once().await.unwrap();
    let after = vm_rss_kb();

    // The output cap is enforced at the source: the command is stopped at
    // the first read past the cap, so far less than 10 MB is ever read.
    assert_eq!(outcome.stopped_by, Some(LimitHit::Output(100_000)));
    assert_eq!(outcome.stdout.len(), 100_000);
    assert!(outcome.stdout.bytes().all(|b| b == b'a'));
    assert!(outcome.stdout_truncated_bytes > 0);
    assert!(
        outcome.stdout_truncated_bytes < 2_000_000,
        "read {} bytes past the cap",
        outcome.stdout_truncated_bytes
    );
    assert_eq!(outcome.stderr_truncated_bytes, 0);
    // Keeping the output would cost 10 MB or more; allow 2 MB of noise.
    let grown = after.saturating_sub(before);
    eprintln!("VmRSS {before} KB before, {after} KB after 10 MB of output");
    assert!(grown < 2048, "RSS grew by {grown} KB ({before} -> {after})");
    let text = outcome.render();
    assert!(
        text.starts_with("stopped: the output passed the cap of 100000 bytes per stream"),
        "{text}"
    );
    assert!(
        text.contains("of output truncated (cap 100 KB) …]"),
        "{text}"
    );
}

#[tokio::test]
async fn yes_is_stopped_right_after_the_output_cap() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = shell
        .execute(&run_action("yes"), &ctx(dir.path()))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        out.text
            .starts_with("stopped: the output passed the cap of 100000 bytes per stream"),
        "{}",
        out.text
    );
    // Bounded: one cap, a read chunk and what the pipe held, not 30 s of
    // draining (the old behaviour read gigabytes until the timeout).
    let cut = out
        .text
        .lines()
        .find_map(|l| l.strip_prefix("[… "))
        .unwrap_or_default()
        .to_string();
    assert!(
        cut.ends_with("of output truncated (cap 100 KB) …]"),
        "{cut}"
    );
    assert!(!cut.contains("MB") && !cut.contains("GB"), "{cut}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[tokio::test]
async fn a_memory_hog_is_stopped_at_the_memory_limit() {
    use passepartout::sandbox::limits::ResourceLimits;
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let shell = shell.with_resources(ResourceLimits {
        memory: Some(256 * 1024 * 1024),
        ..ResourceLimits::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // The issue's 2.5 GB awk: one string doubled until it is gigabytes.
    let out = shell
        .execute(
            &run_action("awk 'BEGIN { s = \"x\"; while (1) s = s s }'"),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    // A memory cgroup of the run's own where the host lets the daemon make
    // one (the whole command), else RLIMIT_AS (each process).
    use passepartout::sandbox::enforce::{memory_limit, MemoryLimit};
    let expected = match memory_limit() {
        MemoryLimit::Cgroup { .. } => {
            "stopped: the command's processes together used more than 256 MiB of memory \
             (limit `memory`"
        }
        MemoryLimit::PerProcess => {
            "stopped: a process ran out of its 256 MiB of memory (limit `memory`, RLIMIT_AS)"
        }
    };
    assert!(out.text.starts_with(expected), "{}", out.text);
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// Values that would do damage if anything spliced them into shell text.
fn hostile_values() -> Vec<String> {
    [
        "; rm -rf ~",
        "$(touch pwned)",
        "`touch pwned2`",
        "'single' \"double\" \\back",
        "line one\nline two\n",
        "&& touch pwned3 || touch pwned4 | cat > pwned5",
        "-c",
        "--",
        " * ? [a] ~ ",
        "é€🦀",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect()
}

async fn check_hostile_values_arrive_verbatim(shell: &ShellActuator) {
    let dir = tempfile::tempdir().unwrap();
    let values = hostile_values();
    let script = r#"
        i=0; for a in "$@"; do printf '%s' "$a" > "arg$i.bin"; i=$((i+1)); done
        for i in 0 1 2 3 4 5 6 7 8 9; do v="V$i"; printf '%s' "${!v}" > "env$i.bin"; done
    "#;
    let env: Vec<(String, String)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("V{i}"), v.clone()))
        .collect();
    let action = with_effect(run_action(script), |e| {
        if let Effect::Run {
            argv, env: e_env, ..
        } = e
        {
            *argv = values.clone();
            e_env.extend(env.iter().cloned());
        }
    });
    let out = shell.execute(&action, &ctx(dir.path())).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    for (i, v) in values.iter().enumerate() {
        let arg = std::fs::read(dir.path().join(format!("arg{i}.bin"))).unwrap();
        let env = std::fs::read(dir.path().join(format!("env{i}.bin"))).unwrap();
        assert_eq!(arg, v.as_bytes(), "argv {i}");
        assert_eq!(env, v.as_bytes(), "env V{i}");
    }

    // The same through Python's argv and environment.
    let action = Action {
        effect: Effect::Run {
            interpreter: "python3".into(),
            script: "import json, os, sys\n\
                     print(json.dumps([sys.argv[1:], [os.environ['V%d' % i] for i in range(10)]]))"
                .into(),
            argv: values.clone(),
            env: env.iter().cloned().collect(),
            network: false,
        },
        ..run_action("")
    };
    let out = shell.execute(&action, &ctx(dir.path())).await.unwrap();
    assert!(!out.is_error, "{}", out.text);
    let json = out
        .text
        .lines()
        .find(|l| l.starts_with('['))
        .expect("python printed its argv");
    let (argv, env_seen): (Vec<String>, Vec<String>) = serde_json::from_str(json).unwrap();
    assert_eq!(argv, values);
    assert_eq!(env_seen, values);

    for name in ["pwned", "pwned2", "pwned3", "pwned4", "pwned5"] {
        assert!(!dir.path().join(name).exists(), "{name} was created");
    }
}

#[tokio::test]
async fn metacharacters_arrive_byte_for_byte_in_the_sandbox() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    check_hostile_values_arrive_verbatim(&shell).await;
}

#[tokio::test]
async fn metacharacters_arrive_byte_for_byte_unsandboxed() {
    let _serial = SERIAL.lock().await;
    let shell = ShellActuator::with_status(
        SandboxMode::Unsandboxed,
        RunLimits::default(),
        probe_with(Path::new("/nonexistent/bwrap")),
        SystemLayout::probe(),
    );
    check_hostile_values_arrive_verbatim(&shell).await;
}

#[tokio::test]
async fn exit_codes_and_stderr_come_back() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = shell
        .execute(
            &run_action("echo out; echo oops >&2; exit 3"),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        ActOutput::error("exit code: 3\nstdout:\nout\nstderr:\noops\n")
    );

    let out = shell
        .execute(&run_action("no-such-command-here"), &ctx(dir.path()))
        .await
        .unwrap();
    assert_eq!(
        out,
        ActOutput::error(
            "exit code: 127\nstderr:\nbash: line 1: no-such-command-here: command not found\n"
        )
    );
}

#[tokio::test]
async fn cancellation_kills_promptly() {
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let arg = unique_sleep_arg();
    let action = set_env(run_action(r#"sleep "$T""#), &[("T", arg.clone())]);
    let context = ctx(dir.path());
    let cancel = context.cancel.clone();
    let started = Instant::now();
    let canceller = async {
        eventually("the sleeper never started", || sleepers(&arg).len() == 1).await;
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(shell.execute(&action, &context), canceller);
    assert_eq!(result, Err(ActError::Cancelled));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    eventually("the sleeper survived cancellation", || {
        sleepers(&arg).is_empty()
    })
    .await;
}

#[tokio::test]
async fn missing_bwrap_fails_closed_with_reason_and_fix() {
    let _serial = SERIAL.lock().await;
    let status = probe_with(Path::new("/nonexistent/bwrap"));
    let SandboxStatus::Unavailable { reason, fix } = status.clone() else {
        panic!("a missing binary cannot be available: {status:?}");
    };
    assert_eq!(
        reason,
        "cannot run `/nonexistent/bwrap`: No such file or directory (os error 2)"
    );
    assert_eq!(fix, INSTALL_FIX);

    let shell = ShellActuator::with_status(
        SandboxMode::Bwrap,
        RunLimits::default(),
        status,
        SystemLayout::probe(),
    );
    let dir = tempfile::tempdir().unwrap();
    let result = shell
        .execute(&run_action("touch ran"), &ctx(dir.path()))
        .await;
    assert_eq!(
        result,
        Err(ActError::Unavailable(format!(
            "the sandbox is unavailable, so the command was not run.\nwhy: {reason}\nfix: \
             {INSTALL_FIX}; or set `sandbox = \"none\"` in config.toml to run unsandboxed at \
             your own risk"
        )))
    );
    assert!(!dir.path().join("ran").exists());
}

/// A stand-in for bwrap that reports a version and then behaves as told.
fn fake_bwrap(dir: &Path, trial: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("bwrap");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 9.9.9'; exit 0; fi\n{trial}\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn namespace_failure_in_the_trial_fails_closed_quoting_bwrap() {
    let _serial = SERIAL.lock().await;
    let bin = tempfile::tempdir().unwrap();
    let failing = fake_bwrap(
        bin.path(),
        "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1",
    );
    let status = probe_with(&failing);
    let SandboxStatus::Unavailable { reason, fix } = status.clone() else {
        panic!("a failing trial cannot be available: {status:?}");
    };
    assert_eq!(
        reason,
        "bubblewrap cannot create the namespaces it needs; bwrap said: bwrap: setting up uid \
         map: Permission denied"
    );
    // Which knob is named depends on this kernel; some fix always is.
    assert!(fix.contains("sysctl") || fix.contains("container"), "{fix}");

    let shell = ShellActuator::with_status(
        SandboxMode::Bwrap,
        RunLimits::default(),
        status,
        SystemLayout::probe(),
    );
    let dir = tempfile::tempdir().unwrap();
    let Err(ActError::Unavailable(msg)) = shell
        .execute(&run_action("touch ran"), &ctx(dir.path()))
        .await
    else {
        panic!("expected a fail-closed error");
    };
    assert!(
        msg.contains("bwrap said: bwrap: setting up uid map"),
        "{msg}"
    );
    assert!(msg.contains(&fix), "{msg}");
    assert!(!dir.path().join("ran").exists());

    let working = fake_bwrap(bin.path(), "exit 0");
    assert_eq!(
        probe_with(&working),
        SandboxStatus::Available {
            bwrap: working.clone(),
            version: "9.9.9".into()
        }
    );
}

#[tokio::test]
async fn unsandboxed_results_start_with_a_warning() {
    let _serial = SERIAL.lock().await;
    let shell = ShellActuator::with_status(
        SandboxMode::Unsandboxed,
        RunLimits::default(),
        probe_with(Path::new("/nonexistent/bwrap")),
        SystemLayout::probe(),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = shell
        .execute(&run_action("echo hi"), &ctx(dir.path()))
        .await
        .unwrap();
    assert_eq!(
        out,
        ActOutput::ok(format!(
            "{UNSANDBOXED_WARNING}\nexit code: 0\nstdout:\nhi\n"
        ))
    );
    assert_eq!(
        UNSANDBOXED_WARNING,
        "WARNING: ran WITHOUT a sandbox (sandbox = \"none\" in config)"
    );
}

#[tokio::test]
async fn other_effects_and_bad_specs_are_refused() {
    let _serial = SERIAL.lock().await;
    let shell = ShellActuator::with_status(
        SandboxMode::Bwrap,
        RunLimits::default(),
        SandboxStatus::Available {
            bwrap: "/usr/bin/bwrap".into(),
            version: "0.8.0".into(),
        },
        SystemLayout::merged_usr(),
    );
    let dir = tempfile::tempdir().unwrap();
    let read = Action {
        effect: Effect::ReadFile {
            path: "a.txt".into(),
        },
        ..run_action("")
    };
    assert_eq!(
        shell.execute(&read, &ctx(dir.path())).await,
        Err(ActError::Unsupported {
            target: "shell".into(),
            effect: "read_file".into()
        })
    );

    let bad_env = set_env(run_action("true"), &[("BASH_ENV", "./evil.sh".into())]);
    let out = shell.execute(&bad_env, &ctx(dir.path())).await.unwrap();
    assert_eq!(
        out,
        ActOutput::error(
            "refused to run: environment variable `BASH_ENV` is reserved: the sandbox sets it, \
             or it would make the interpreter run code other than the script"
        )
    );

    let zsh = with_effect(run_action("true"), |e| {
        if let Effect::Run { interpreter, .. } = e {
            *interpreter = "zsh".into();
        }
    });
    let out = shell.execute(&zsh, &ctx(dir.path())).await.unwrap();
    assert_eq!(
        out,
        ActOutput::error(
            "refused to run: interpreter `zsh` is not allowed; use one of: bash, sh, python3"
        )
    );
}

#[test]
fn probe_reports_this_machine() {
    // Not an assertion about this machine: a record of what it is.
    eprintln!("{}", probe::probe().describe());
    if let SandboxStatus::Available { version, .. } = probe::probe() {
        assert!(!version.is_empty() && !version.starts_with("bubblewrap"));
    }
}

#[test]
fn control_surface_and_tmp_size_whole_vector() {
    use passepartout::sandbox::bwrap::{bwrap_args_with, Boundary};
    use passepartout::sandbox::surface::SurfaceMounts;
    let spec = SandboxSpec {
        cwd: PathBuf::from("/home/ada/project"),
        read_only: false,
        network: false,
        extra_ro: vec![PathBuf::from("/home/ada/notes")],
        extra_rw: vec![PathBuf::from("/home/ada/memex")],
        env: BTreeMap::new(),
        interpreter: "sh".into(),
        script: "make".into(),
        argv: vec![],
    };
    let boundary = Boundary {
        surface: SurfaceMounts {
            pins: vec![PathBuf::from("/home/ada/project/.git")],
            read_only: vec![
                PathBuf::from("/home/ada/project/.passepartout"),
                PathBuf::from("/home/ada/project/.git/config"),
                PathBuf::from("/home/ada/project/.git/hooks"),
            ],
            masked: vec![],
        },
        tmp_size: Some(8 * 1024 * 1024),
        hidden: vec![],
        ..Boundary::default()
    };
    let args = bwrap_args_with(&spec, &SystemLayout::merged_usr(), &boundary).unwrap();
    let want: Vec<String> = [
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--perms",
        "0755",
        "--dir",
        "/etc",
        "--ro-bind",
        "/etc/hosts",
        "/etc/hosts",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        "8388608",
        "--tmpfs",
        "/tmp",
        "--dir",
        "/tmp/home",
        "--perms",
        "0755",
        "--dir",
        "/var",
        "--symlink",
        "/tmp",
        "/var/tmp",
        "--perms",
        "0755",
        "--dir",
        "/home",
        "--perms",
        "0755",
        "--dir",
        "/home/ada",
        "--bind",
        "/home/ada/project",
        "/home/ada/project",
        "--bind",
        "/home/ada/memex",
        "/home/ada/memex",
        "--bind",
        "/home/ada/project/.git",
        "/home/ada/project/.git",
        "--ro-bind",
        "/home/ada/project/.passepartout",
        "/home/ada/project/.passepartout",
        "--ro-bind",
        "/home/ada/project/.git/config",
        "/home/ada/project/.git/config",
        "--ro-bind",
        "/home/ada/project/.git/hooks",
        "/home/ada/project/.git/hooks",
        "--ro-bind",
        "/home/ada/notes",
        "/home/ada/notes",
        "--remount-ro",
        "/",
        "--chdir",
        "/home/ada/project",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--setenv",
        "HOME",
        "/tmp/home",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "TERM",
        "dumb",
        "--setenv",
        "PIP_RETRIES",
        "0",
        "--setenv",
        "npm_config_fetch_retries",
        "0",
        "--setenv",
        "CARGO_NET_RETRY",
        "0",
        "--",
        "sh",
        "-c",
        "make",
        "sh",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect();
    assert_eq!(args, want);
    // Without a boundary the list is the old one: no --size, no extra binds.
    let plain = bwrap_args(&spec, &SystemLayout::merged_usr()).unwrap();
    assert!(!plain.contains(&"--size".to_string()));
    assert!(!plain.iter().any(|a| a.ends_with(".git")));
}

#[tokio::test]
async fn tmp_is_bounded_and_control_paths_are_read_only_in_the_real_sandbox() {
    use passepartout::sandbox::limits::ResourceLimits;
    let _serial = SERIAL.lock().await;
    let Some(shell) = sandboxed().await else {
        return;
    };
    let shell = shell.with_resources(ResourceLimits {
        tmp_size: Some(4 * 1024 * 1024),
        ..ResourceLimits::default()
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".envrc"), "export OK=1\n").unwrap();
    let out = shell
        .execute(
            &run_action("head -c 8000000 /dev/zero > /tmp/fill; echo rc=$?"),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    // The session's /tmp lasts across its actions, so it is measured after
    // each run rather than bounded by a tmpfs: over the size, it is emptied.
    assert!(
        out.text
            .contains("over its limit of 4194304 bytes (limit `tmp_size`)"),
        "{}",
        out.text
    );
    let out = shell
        .execute(
            &run_action("echo evil >> .envrc; rm -f .envrc; mv .envrc x; echo end"),
            &ctx(dir.path()),
        )
        .await
        .unwrap();
    assert!(out.text.contains("Read-only file system"), "{}", out.text);
    assert!(out.text.contains("Device or resource busy"), "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".envrc")).unwrap(),
        "export OK=1\n"
    );
    assert!(!dir.path().join("x").exists());
}

#[tokio::test]
async fn cpu_time_is_limited_and_named() {
    use passepartout::sandbox::limits::ResourceLimits;
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let resources = ResourceLimits {
        cpu_secs: Some(1),
        ..ResourceLimits::none()
    };
    let args = vec!["-c".to_string(), "while :; do :; done".to_string()];
    let outcome = runner::run_limited(
        "bash",
        &args,
        dir.path(),
        None,
        &RunLimits {
            timeout: Duration::from_secs(20),
            output_cap: 1000,
        },
        &resources,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(!outcome.timed_out);
    assert_eq!(
        outcome.render().lines().next().unwrap(),
        "stopped: a process used its 1 s of CPU time (limit `cpu`, RLIMIT_CPU) and was killed"
    );
}

/// Issue 20: each sandbox limit is named with whether this host enforces
/// it and how, in `initialize` (`_meta.passepartout.limits`) and in
/// `passepartout providers` (text and `--json`), through the real binary.
#[tokio::test]
async fn limit_diagnostics_in_initialize_and_providers() {
    let home = harness::home_with_config("[sandbox_limits]\nprocesses = 77\nmemory = \"3G\"\n");
    let mut client = harness::Client::spawn(
        harness::Framing::Ndjson,
        home.path(),
        &["--provider-url", "http://127.0.0.1:9/v1", "--model", "m"],
    );
    let init = client.initialize(serde_json::json!({})).await;
    let limits = init["result"]["_meta"]["passepartout"]["limits"]
        .as_array()
        .unwrap_or_else(|| panic!("no limits in {init}"))
        .clone();
    let row = |name: &str| {
        limits
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {limits:?}"))
            .clone()
    };
    assert_eq!(row("processes")["value"], "77");
    assert_eq!(row("memory")["value"], "3 GiB");
    assert_eq!(row("memory")["enforced"], true);
    // What this host does for processes, said as it is.
    let processes = row("processes");
    let how = processes["how"].as_str().unwrap();
    let root = rustix::process::getuid().is_root();
    match processes["enforced"].as_bool().unwrap() {
        true => assert!(
            how.contains("pids cgroup") || how.contains("RLIMIT_NPROC"),
            "{how}"
        ),
        false => assert!(root && how.starts_with("NOT enforced"), "{how}"),
    }
    assert_eq!(
        row("network")["enforced"],
        passepartout::sandbox::network::available()
    );
    for name in [
        "file_size",
        "cpu",
        "open_files",
        "disk_write",
        "tmp_size",
        "output",
    ] {
        assert_eq!(row(name)["enforced"], true, "{name}");
    }

    let out = tokio::process::Command::new(harness::BIN)
        .args([
            "providers",
            "--provider-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env_remove("PASSEPARTOUT_CONFIG")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sandbox limits on this host:"), "{text}");
    assert!(text.contains("  + memory      3 GiB"), "{text}");
    assert!(text.contains(" processes   77 "), "{text}");
}
