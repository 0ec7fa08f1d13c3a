//! The typed method table: the seam between JSON-RPC and the daemon.
//!
//! A handler is registered with the type of its params and of its result;
//! the router parses the one into the other and the handler's [`RpcError`]
//! into the wire's error object, so nothing above `rpc/` handles JSON-RPC
//! envelopes, ids or the library's types. Params are read with jsonrpsee's
//! own `Params::parse` (absent params read as `null`, so an `Option<P>`
//! makes them optional), which keeps its error objects (`-32602 Invalid
//! params` with serde's message as `data`) and its `-32601 Method not
//! found` exactly as clients have always seen them.
//!
//! Dispatch is ours, not jsonrpsee's `RpcModule`: the module only knows
//! `u64` and string ids (every request had to be re-addressed and its reply
//! re-addressed back) and has no way to hand a handler something decided on
//! the reader task (the prompt order went through a task-local `Any`). Here
//! an [`Router::ordered`] method is parsed on the reader task, in arrival
//! order, and what its `arrive` step returns reaches its handler typed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use jsonrpsee::types::{ErrorCode, ErrorObject, ErrorObjectOwned, Params};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::message::{codes, RpcError};

/// A handler's answer: the result's JSON text, or the error to send.
pub(crate) type Reply = Result<String, RpcError>;

/// One method: called on the reader task with the request's params; the
/// future it returns runs in the request's own task.
type Method<S> = Box<dyn Fn(&Arc<S>, Option<Value>) -> BoxFuture<'static, Reply> + Send + Sync>;

/// The methods a connection answers, over the state `S` they share.
pub struct Router<S> {
    state: Arc<S>,
    methods: HashMap<&'static str, Method<S>>,
}

impl From<ErrorObjectOwned> for RpcError {
    fn from(e: ErrorObjectOwned) -> RpcError {
        RpcError {
            code: e.code(),
            message: e.message().to_string(),
            data: e
                .data()
                .and_then(|raw| serde_json::from_str(raw.get()).ok()),
        }
    }
}

/// `params` as the handler's type (absent params read as `null`).
fn parse<P: DeserializeOwned>(params: Option<&Value>) -> Result<P, RpcError> {
    let text = params.map(Value::to_string);
    Params::new(text.as_deref())
        .parse::<P>()
        .map_err(RpcError::from)
}

fn encode<R: Serialize>(result: R) -> Reply {
    serde_json::to_string(&result).map_err(|e| {
        RpcError::new(
            codes::INTERNAL_ERROR,
            format!("cannot serialise the result: {e}"),
        )
    })
}

