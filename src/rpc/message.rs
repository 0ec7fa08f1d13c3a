//! The message envelope, kept deliberately dumb: incoming text is classified
//! as a request, a notification or a response by which of `id` / `method` it
//! carries, and `params` stay a `serde_json::Value` until a handler types them.

use serde_json::{json, Value};

/// JSON-RPC 2.0 error codes used by the daemon.
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// A request was refused by the daemon's own rules (unknown session,
    /// stale plan, ...). In the server-defined range.
    pub const REFUSED: i32 = -32001;
    /// The LLM provider(s) failed.
    pub const PROVIDER_FAILED: i32 = -32002;
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

/// One classified incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A call that wants a response. `text` is the request re-serialised with
    /// a `null` `params` removed (jsonrpc.el sends `"params": null`).
    Request {
        id: Value,
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

/// Classify one frame's text. `Err` is the error response to send back.
pub fn classify(text: &str) -> Result<Incoming, String> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(error_response(
                &Value::Null,
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
        return Err(error_response(&Value::Null, codes::INVALID_REQUEST, what));
    };
    let id = obj.get("id").cloned();
    if let Some(id) = &id {
        if !(id.is_string() || id.is_number() || id.is_null()) {
            return Err(error_response(
                &Value::Null,
                codes::INVALID_REQUEST,
                "`id` must be a string or a number",
            ));
        }
    }
    let reply_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error_response(
            &reply_id,
            codes::INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    match (obj.get("method").cloned(), id) {
        (Some(Value::String(method)), Some(id)) => {
            if obj.get("params").is_some_and(Value::is_null) {
                obj.remove("params");
            }
            if let Some(p) = obj.get("params") {
                if !(p.is_object() || p.is_array()) {
                    return Err(error_response(
                        &id,
                        codes::INVALID_REQUEST,
                        "`params` must be an object or an array",
                    ));
                }
            }
            Ok(Incoming::Request {
                id,
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
            &Value::Null,
            codes::INVALID_REQUEST,
            "neither `method` nor `id`",
        )),
    }
}

/// A complete error response.
pub fn error_response(id: &Value, code: i32, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
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
                assert_eq!((id, method.as_str()), (json!(1), "initialize"));
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
}
