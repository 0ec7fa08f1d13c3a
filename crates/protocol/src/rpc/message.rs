//! The message envelope, kept deliberately dumb: incoming text is classified
//! as a request, a notification or a response by which of `id` / `method` it
//! carries, and `params` stay a `serde_json::Value` until a handler types them.
//!
//! A request's id is kept as the client wrote it ([`ClientId`], the raw JSON
//! text): JSON-RPC allows any number (negative, fractional, beyond 64 bits)
//! and the reply must carry the same value, which a `Value` would round
//! through `f64`. The reply is assembled around that text
//! ([`result_response`], [`error_object_response`]); no id is ever re-parsed.

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

/// An error object as carried in a response: what every handler returns
/// when it fails, and what a request to the client fails with. The codes
/// are in [`codes`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i32, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data` (for example `{"kind": ...}`).
    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    /// `-32602`: the request's params are wrong, and `message` says how.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(codes::INVALID_PARAMS, message)
    }

    /// `-32001`: refused by the daemon's own rules.
    pub fn refused(message: impl Into<String>) -> RpcError {
        RpcError::new(codes::REFUSED, message)
    }

    /// `-32002`: the session, plan or checkpoint does not exist.
    pub fn not_found(message: impl Into<String>) -> RpcError {
        RpcError::new(codes::RESOURCE_NOT_FOUND, message)
    }

    /// `-32603`: the daemon failed.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(codes::INTERNAL_ERROR, message)
    }
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
    /// A call that wants a response. A `null` `params` reads as absent
    /// (jsonrpc.el sends `"params": null`).
    Request {
        id: ClientId,
        method: String,
        params: Option<Value>,
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

/// A frame that is not a message the daemon takes: what is wrong with it,
/// and the id its error response goes to (`null` when none could be read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Malformed {
    pub id: ClientId,
    pub code: i32,
    pub message: String,
}

impl Malformed {
    fn new(id: &ClientId, code: i32, message: impl Into<String>) -> Malformed {
        Malformed {
            id: id.clone(),
            code,
            message: message.into(),
        }
    }

    /// The complete error response to send back.
    pub fn response(&self) -> String {
        error_response(&self.id, self.code, &self.message)
    }
}

/// Classify one frame's text. `Err` says what to answer.
pub fn classify(text: &str) -> Result<Incoming, Malformed> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(Malformed::new(
                &ClientId::null(),
                codes::PARSE_ERROR,
                format!("parse error: {e}"),
            ))
        }
    };
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "batch requests are not supported"
        } else {
            "a request must be a JSON object"
        };
        return Err(Malformed::new(
            &ClientId::null(),
            codes::INVALID_REQUEST,
            what,
        ));
    };
    let id = obj.get("id").cloned();
    if let Some(id) = &id {
        if !(id.is_string() || id.is_number() || id.is_null()) {
            return Err(Malformed::new(
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
        return Err(Malformed::new(
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
                    return Err(Malformed::new(
                        &reply_id,
                        codes::INVALID_REQUEST,
                        "`params` must be an object or an array",
                    ));
                }
            }
            Ok(Incoming::Request {
                id: reply_id,
                method,
                params: obj.remove("params"),
            })
        }
        (Some(Value::String(method)), None) => Ok(Incoming::Notification {
            method,
            params: obj.remove("params").unwrap_or(Value::Null),
        }),
        (Some(_), _) => Err(Malformed::new(
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
        (None, None) => Err(Malformed::new(
            &ClientId::null(),
            codes::INVALID_REQUEST,
            "neither `method` nor `id`",
        )),
    }
}

/// A successful response: `result` is the result's JSON text.
pub fn result_response(id: &ClientId, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, id.0)
}

/// A response carrying `error` (with its `data`, when it has some).
pub fn error_object_response(id: &ClientId, error: &RpcError) -> String {
    match serde_json::to_string(error) {
        Ok(error) => format!(r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#, id.0),
        // Only a `data` that cannot be written gets here.
        Err(_) => error_response(id, error.code, &error.message),
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
        serde_json::from_str(&classify(text).unwrap_err().response()).unwrap()
    }

    #[test]
    fn requests_notifications_and_responses() {
        match classify(r#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":[1]}}"#).unwrap() {
            Incoming::Request { params, .. } => assert_eq!(params, Some(json!({"x": [1]}))),
            other => panic!("not a request: {other:?}"),
        }
        match classify(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":null}"#).unwrap() {
            Incoming::Request { id, method, params } => {
                assert_eq!((id.as_json(), method.as_str()), ("1", "initialize"));
                assert_eq!(params, None);
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
            let Incoming::Request { id: got, .. } = classify(&text).unwrap() else {
                panic!("not a request: {id}");
            };
            assert_eq!(got.as_json(), id);
            let reply = result_response(&got, r#"{"a":[1]}"#);
            assert_eq!(
                reply,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"a":[1]}}}}"#)
            );
            let reply = error_object_response(&got, &RpcError::new(-32601, "x"));
            assert_eq!(
                reply,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"x"}}}}"#)
            );
        }
        // A `null` result stays a result.
        let reply = result_response(&ClientId::null(), "null");
        assert_eq!(reply, r#"{"jsonrpc":"2.0","id":null,"result":null}"#);
        // Data goes after the message, as jsonrpsee wrote it.
        let reply = error_object_response(
            &ClientId::null(),
            &RpcError::new(-32603, "m").with_data(json!({"kind": "k"})),
        );
        assert_eq!(
            reply,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"m","data":{"kind":"k"}}}"#
        );
        // An invalid request still echoes the id it could read.
        let e = err_of(r#"{"id":-2.5,"method":"x"}"#);
        assert_eq!(e["id"], json!(-2.5));
    }
}
