//! Network grants are scoped (issue 17): a tool granted network reaches
//! the outside world, but not private ranges, the link-local metadata
//! address, or the host's own addresses, unless the person's
//! `network_reach` names them.
//!
//! The "outside world" and the "LAN" are a network namespace the test
//! makes (root, as on CI): a veth pair whose far end holds a private
//! address (10.1.x.7) and a public-looking one (TEST-NET 203.0.113.7 or
//! 198.51.100.7), each with a listener that answers with a banner. The
//! near end's addresses (x.x.x.1) are the host's own. Each test uses its
//! own subnets, so they run in parallel. When the namespace cannot be
//! made, the test fails and says why: it never passes without looking.

use crate::harness;
use crate::support;

use std::path::Path;
use std::process::{Child, Command};

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

/// A network namespace with a veth pair and a listener, removed on drop.
struct Lan {
    name: String,
    near: String,
    listener: Child,
    port: u16,
}

impl Drop for Lan {
    fn drop(&mut self) {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.near])
            .status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run `ip` to make the test's network (needs iproute2): {e}")
    });
    assert!(
        out.status.success(),
        "cannot make the test's network (needs root, as on CI): ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Make the namespace: far end `private.7` and `public.7`, near end (the
/// host's own addresses) `private.1` and `public.1`; a listener on port
/// `port` of every far address, answering `banner-<address>`.
fn lan(tag: &str, private: &str, public: &str, port: u16) -> Lan {
    let name = format!("pp-{tag}-{}", std::process::id());
    let near = format!("pp{tag}{}", std::process::id() % 100_000);
    let far = format!("{near}f");
    ip(&["netns", "add", &name]);
    let listener_script = format!(
        "import socket, threading\n\
         def serve(addr):\n\
         \x20   s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         \x20   s.bind((addr, {port})); s.listen(8)\n\
         \x20   while True:\n\
         \x20       c, _ = s.accept(); c.sendall(('banner-' + addr + '\\n').encode()); c.close()\n\
         for a in ['{private}.7', '{public}.7']:\n\
         \x20   threading.Thread(target=serve, args=(a,), daemon=True).start()\n\
         threading.Event().wait()\n"
    );
    let mut lan = Lan {
        name: name.clone(),
        near: near.clone(),
        // Replaced below, once the addresses exist.
        listener: Command::new("true").spawn().expect("true"),
        port,
    };
    ip(&["link", "add", &near, "type", "veth", "peer", "name", &far]);
    ip(&["link", "set", &far, "netns", &name]);
    ip(&["addr", "add", &format!("{private}.1/24"), "dev", &near]);
    ip(&["addr", "add", &format!("{public}.1/24"), "dev", &near]);
    ip(&["link", "set", &near, "up"]);
    ip(&[
        "-n",
        &name,
        "addr",
        "add",
        &format!("{private}.7/24"),
        "dev",
        &far,
    ]);
    ip(&[
        "-n",
        &name,
        "addr",
        "add",
        &format!("{public}.7/24"),
        "dev",
        &far,
    ]);
    ip(&["-n", &name, "link", "set", &far, "up"]);
    ip(&["-n", &name, "link", "set", "lo", "up"]);
    let _ = lan.listener.wait();
    lan.listener = Command::new("ip")
        .args(["netns", "exec", &name, "python3", "-c", &listener_script])
        .spawn()
        .expect("the listener in the test's network");
    // The host reaches both far addresses (so a block in the sandbox is
    // the sandbox's doing): wait until the listeners answer.
    for addr in [format!("{private}.7"), format!("{public}.7")] {
        let target: std::net::SocketAddr = format!("{addr}:{port}").parse().unwrap();
        let deadline = std::time::Instant::now() + harness::WAIT;
        while std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_millis(200))
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the test's listener on {target} never answered from the host"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    lan
}

/// The script a granted tool runs: one line per target, `reached X:
/// <banner>` or `blocked X: <why>`.
fn probe_script(targets: &[String]) -> String {
    let mut s = String::new();
    for t in targets {
        let (host, port) = t.rsplit_once(':').unwrap();
        s.push_str(&format!(
            "if out=$(timeout 4 bash -c 'exec 3<>/dev/tcp/{host}/{port} && head -n1 <&3' 2>&1); \
             then echo \"reached {t}: $out\"; else echo \"blocked {t}: $out\"; fi\n"
        ));
    }
    s
}

/// A daemon with `extra` config, a `deps` tool granted network that runs
/// `probe.sh`, and one turn in which the model writes the script and calls
/// the tool (approved). Returns the tool's output.
async fn run_granted(project: &Path, extra: &str, script: &str) -> String {
    let home = harness::home_with_config(&format!("shell_timeout_secs = 30\n{extra}"));
    let skills = home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("deps.org"),
        "#+SKILL: deps\n\
         * deps :tool:\n\
         :PROPERTIES:\n\
         :APPROVAL: ask\n\
         :NETWORK: yes\n\
         :END:\n\
         Fetch the project's dependencies.\n\
         #+begin_src bash\n\
         bash probe.sh\n\
         #+end_src\n",
    )
    .unwrap();
    let replies: Vec<Reply> = vec![
        fake::write_call("c1", "probe.sh", script),
        fake::openai_tool_calls(&[("c2", "deps", "{}")]),
        fake::openai_text("done"),
    ];
    let fake = FakeProvider::start(replies).await;
    let url = fake.openai_url();
    let (mut client, session) =
        Client::with_session(home.path(), &["--provider-url", &url], json!({}), project).await;
    let (msg, _) = client
        .prompt_answering(&session, "go", |_| "allow_once".into())
        .await;
    assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
    let results = fake.last_tool_results();
    results
        .get(1)
        .cloned()
        .unwrap_or_else(|| panic!("{results:?}"))
}

