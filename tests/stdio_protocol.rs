//! The daemon over real stdio: both framings, malformed input, and that it
//! keeps serving after every kind of bad message.

mod harness;

use harness::{Client, Framing};
use serde_json::json;

async fn check_errors_and_recovery(framing: Framing) {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(framing, home.path(), &[]);

    // Unknown method.
    let r = c.request("no/such/method", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");

    // Wrong params: session/new without cwd, then a relative cwd.
    let r = c.request("session/new", json!({ "mcpServers": [] })).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = c
        .request(
            "session/new",
            json!({ "cwd": "relative/dir", "mcpServers": [] }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("absolute"),
        "{r}"
    );

    // Not JSON at all.
    match framing {
        Framing::Ndjson => c.send_raw(b"this is not json\n").await,
        Framing::ContentLength => c.send_raw(b"Content-Length: 8\r\n\r\nnot json").await,
    }
    let r = c.read().await.unwrap();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32700), json!(null)),
        "{r}"
    );

    // Valid JSON, invalid request (no jsonrpc member).
    c.send(&json!({ "id": 99, "method": "initialize" })).await;
    let r = c.read().await.unwrap();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32600), json!(99)),
        "{r}"
    );

    // A batch.
    c.send(&json!([{ "jsonrpc": "2.0", "id": 1, "method": "initialize" }]))
        .await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], -32600);

    // Still serving: a proper initialize works, null params are accepted by
    // jsonrpc.el-style clients, and the reply is in the client's framing.
    let r = c.initialize(json!({ "flightPlans": true })).await;
    assert_eq!(r["result"]["protocolVersion"], 1);
    assert_eq!(r["result"]["agentInfo"]["name"], "passepartout");
    let r = c
        .request(
            "session/prompt",
            json!({ "sessionId": "nope", "prompt": [{ "type": "text", "text": "hi" }] }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown session"),
        "{r}"
    );

    // End of input is a clean shutdown.
    c.close_stdin();
    let status = tokio::time::timeout(harness::WAIT, c.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn content_length_framing_errors_and_recovery() {
    check_errors_and_recovery(Framing::ContentLength).await;
}

#[tokio::test]
async fn ndjson_framing_errors_and_recovery() {
    check_errors_and_recovery(Framing::Ndjson).await;
}

#[tokio::test]
async fn garbage_between_content_length_frames_is_skipped() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::ContentLength, home.path(), &[]);
    let good = json!({ "jsonrpc": "2.0", "id": 7, "method": "initialize", "params": { "protocolVersion": 1 } }).to_string();
    let bytes = format!(
        "Content-Length: 5\r\n\r\n{{bad}}garbage line\r\nContent-Length: {}\r\n\r\n{good}",
        good.len()
    );
    c.send_raw(bytes.as_bytes()).await;
    let first = c.read().await.unwrap();
    assert_eq!(first["error"]["code"], -32700, "{first}");
    let garbage = c.read().await.unwrap();
    assert_eq!(garbage["error"]["code"], -32700, "{garbage}");
    let reply = c.wait_response(7).await;
    assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
    // After initialize the daemon says whether shell actions can run.
    let sandbox = c
        .wait_for(|m| m["method"] == "_passepartout/sandbox/status")
        .await;
    assert!(sandbox["params"]["available"].is_boolean(), "{sandbox}");
    assert!(
        !sandbox["params"]["message"].as_str().unwrap().is_empty(),
        "{sandbox}"
    );
    assert_eq!(
        (
            reply["id"].clone(),
            reply["result"]["protocolVersion"].clone()
        ),
        (json!(7), json!(1)),
        "{reply}"
    );
}

#[tokio::test]
async fn null_params_are_accepted_where_optional() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::ContentLength, home.path(), &[]);
    // jsonrpc.el sends "params": null for nil.
    let r = c.request("initialize", json!(null)).await;
    assert_eq!(
        r["error"]["code"], -32602,
        "initialize needs a protocol version: {r}"
    );
    let r = c
        .request("initialize", json!({ "protocolVersion": 1, "_meta": null }))
        .await;
    assert_eq!(r["result"]["protocolVersion"], 1, "{r}");
}
