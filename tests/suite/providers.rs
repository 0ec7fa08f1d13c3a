//! The streaming providers and the cascade against the fake model server:
//! real HTTP on 127.0.0.1, real SSE framing and chunk timing.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use passepartout::llm::ProviderConfigExt;
use passepartout::llm::{
    build_cascade, Cascade, CascadeError, ChatMessage, ChatRequest, EventStream, FinishReason,
    ProviderConfig, ProviderError, ProviderKind, StreamEvent, ToolCall, ToolSpec, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::fake_provider::{
    anthropic_text, anthropic_thinking_then_text, anthropic_tool_use, disconnect_after,
    openai_reasoning_then_text, openai_text, openai_tool_calls, status, FakeProvider, Reply,
    FAKE_INPUT_TOKENS, FAKE_OUTPUT_TOKENS,
};

/// Long enough never to fire in a healthy test, short enough to end a broken
/// one quickly.
const GUARD: Duration = Duration::from_secs(5);

const FAKE_USAGE: Usage = Usage {
    input_tokens: FAKE_INPUT_TOKENS,
    output_tokens: FAKE_OUTPUT_TOKENS,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
};

fn openai(name: &str, base_url: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new(name, ProviderKind::OpenAi, base_url, "fake-model");
    config.max_retries = 0;
    config.idle_timeout_secs = 5;
    config
}

fn anthropic(name: &str, base_url: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new(name, ProviderKind::Anthropic, base_url, "fake-claude");
    config.max_retries = 0;
    config.idle_timeout_secs = 5;
    config.api_key = Some("sk-ant-test".into());
    config
}

fn cascade(configs: &[ProviderConfig]) -> Cascade {
    build_cascade(configs)
        .expect("valid configs")
        .with_backoff(Duration::from_millis(5))
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::user(text)],
        tools: Vec::new(),
        max_tokens: None,
        temperature: None,
    }
}

/// Every item of the stream, errors included.
async fn drain(events: EventStream) -> Vec<Result<StreamEvent, ProviderError>> {
    tokio::time::timeout(GUARD, events.collect())
        .await
        .expect("stream ended")
}

/// Every event of a stream that must succeed.
async fn events_of(events: EventStream) -> Vec<StreamEvent> {
    drain(events)
        .await
        .into_iter()
        .map(|item| item.expect("no stream error"))
        .collect()
}

/// Streams `request` from a single provider through a one-entry cascade.
async fn stream_one(config: ProviderConfig, request: &ChatRequest) -> Vec<StreamEvent> {
    let answered = cascade(&[config])
        .stream(request, CancellationToken::new())
        .await
        .expect("provider answered");
    events_of(answered.events).await
}

fn text(words: &[&str]) -> Vec<StreamEvent> {
    words
        .iter()
        .map(|w| StreamEvent::TextDelta(w.to_string()))
        .collect()
}

fn unused_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

// ---- OpenAI-compatible -------------------------------------------------