impl<S: Send + Sync + 'static> Router<S> {
    pub fn new(state: Arc<S>) -> Router<S> {
        Router {
            state,
            methods: HashMap::new(),
        }
    }

    fn insert(&mut self, name: &'static str, method: Method<S>) -> &mut Self {
        // Names are constants of `protocol.rs`; a clash is a programming
        // error that a test of the method table catches.
        if self.methods.insert(name, method).is_some() {
            tracing::error!(method = name, "method registered twice; the last one wins");
        }
        self
    }

    /// A method that answers without awaiting anything.
    pub fn method<P, R, F>(&mut self, name: &'static str, handler: F) -> &mut Self
    where
        P: DeserializeOwned,
        R: Serialize,
        F: Fn(&S, P) -> Result<R, RpcError> + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        self.insert(
            name,
            Box::new(move |state, params| {
                let (state, handler) = (state.clone(), handler.clone());
                Box::pin(async move {
                    let p = parse(params.as_ref())?;
                    encode(handler(&state, p)?)
                })
            }),
        )
    }

    /// A method whose answer takes a while (it may await the client).
    pub fn async_method<P, R, F, Fut>(&mut self, name: &'static str, handler: F) -> &mut Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize,
        F: Fn(Arc<S>, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.insert(
            name,
            Box::new(move |state, params| {
                let (state, handler) = (state.clone(), handler.clone());
                Box::pin(async move {
                    let p = parse(params.as_ref())?;
                    encode(handler(state, p).await?)
                })
            }),
        )
    }

    /// A method whose requests must be taken in the order they arrived:
    /// its params are parsed on the reader task, `arrive` runs there (in
    /// arrival order, before the next message is read), and what it
    /// returns is handed to `handler` in the request's own task. `arrive`
    /// is not called when the params do not parse; the handler is not
    /// either, the parse error is the answer.
    pub fn ordered<P, T, R, A, F, Fut>(
        &mut self,
        name: &'static str,
        arrive: A,
        handler: F,
    ) -> &mut Self
    where
        P: DeserializeOwned + Send + 'static,
        T: Send + 'static,
        R: Serialize,
        A: Fn(&S, &P) -> T + Send + Sync + 'static,
        F: Fn(Arc<S>, P, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.insert(
            name,
            Box::new(move |state, params| {
                let parsed = parse::<P>(params.as_ref());
                let (state, handler) = (state.clone(), handler.clone());
                match parsed {
                    Ok(p) => {
                        let arrived = arrive(&state, &p);
                        Box::pin(async move { encode(handler(state, p, arrived).await?) })
                    }
                    Err(e) => Box::pin(async move { Err(e) }),
                }
            }),
        )
    }

    /// On the reader task: start `method`. The future runs the handler.
    pub(crate) fn dispatch(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> BoxFuture<'static, Reply> {
        match self.methods.get(method) {
            Some(m) => m(&self.state, params),
            None => {
                let e: ErrorObjectOwned = ErrorObject::from(ErrorCode::MethodNotFound);
                Box::pin(async move { Err(RpcError::from(e)) })
            }
        }
    }

    /// The registered method names (for tests and diagnostics).
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.methods.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Default)]
    struct State {
        arrivals: AtomicU64,
    }

    #[derive(serde::Deserialize)]
    struct Add {
        a: i64,
        b: i64,
    }

    fn router() -> Router<State> {
        let mut r = Router::new(Arc::new(State::default()));
        r.method("add", |_, p: Add| Ok(p.a + p.b))
            .method("opt", |_, p: Option<Add>| Ok(p.map_or(0, |p| p.a)))
            .method("refuse", |_, _: Option<Value>| {
                Err::<(), _>(RpcError::new(codes::REFUSED, "no").with_data(json!({"why": 1})))
            })
            .async_method(
                "later",
                |_, p: Add| async move { Ok(json!({"sum": p.a + p.b})) },
            )
            .ordered(
                "queued",
                |s: &State, _: &Add| s.arrivals.fetch_add(1, Ordering::SeqCst),
                |_, p: Add, place: u64| async move { Ok(json!([place, p.a])) },
            );
        r
    }

    async fn call(r: &Router<State>, method: &str, params: Option<Value>) -> Reply {
        r.dispatch(method, params).await
    }

    #[tokio::test]
    async fn params_are_typed_and_results_encoded() {
        let r = router();
        assert_eq!(
            call(&r, "add", Some(json!({"a": 2, "b": 3}))).await,
            Ok("5".into())
        );
        assert_eq!(
            call(&r, "later", Some(json!({"a": 2, "b": 3}))).await,
            Ok(r#"{"sum":5}"#.into())
        );
        // Optional params: absent is fine.
        assert_eq!(call(&r, "opt", None).await, Ok("0".into()));
        assert_eq!(
            call(&r, "opt", Some(json!({"a": 4, "b": 0}))).await,
            Ok("4".into())
        );
    }

    #[tokio::test]
    async fn errors_keep_jsonrpsees_wire_objects() {
        let r = router();
        let e = call(&r, "add", None).await.unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-32602, "Invalid params"));
        assert_eq!(
            e.data,
            Some(json!(
                "invalid type: null, expected struct Add at line 1 column 4"
            ))
        );
        let e = call(&r, "add", Some(json!({"a": 1}))).await.unwrap_err();
        assert_eq!(e.data, Some(json!("missing field `b` at line 1 column 7")));
        let e = call(&r, "nope", None).await.unwrap_err();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32601,"message":"Method not found"}"#
        );
        let e = call(&r, "refuse", None).await.unwrap_err();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32001,"message":"no","data":{"why":1}}"#
        );
    }

    #[tokio::test]
    async fn ordered_methods_arrive_at_dispatch_not_when_run() {
        let r = router();
        let first = r.dispatch("queued", Some(json!({"a": 10, "b": 0})));
        let second = r.dispatch("queued", Some(json!({"a": 20, "b": 0})));
        // A request whose params do not parse takes no place.
        let bad = r.dispatch("queued", Some(json!({"a": "x"})));
        assert_eq!(r.state.arrivals.load(Ordering::SeqCst), 2);
        // Run in the opposite order: each keeps the place it took.
        assert_eq!(second.await, Ok("[1,20]".into()));
        assert_eq!(first.await, Ok("[0,10]".into()));
        assert_eq!(bad.await.unwrap_err().code, -32602);
    }
}
