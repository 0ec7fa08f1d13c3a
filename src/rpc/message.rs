//! The message envelope, kept deliberately dumb: incoming text is classified
//! as a request, a notification or a response by which of `id` / `method` it
//! carries, and `params` stay a `serde_json::Value` until a handler types them.
//!
//! A request's id is kept as the client wrote it ([`ClientId`], the raw JSON
//! text): JSON-RPC allows any number (negative, fractional, beyond 64 bits)
//! and the reply must carry the same value. jsonrpsee only knows `u64` and
//! string ids, and a `Value` would round big numbers through `f64`, so the
//! connection hands jsonrpsee an id of its own ([`with_internal_id`]) and puts
//! the client's text back on the reply ([`reply_with_client_id`]).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// JSON-RPC 2.0 and ACP error codes used by the daemon. `docs/protocol.md`
/// has the table of what each means on the wire.
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    /// Also the code of a failed turn (every provider failed): ACP defines
    /// no code for it; `data.kind` says which failure it was.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// ACP: a resource (session, flight plan, checkpoint) does not exist.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
    /// A request was refused by the daemon's own rules (stale plan, nothing
    /// to undo, too many prompts queued, turn time limit). In the
    /// server-defined range, and not one ACP gives a meaning to.
    pub const REFUSED: i32 = -32001;
}

/// An error object as carried in a response.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// A request id exactly as the client sent it: its JSON text (a string,
/// any number, or `null`), echoed byte for byte in the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientId(String);

impl ClientId {
    /// The id of a reply to a message whose id could not be read.
    pub fn null() -> ClientId {
        ClientId("null".into())
    }

    /// The id's JSON text.
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

/// One classified incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A call that wants a response. `text` is the request re-serialised with
    /// a `null` `params` removed (jsonrpc.el sends `"params": null`); its id
    /// is still the client's (see [`with_internal_id`]).
    Request {
        id: ClientId,
        method: String,
        text: String,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The client's answer to a request the daemon sent.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
}

/// The raw text of a frame's `id` member, read without going through a
/// number type.
fn raw_id(text: &str, parsed: &Value) -> ClientId {
    #[derive(Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
    }
    match serde_json::from_str::<IdOnly>(text) {
        Ok(IdOnly { id: Some(raw) }) => ClientId(raw.get().to_string()),
        // `"id": null` reads as `None`.
        Ok(IdOnly { id: None }) => ClientId::null(),
        // Only a duplicated `id` member gets here; the parsed value (the
        // last one) is the best answer left.
        Err(_) => ClientId(parsed.to_string()),
    }
}

/// Classify one frame's text. `Err` is the error response to send back.
pub fn classify(text: &str) -> Result<Incoming, String> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(error_response(
                &ClientId::null(),
                codes::PARSE_ERROR,
                &format!("parse error: {e}"),
            ))
        }
    };
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "batch requests are not supported"
        } else {
            "a request must be a JSON object"
        };
        return Err(error_response(
            &ClientId::null(),
            codes::INVALID_REQUEST,
            what,
        ));
    };
    let id = obj.get("id").cloned();
    if let Some(id) = &id {
        if !(id.is_string() || id.is_number() || id.is_null()) {
            return Err(error_response(
                &ClientId::null(),
                codes::INVALID_REQUEST,
                "`id` must be a string or a number",
            ));
        }
    }
    let reply_id = match &id {
        Some(parsed) => raw_id(text, parsed),
        None => ClientId::null(),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error_response(
            &reply_id,
            codes::INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    match (obj.get("method").cloned(), id) {
        (Some(Value::String(method)), Some(_)) => {
            if obj.get("params").is_some_and(Value::is_null) {
                obj.remove("params");
            }
            if let Some(p) = obj.get("params") {
                if !(p.is_object() || p.is_array()) {
                    return Err(error_response(
                        &reply_id,
                        codes::INVALID_REQUEST,
                        "`params` must be an object or an array",
                    ));
                }
            }
            Ok(Incoming::Request {
                id: reply_id,
                method,
                text: Value::Object(obj).to_string(),
            })
        }
        (Some(Value::String(method)), None) => Ok(Incoming::Notification {
            method,
            params: obj.remove("params").unwrap_or(Value::Null),
        }),
        (Some(_), _) => Err(error_response(
            &reply_id,
            codes::INVALID_REQUEST,
            "`method` must be a string",
        )),
        (None, Some(id)) => {
            let result = if let Some(err) = obj.remove("error") {
                Err(serde_json::from_value(err.clone()).unwrap_or(RpcError {
                    code: codes::INTERNAL_ERROR,
                    message: err.to_string(),
                    data: None,
                }))
            } else {
                Ok(obj.remove("result").unwrap_or(Value::Null))
            };
            Ok(Incoming::Response { id, result })
        }
        (None, None) => Err(error_response(
            &ClientId::null(),
            codes::INVALID_REQUEST,
            "neither `method` nor `id`",
        )),
    }
}

/// The request `text` with its id replaced by `internal` (the id jsonrpsee
/// sees; it only understands `u64` and string ids).
pub fn with_internal_id(text: &str, internal: u64) -> Result<String, serde_json::Error> {
    let mut obj: serde_json::Map<String, Value> = serde_json::from_str(text)?;
    obj.insert("id".into(), json!(internal));
    serde_json::to_string(&obj)
}

/// A reply jsonrpsee produced, re-addressed to the client's own id. The
/// result or error is copied as raw text, never re-encoded.
pub fn reply_with_client_id(reply: &str, id: &ClientId) -> String {
    #[derive(Deserialize)]
    struct Parts<'a> {
        #[serde(borrow, default)]
        result: Option<&'a RawValue>,
        #[serde(borrow, default)]
        error: Option<&'a RawValue>,
    }
    match serde_json::from_str::<Parts>(reply) {
        Ok(Parts {
            error: Some(error), ..
        }) => format!(
            r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#,
            id.0,
            error.get()
        ),
        // A `null` result reads as `None`.
        Ok(Parts { result, .. }) => format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#,
            id.0,
            result.map_or("null", RawValue::get)
        ),
        Err(e) => error_response(
            id,
            codes::INTERNAL_ERROR,
            &format!("the daemon produced an unreadable reply: {e}"),
        ),
    }
}