#[tokio::test]
async fn openai_text_streams_in_order_with_usage_then_finish() {
    let fake = FakeProvider::start(vec![openai_text("Hello there, world")]).await;
    let events = stream_one(openai("fake", &fake.openai_url()), &ask("hi")).await;
    let mut expected = text(&["Hello ", "there, ", "world"]);
    expected.push(StreamEvent::Usage(FAKE_USAGE));
    expected.push(StreamEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn openai_reasoning_comes_as_reasoning_deltas() {
    let fake = FakeProvider::start(vec![openai_reasoning_then_text("Think first.", "Done")]).await;
    let events = stream_one(openai("fake", &fake.openai_url()), &ask("hi")).await;
    assert_eq!(
        events,
        vec![
            StreamEvent::ReasoningDelta("Think ".into()),
            StreamEvent::ReasoningDelta("first.".into()),
            StreamEvent::TextDelta("Do".into()),
            StreamEvent::TextDelta("ne".into()),
            StreamEvent::Usage(FAKE_USAGE),
            StreamEvent::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn openai_reasoning_field_of_ollama_is_read_too() {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let fake = FakeProvider::start(vec![Reply::OpenAi {
        chunks: vec![
            chunk(json!({"reasoning": "hmm"}), None),
            chunk(json!({"content": "ok"}), None),
            chunk(json!({}), Some("length")),
        ],
        delay_ms: 1,
        done: true,
    }])
    .await;
    let events = stream_one(openai("fake", &fake.openai_url()), &ask("hi")).await;
    assert_eq!(
        events,
        vec![
            StreamEvent::ReasoningDelta("hmm".into()),
            StreamEvent::TextDelta("ok".into()),
            StreamEvent::Finish(FinishReason::Length),
        ]
    );
}

#[tokio::test]
async fn openai_interleaved_tool_calls_are_reassembled_whole() {
    let fake = FakeProvider::start(vec![openai_tool_calls(&[
        ("call_a", "read_file", r#"{"path": "notes/todo.org"}"#),
        ("call_b", "list_dir", r#"{"dir": ".", "depth": 2}"#),
    ])])
    .await;
    let events = stream_one(openai("fake", &fake.openai_url()), &ask("hi")).await;
    assert_eq!(
        events,
        vec![
            StreamEvent::Usage(FAKE_USAGE),
            StreamEvent::ToolCall(ToolCall {
                id: "call_a".into(),
                name: "read_file".into(),
                arguments: json!({"path": "notes/todo.org"}),
            }),
            StreamEvent::ToolCall(ToolCall {
                id: "call_b".into(),
                name: "list_dir".into(),
                arguments: json!({"dir": ".", "depth": 2}),
            }),
            StreamEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn openai_request_has_the_wire_shape_and_bearer_key() {
    let fake = FakeProvider::start(vec![openai_text("ok")]).await;
    let mut config = openai("fake", &fake.openai_url());
    config.api_key = Some("sk-test-123".into());
    let request = ChatRequest {
        messages: vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user("read it"),
            ChatMessage::assistant(
                "",
                vec![ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: json!({"path": "a.org"}),
                }],
            ),
            ChatMessage::tool_result("c1", "* A heading", false),
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_tokens: Some(256),
        temperature: None,
    };
    stream_one(config, &request).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test-123"));
    assert_eq!(
        sent.body,
        json!({
            "model": "fake-model",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 256,
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\":\"a.org\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "* A heading"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }}],
        })
    );
}

#[tokio::test]
async fn openai_request_without_key_has_no_authorization_and_no_tools() {
    let fake = FakeProvider::start(vec![openai_text("ok")]).await;
    stream_one(openai("fake", &fake.openai_url()), &ask("hi")).await;
    let sent = &fake.requests()[0];
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.body.get("tools"), None);
}

#[tokio::test]
async fn openai_streamed_error_object_becomes_a_stream_error() {
    let fake = FakeProvider::start(vec![Reply::OpenAi {
        chunks: vec![
            json!({"choices": [{"index": 0, "delta": {"content": "par"}}]}),
            json!({"error": {"message": "model crashed", "type": "server_error"}}),
        ],
        delay_ms: 1,
        done: false,
    }])
    .await;
    let answered = cascade(&[openai("fake", &fake.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("first event arrived");
    let items = drain(answered.events).await;
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamEvent::TextDelta("par".into()))
    );
    match &items[1] {
        Err(ProviderError::Stream { message, .. }) => {
            assert!(message.contains("model crashed"), "{message}")
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
}

#[tokio::test]
async fn openai_data_that_is_not_json_is_quoted_in_the_error() {
    let fake = FakeProvider::start(vec![Reply::OpenAi {
        // A string chunk is sent verbatim: here, a line that is not JSON.
        chunks: vec![json!("{not a chunk")],
        delay_ms: 1,
        done: true,
    }])
    .await;
    let config = openai("fake", &fake.openai_url());
    let provider = config.build().expect("valid");
    let events = provider
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("accepted");
    let items = drain(events).await;
    assert_eq!(items.len(), 1);
    match &items[0] {
        Err(ProviderError::Stream { message, .. }) => {
            assert!(message.contains("{not a chunk"), "{message}")
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
}

// ---- Cascade: errors, retries, failover ---------------------------------

#[tokio::test]
async fn unauthorised_surfaces_the_providers_message_without_failover() {
    let a = FakeProvider::start(vec![status(401, "Incorrect API key provided")]).await;
    let b = FakeProvider::start(vec![openai_text("never")]).await;
    let mut first = openai("a", &a.openai_url());
    first.max_retries = 2;
    let error = cascade(&[first, openai("b", &b.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect_err("401 is final");
    match &error {
        CascadeError::Rejected { provider, error } => {
            assert_eq!(provider, &format!("a ({})", a.openai_url()));
            assert!(
                matches!(error, ProviderError::Http { status: 401, .. }),
                "{error:?}"
            );
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert!(
        error.to_string().contains("Incorrect API key provided"),
        "{error}"
    );
    assert_eq!(a.requests().len(), 1, "no retry of a 401");
    assert_eq!(b.requests().len(), 0, "no failover after a 401");
}

#[tokio::test]
async fn rate_limit_is_retried_on_the_same_provider() {
    let a = FakeProvider::start(vec![status(429, "slow down"), openai_text("fine")]).await;
    let b = FakeProvider::start(vec![openai_text("never")]).await;
    let mut first = openai("a", &a.openai_url());
    first.max_retries = 1;
    let answered = cascade(&[first, openai("b", &b.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("second try answers");
    assert_eq!(answered.provider, format!("a ({})", a.openai_url()));
    let events = events_of(answered.events).await;
    assert_eq!(events[0], StreamEvent::TextDelta("fi".into()));
    assert_eq!(a.requests().len(), 2);
    assert_eq!(b.requests().len(), 0);
}

#[tokio::test]
async fn server_error_fails_over_to_the_next_provider() {
    let a = FakeProvider::start(vec![status(500, "internal error")]).await;
    let b = FakeProvider::start(vec![openai_text("from b")]).await;
    let answered = cascade(&[openai("a", &a.openai_url()), openai("b", &b.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("b answers");
    assert_eq!(answered.provider, format!("b ({})", b.openai_url()));
    assert!(answered.native_tools);
    let events = events_of(answered.events).await;
    assert_eq!(&events[..2], &text(&["from ", "b"])[..]);
    assert_eq!(a.requests().len(), 1);
}

#[tokio::test]
async fn refused_connection_fails_over_to_the_next_provider() {
    let dead = unused_port_url();
    let b = FakeProvider::start(vec![openai_text("alive")]).await;
    let answered = cascade(&[openai("dead", &dead), openai("b", &b.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("b answers");
    assert_eq!(answered.provider, format!("b ({})", b.openai_url()));
}

#[tokio::test]
async fn all_failing_names_every_address_tried() {
    let dead = unused_port_url();
    let busy = FakeProvider::start(vec![status(503, "overloaded")]).await;
    let gone = FakeProvider::start(vec![anthropic_text("never")]).await;
    let mut gone_config = anthropic("gone", &gone.base_url);
    gone_config.api_key = None;
    drop(gone);
    let exhausted = FakeProvider::start(vec![]).await;
    let error = cascade(&[
        openai("dead", &dead),
        openai("busy", &busy.openai_url()),
        gone_config.clone(),
        openai("exhausted", &exhausted.openai_url()),
    ])
    .stream(&ask("hi"), CancellationToken::new())
    .await
    .expect_err("nobody answers");
    let CascadeError::AllFailed { attempts } = &error else {
        panic!("expected AllFailed, got {error:?}");
    };
    assert_eq!(attempts.len(), 4);
    assert!(matches!(attempts[0].1, ProviderError::Connect { .. }));
    assert!(matches!(
        attempts[1].1,
        ProviderError::Http { status: 503, .. }
    ));
    assert!(matches!(attempts[2].1, ProviderError::Connect { .. }));
    assert!(matches!(
        attempts[3].1,
        ProviderError::Http { status: 500, .. }
    ));
    let message = error.to_string();
    for needle in [
        dead.as_str(),
        &busy.openai_url(),
        &gone_config.base_url,
        &exhausted.openai_url(),
        "overloaded",
        "fake provider: script exhausted",
        "--provider-url",
        "PASSEPARTOUT_PROVIDER_URL",
        "[[providers]]",
    ] {
        assert!(
            message.contains(needle),
            "missing {needle:?} in:\n{message}"
        );
    }
}

#[tokio::test]
async fn disconnect_mid_stream_passes_the_text_then_a_stream_error() {
    // Chunks: role, "Hello ", "there, ", "world", ...; cut after "there, ".
    let a = FakeProvider::start(vec![disconnect_after(openai_text("Hello there, world"), 3)]).await;
    let b = FakeProvider::start(vec![openai_text("never")]).await;
    let answered = cascade(&[openai("a", &a.openai_url()), openai("b", &b.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("a answered before breaking");
    assert_eq!(answered.provider, format!("a ({})", a.openai_url()));
    let items = drain(answered.events).await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamEvent::TextDelta("Hello ".into()))
    );
    assert_eq!(
        items[1].as_ref().ok(),
        Some(&StreamEvent::TextDelta("there, ".into()))
    );
    assert!(
        matches!(items[2], Err(ProviderError::Stream { .. })),
        "{:?}",
        items[2]
    );
    assert_eq!(b.requests().len(), 0, "no failover once text was shown");
}

#[tokio::test]
async fn disconnect_before_any_event_fails_over() {
    let a = FakeProvider::start(vec![disconnect_after(openai_text("lost"), 1)]).await;
    let b = FakeProvider::start(vec![openai_text("from b")]).await;
    let answered = cascade(&[openai("a", &a.openai_url()), openai("b", &b.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("b answers");
    assert_eq!(answered.provider, format!("b ({})", b.openai_url()));
    assert_eq!(a.requests().len(), 1);
}

#[tokio::test]
async fn cancel_while_the_provider_hangs_returns_cancelled() {
    let fake = FakeProvider::start(vec![Reply::Hang {}]).await;
    let mut config = openai("hang", &fake.openai_url());
    config.idle_timeout_secs = 60;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let outcome = tokio::time::timeout(GUARD, cascade(&[config]).stream(&ask("hi"), cancel))
        .await
        .expect("cancellation ends the wait");
    assert!(
        matches!(outcome, Err(CascadeError::Cancelled)),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn cancel_during_backoff_returns_cancelled() {
    let fake = FakeProvider::start(vec![status(503, "busy"), openai_text("late")]).await;
    let mut config = openai("busy", &fake.openai_url());
    config.max_retries = 1;
    let slow = build_cascade(&[config])
        .expect("valid")
        .with_backoff(Duration::from_secs(30));
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let outcome = tokio::time::timeout(GUARD, slow.stream(&ask("hi"), cancel))
        .await
        .expect("cancellation ends the backoff");
    assert!(
        matches!(outcome, Err(CascadeError::Cancelled)),
        "{outcome:?}"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn cancel_mid_stream_ends_the_stream_with_cancelled() {
    let fake = FakeProvider::start(vec![Reply::OpenAi {
        chunks: vec![json!({"choices": [{"index": 0, "delta": {"content": "first"}}]})],
        delay_ms: 1,
        done: false,
    }])
    .await;
    // Left alone, this body would end in a "stream ended unexpectedly"
    // error; a cancel that comes first must win over it.
    let cancel = CancellationToken::new();
    let answered = cascade(&[openai("fake", &fake.openai_url())])
        .stream(&ask("hi"), cancel.clone())
        .await
        .expect("first event");
    cancel.cancel();
    let items = drain(answered.events).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamEvent::TextDelta("first".into()))
    );
    assert!(
        matches!(items[1], Err(ProviderError::Cancelled)),
        "{:?}",
        items[1]
    );
}

#[tokio::test]
async fn idle_provider_times_out() {
    let fake = FakeProvider::start(vec![Reply::Hang {}]).await;
    let mut config = openai("hang", &fake.openai_url());
    config.idle_timeout_secs = 1;
    let provider = config.build().expect("valid");
    let outcome = tokio::time::timeout(GUARD, async {
        let events = provider
            .stream(&ask("hi"), CancellationToken::new())
            .await?;
        drain(events).await.remove(0).map(|_| ())
    })
    .await
    .expect("the idle timeout fires first");
    assert!(
        matches!(outcome, Err(ProviderError::Timeout { .. })),
        "{outcome:?}"
    );
}

// ---- Anthropic ----------------------------------------------------------

#[tokio::test]
async fn anthropic_text_streams_with_usage_and_finish() {
    let fake = FakeProvider::start(vec![anthropic_text("Bonjour tout le monde")]).await;
    let events = stream_one(anthropic("claude", &fake.base_url), &ask("hi")).await;
    let mut expected = text(&["Bonjour ", "tout ", "le ", "monde"]);
    expected.push(StreamEvent::Usage(FAKE_USAGE));
    expected.push(StreamEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn anthropic_tool_use_input_is_reassembled() {
    let fake = FakeProvider::start(vec![anthropic_tool_use(
        "toolu_01",
        "read_file",
        r#"{"path": "plans/today.org", "lines": [1, 20]}"#,
    )])
    .await;
    let events = stream_one(anthropic("claude", &fake.base_url), &ask("hi")).await;
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolCall(ToolCall {
                id: "toolu_01".into(),
                name: "read_file".into(),
                arguments: json!({"path": "plans/today.org", "lines": [1, 20]}),
            }),
            StreamEvent::Usage(FAKE_USAGE),
            StreamEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn anthropic_thinking_comes_as_reasoning_deltas() {
    let fake = FakeProvider::start(vec![anthropic_thinking_then_text("Let me see.", "Yes")]).await;
    let events = stream_one(anthropic("claude", &fake.base_url), &ask("hi")).await;
    assert_eq!(
        events,
        vec![
            StreamEvent::ReasoningDelta("Let ".into()),
            StreamEvent::ReasoningDelta("me ".into()),
            StreamEvent::ReasoningDelta("see.".into()),
            StreamEvent::TextDelta("Ye".into()),
            StreamEvent::TextDelta("s".into()),
            StreamEvent::Usage(FAKE_USAGE),
            StreamEvent::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn anthropic_error_event_becomes_a_stream_error() {
    let fake = FakeProvider::start(vec![Reply::Anthropic {
        events: vec![
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}}),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ],
        delay_ms: 1,
    }])
    .await;
    let answered = cascade(&[anthropic("claude", &fake.base_url)])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("first event");
    let items = drain(answered.events).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamEvent::TextDelta("Hal".into()))
    );
    match &items[1] {
        Err(ProviderError::Stream { message, .. }) => {
            assert!(message.contains("Overloaded"), "{message}")
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
}

#[tokio::test]
async fn anthropic_http_error_carries_the_message_and_retry_after() {
    let fake = FakeProvider::start(vec![Reply::Status {
        status: 529,
        body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        retry_after: Some(7),
    }])
    .await;
    let provider = anthropic("claude", &fake.base_url).build().expect("valid");
    let error = provider
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .err()
        .expect("529 is an error");
    match error {
        ProviderError::Http {
            status,
            message,
            retry_after,
            url,
        } => {
            assert_eq!(status, 529);
            assert_eq!(message, "Overloaded");
            assert_eq!(retry_after, Some(7));
            assert_eq!(url, format!("{}/v1/messages", fake.base_url));
        }
        other => panic!("expected Http, got {other:?}"),
    }
}

#[tokio::test]
async fn anthropic_request_has_the_wire_shape() {
    let fake = FakeProvider::start(vec![anthropic_text("ok")]).await;
    let request = ChatRequest {
        messages: vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user("read both"),
            ChatMessage::assistant(
                "Reading.",
                vec![
                    ToolCall {
                        id: "t1".into(),
                        name: "read_file".into(),
                        arguments: json!({"path": "a"}),
                    },
                    ToolCall {
                        id: "t2".into(),
                        name: "read_file".into(),
                        arguments: json!({"path": "b"}),
                    },
                ],
            ),
            ChatMessage::tool_result("t1", "A", false),
            ChatMessage::tool_result("t2", "no such file", true),
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object"}),
        }],
        max_tokens: None,
        temperature: Some(0.5),
    };
    stream_one(anthropic("claude", &fake.base_url), &request).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": "fake-claude",
            "max_tokens": 4096,
            "stream": true,
            "temperature": 0.5,
            "system": [{"type": "text", "text": "You are terse.",
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "read both"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "b"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "no such file", "is_error": true,
                     "cache_control": {"type": "ephemeral"}},
                ]},
            ],
            "tools": [{"name": "read_file", "description": "Read a file",
                       "input_schema": {"type": "object"},
                       "cache_control": {"type": "ephemeral"}}],
        })
    );
}

#[tokio::test]
async fn anthropic_disconnect_before_message_stop_is_an_error() {
    let fake = FakeProvider::start(vec![disconnect_after(anthropic_text("Hello there"), 4)]).await;
    let answered = cascade(&[anthropic("claude", &fake.base_url)])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("first event");
    let items = drain(answered.events).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamEvent::TextDelta("Hello ".into()))
    );
    assert!(
        matches!(items[1], Err(ProviderError::Stream { .. })),
        "{:?}",
        items[1]
    );
}

#[tokio::test]
async fn openai_body_ending_without_finish_or_done_is_an_error() {
    let fake = FakeProvider::start(vec![Reply::OpenAi {
        chunks: vec![json!({"choices": [{"index": 0, "delta": {"content": "half"}}]})],
        delay_ms: 1,
        done: false,
    }])
    .await;
    let answered = cascade(&[openai("fake", &fake.openai_url())])
        .stream(&ask("hi"), CancellationToken::new())
        .await
        .expect("first event");
    let items = drain(answered.events).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamEvent::TextDelta("half".into()))
    );
    match &items[1] {
        Err(ProviderError::Stream { message, .. }) => {
            assert!(message.contains("stream ended unexpectedly"), "{message}")
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
}

// ---- The script format shared with the Emacs tests ----------------------

#[test]
fn script_format_reads_every_reply_kind_from_json() {
    let script: Vec<Reply> = serde_json::from_str(
        r#"[
          {"type": "open_ai", "chunks": [{"choices": []}], "delay_ms": 5, "done": true},
          {"type": "open_ai", "chunks": []},
          {"type": "anthropic", "events": [{"type": "message_stop"}], "delay_ms": 5},
          {"type": "status", "status": 429, "body": {"error": {"message": "slow down"}}, "retry_after": 1},
          {"type": "disconnect", "chunks": [{"choices": []}], "after": 1},
          {"type": "hang"}
        ]"#,
    )
    .expect("a valid script");
    assert_eq!(
        script,
        vec![
            Reply::OpenAi {
                chunks: vec![json!({"choices": []})],
                delay_ms: 5,
                done: true
            },
            Reply::OpenAi {
                chunks: vec![],
                delay_ms: 0,
                done: false
            },
            Reply::Anthropic {
                events: vec![json!({"type": "message_stop"})],
                delay_ms: 5
            },
            Reply::Status {
                status: 429,
                body: json!({"error": {"message": "slow down"}}),
                retry_after: Some(1)
            },
            Reply::Disconnect {
                chunks: vec![json!({"choices": []})],
                after: 1,
                delay_ms: 0
            },
            Reply::Hang {},
        ]
    );
    // And the builders' replies survive a round trip, so a Rust test can
    // write a script file for the example binary.
    let built = vec![openai_text("a b"), anthropic_tool_use("t", "n", "{}")];
    let text = serde_json::to_string(&built).expect("serialisable");
    let back: Vec<Reply> = serde_json::from_str(&text).expect("readable");
    assert_eq!(back, built);
}

/// The binary with `config` as its only configuration and `env` set.
fn daemon_command(home: &std::path::Path, config: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(crate::harness::BIN);
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("PASSEPARTOUT_LOG", "warn")
        .env("PASSEPARTOUT_CONFIG", config)
        .env_remove("PASSEPARTOUT_PROVIDER_URL")
        .env_remove("PASSEPARTOUT_MODEL")
        .env_remove("PASSEPARTOUT_API_KEY")
        .kill_on_drop(true);
    cmd
}

/// Issue 21 item 11: a 401 names the variable the key was read from.
#[tokio::test]
async fn a_401_names_the_key_variable_and_where_it_was_read() {
    let fake = FakeProvider::start(vec![status(401, "Incorrect API key provided")]).await;
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[providers]]\nname = \"hosted\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\napi_key_env = \"PP_TEST_HOSTED_KEY\"\nmax_retries = 0\n",
            fake.openai_url()
        ),
    )
    .unwrap();
    let mut cmd = daemon_command(home.path(), &config);
    cmd.arg("serve").env("PP_TEST_HOSTED_KEY", "sk-wrong");
    let mut c = crate::harness::Client::spawn_command(cmd, crate::harness::Framing::Ndjson);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    let r = c
        .request("session/prompt", crate::harness::prompt(&sid, "hi"))
        .await;
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("HTTP 401"), "{r}");
    assert!(
        message.contains("environment variable PP_TEST_HOSTED_KEY")
            && message.contains("api_key_env of provider hosted"),
        "{message}"
    );
    assert_eq!(
        fake.requests()[0].header("authorization"),
        Some("Bearer sk-wrong")
    );
}

/// Issue 21 item 11: a misspelt key in any table stops the daemon with
/// FILE:LINE, the table and the closest valid name, instead of being
/// ignored (`api_keyenv`) or reported as something else (`modle`).
#[tokio::test]
async fn an_unknown_config_key_names_its_line_and_the_closest_valid_name() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    for (body, line, table, want) in [
        (
            "[[providers]]\nname = \"x\"\nkind = \"openai\"\nmodel = \"m\"\napi_keyenv = \"KEY\"\n",
            5,
            "[[providers]]",
            "did you mean `api_key_env`?",
        ),
        (
            "max_rounds = 3\n\n[[providers]]\nname = \"x\"\nkind = \"openai\"\nmodle = \"m\"\n",
            6,
            "[[providers]]",
            "did you mean `model`?",
        ),
        (
            "[context]\ncompact_att = 0.5\n",
            2,
            "[context]",
            "did you mean `compact_at`?",
        ),
        (
            "max_round = 3\n",
            1,
            "the top level",
            "did you mean `max_rounds`?",
        ),
    ] {
        std::fs::write(&config, body).unwrap();
        let mut cmd = daemon_command(home.path(), &config);
        cmd.args(["run", "hi"]);
        let out = tokio::time::timeout(crate::harness::WAIT, cmd.output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{body}: {stderr}");
        let at = format!("{}:{line}: unknown key", config.display());
        assert!(stderr.contains(&at), "{body}: want {at:?} in {stderr}");
        assert!(stderr.contains(table), "{body}: want {table} in {stderr}");
        assert!(stderr.contains(want), "{body}: want {want:?} in {stderr}");
    }
}