fn assert_reached(out: &str, target: &str, banner: &str) {
    assert!(
        out.contains(&format!("reached {target}: banner-{banner}")),
        "{target} should be reached: {out}"
    );
}

/// Blocked by a route: refused at once with "No route to host", not a
/// timeout (a timeout would only say nothing answered).
fn assert_unroutable(out: &str, target: &str) {
    let line = out
        .lines()
        .find(|l| l.contains(&format!(" {target}: ")))
        .unwrap_or_else(|| panic!("no line for {target}: {out}"));
    assert!(
        line.starts_with("blocked") && line.contains("No route to host"),
        "{target} should have no route: {out}"
    );
}

/// Without a reach setting: the outside address is reached; the private
/// one, the host's own addresses (private and public) and the metadata
/// service are not.
#[tokio::test]
async fn granted_network_reaches_out_but_not_private_ranges_or_the_host() {
    if !harness::bwrap_available() {
        return;
    }
    let lan = lan("a", "10.1.2", "203.0.113", 8731);
    let port = lan.port;
    let host_listener = std::net::TcpListener::bind(("203.0.113.1", 0)).unwrap();
    let host_port = host_listener.local_addr().unwrap().port();
    let targets = [
        format!("203.0.113.7:{port}"),
        format!("10.1.2.7:{port}"),
        format!("203.0.113.1:{host_port}"),
        format!("10.1.2.1:{host_port}"),
        "169.254.169.254:80".to_string(),
    ];
    let project = tempfile::tempdir().unwrap();
    let out = run_granted(project.path(), "", &probe_script(&targets)).await;
    assert_reached(&out, &targets[0], "203.0.113.7");
    for t in &targets[1..] {
        assert_unroutable(&out, t);
    }
    host_listener.set_nonblocking(true).unwrap();
    assert_eq!(
        host_listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the service on the host's own address was reached"
    );
    drop(lan);
}

/// `network_reach` naming a range lifts that range only: the private
/// address in it is reached, other private ranges and the host's own
/// addresses stay blocked.
#[tokio::test]
async fn a_reach_setting_lifts_only_the_range_it_names() {
    if !harness::bwrap_available() {
        return;
    }
    let lan = lan("b", "10.1.3", "198.51.100", 8732);
    let port = lan.port;
    let targets = [
        format!("10.1.3.7:{port}"),
        format!("198.51.100.7:{port}"),
        format!("198.51.100.1:{port}"),
        format!("10.1.4.9:{port}"),
        format!("192.168.77.1:{port}"),
    ];
    let project = tempfile::tempdir().unwrap();
    let out = run_granted(
        project.path(),
        "network_reach = [\"10.1.3.0/24\"]\n",
        &probe_script(&targets),
    )
    .await;
    assert_reached(&out, &targets[0], "10.1.3.7");
    assert_reached(&out, &targets[1], "198.51.100.7");
    for t in &targets[2..] {
        assert_unroutable(&out, t);
    }
    drop(lan);
}