/// A complete error response.
pub fn error_response(id: &ClientId, code: i32, message: &str) -> String {
    let error = json!({ "code": code, "message": message });
    format!(r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#, id.0)
}

pub fn notification(method: &str, params: &Value) -> String {
    json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string()
}

pub fn request(id: u64, method: &str, params: &Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_of(text: &str) -> Value {
        serde_json::from_str(&classify(text).unwrap_err()).unwrap()
    }

    #[test]
    fn requests_notifications_and_responses() {
        match classify(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":null}"#).unwrap() {
            Incoming::Request { id, method, text } => {
                assert_eq!((id.as_json(), method.as_str()), ("1", "initialize"));
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v, json!({"jsonrpc":"2.0","id":1,"method":"initialize"}));
            }
            other => panic!("not a request: {other:?}"),
        }
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#)
                .unwrap(),
            Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({"sessionId":"s"})
            }
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"7","result":{"ok":true}}"#).unwrap(),
            Incoming::Response {
                id: json!("7"),
                result: Ok(json!({"ok":true}))
            }
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#).unwrap(),
            Incoming::Response {
                id: json!(3),
                result: Err(RpcError {
                    code: -1,
                    message: "no".into(),
                    data: None
                })
            }
        );
    }

    #[test]
    fn malformed_input_gets_the_proper_error() {
        let e = err_of("{not json");
        assert_eq!(e["error"]["code"], -32700);
        assert_eq!(e["id"], Value::Null);
        assert_eq!(err_of("[1,2]")["error"]["code"], -32600);
        assert_eq!(err_of("42")["error"]["code"], -32600);
        let e = err_of(r#"{"id":5,"method":"x"}"#);
        assert_eq!(
            (e["error"]["code"].clone(), e["id"].clone()),
            (json!(-32600), json!(5))
        );
        assert_eq!(
            err_of(r#"{"jsonrpc":"2.0","id":5,"method":7}"#)["error"]["code"],
            -32600
        );
        assert_eq!(
            err_of(r#"{"jsonrpc":"2.0","id":5,"method":"m","params":3}"#)["error"]["code"],
            -32600
        );
        assert_eq!(
            err_of(r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#)["error"]["code"],
            -32600
        );
    }

    #[test]
    fn ids_are_kept_as_written() {
        for id in [
            "-1",
            "1.5",
            "18446744073709551616",
            "1e3",
            "\"x\"",
            "0",
            "null",
            "1.0",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            let Incoming::Request { id: got, text, .. } = classify(&text).unwrap() else {
                panic!("not a request: {id}");
            };
            assert_eq!(got.as_json(), id);
            let internal = with_internal_id(&text, 7).unwrap();
            let v: Value = serde_json::from_str(&internal).unwrap();
            assert_eq!(v["id"], 7);
            let reply =
                reply_with_client_id(r#"{"jsonrpc":"2.0","id":7,"result":{"a":[1]}}"#, &got);
            assert_eq!(
                reply,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"a":[1]}}}}"#)
            );
            let reply = reply_with_client_id(
                r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"x"}}"#,
                &got,
            );
            assert_eq!(
                reply,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"x"}}}}"#)
            );
        }
        // A `null` result stays a result.
        let reply = reply_with_client_id(
            r#"{"jsonrpc":"2.0","id":7,"result":null}"#,
            &ClientId::null(),
        );
        assert_eq!(reply, r#"{"jsonrpc":"2.0","id":null,"result":null}"#);
        // An invalid request still echoes the id it could read.
        let e = err_of(r#"{"id":-2.5,"method":"x"}"#);
        assert_eq!(e["id"], json!(-2.5));
    }
}
