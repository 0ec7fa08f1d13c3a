//! The text tool protocol, for models without function calling.
//!
//! The tool belt (a system-prompt section) teaches the model to answer with
//! s-expressions: one call per line, `(read_file "src/main.rs")`, or a tuple
//! of up to five calls, `((read_file "a") (list_directory "."))`. The reply
//! is read forgivingly — code fences and prose around the calls are
//! skipped, missing closing parentheses are supplied, quoted numbers are
//! typed by the schema — and whatever still cannot be understood (an
//! unknown tool, a wrong number of arguments, a string never closed, where
//! guessing its end could run a wrong argument) becomes a precise error for
//! the next round, never a failed turn.
//!
//! Positional arguments map to a tool's parameters in a fixed order: the
//! `required` ones in the order of the schema's `required` array, then the
//! optional ones in the order of its `properties` (declaration order, since
//! serde_json's `preserve_order` is on in this build; by name otherwise).
//! The tool belt prints each signature in exactly that order.

use serde_json::{Map, Number, Value};

use crate::llm::{ToolCall, ToolSpec};

/// Most calls run from one reply; the rest are reported, not run.
pub const MAX_CALLS: usize = 5;

/// What a reply contained.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedReply {
    /// Calls to run, in order (at most [`MAX_CALLS`]).
    pub calls: Vec<ToolCall>,
    /// What was wrong, one entry per problem, worded for the model.
    pub errors: Vec<String>,
    /// The reply without its calls and code fences, trimmed.
    pub prose: String,
}

/// The parameter names of `spec` in positional order, each with its type
/// and whether it is required.
fn parameter_order(spec: &ToolSpec) -> Vec<(String, String, bool)> {
    let props = spec.parameters.get("properties").and_then(Value::as_object);
    let ty = |name: &str| {
        props
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string")
            .to_string()
    };
    let required: Vec<String> = spec
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let mut out: Vec<(String, String, bool)> =
        required.iter().map(|n| (n.clone(), ty(n), true)).collect();
    if let Some(props) = props {
        for name in props.keys() {
            if !required.contains(name) {
                out.push((name.clone(), ty(name), false));
            }
        }
    }
    out
}

/// The system-prompt section describing the tools and the call syntax.
pub fn tool_belt(specs: &[ToolSpec]) -> String {
    let mut s = String::from(
        "## Tools\n\n\
         You can use tools. To call one, write the call on its own line as an \
         s-expression: the tool's name, then its arguments in the order shown, \
         strings in double quotes.\n\n\
         (read_file \"src/main.rs\")\n\n\
         Arguments in [brackets] are optional. You may also name arguments: \
         (search_text :pattern \"TODO\" :path \"src\"). Arrays are lists: \
         (\"a\" \"b\"). To make several calls at once, write up to 5 as one \
         tuple:\n\n\
         ((read_file \"a.txt\") (list_directory \".\"))\n\n\
         The calls run in order and all their results come back to you together \
         in the next message. Write nothing after your calls. When you need no \
         tool, answer in plain prose without parentheses at the start of a line.\n\n\
         Available tools:\n",
    );
    for spec in specs {
        let params = parameter_order(spec);
        let sig: Vec<String> = params
            .iter()
            .map(|(n, _, req)| if *req { n.clone() } else { format!("[{n}]") })
            .collect();
        s.push_str(&format!(
            "\n({}{}{})\n",
            spec.name,
            if sig.is_empty() { "" } else { " " },
            sig.join(" ")
        ));
        for line in spec.description.lines() {
            s.push_str(&format!("  {line}\n"));
        }
        let props = spec.parameters.get("properties").and_then(Value::as_object);
        for (name, ty, req) in &params {
            let desc = props
                .and_then(|p| p.get(name))
                .and_then(|p| p.get("description"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let req = if *req { "required" } else { "optional" };
            let sep = if desc.is_empty() { "" } else { ": " };
            s.push_str(&format!("  - {name} ({ty}, {req}){sep}{desc}\n"));
        }
    }
    s
}

/// An s-expression as read from the reply.
#[derive(Debug, Clone, PartialEq)]
enum Sexp {
    List(Vec<Sexp>),
    Str(String),
    /// A bare word: a tool name, a number, `true`, `:keyword`...
    Atom(String),
    /// A string whose closing quote never came. Not repaired: where it
    /// should have ended is a guess, and a wrong guess runs a wrong argument.
    Unterminated(String),
}

impl Sexp {
    fn render(&self) -> String {
        match self {
            Sexp::List(items) => {
                format!(
                    "({})",
                    items.iter().map(Sexp::render).collect::<Vec<_>>().join(" ")
                )
            }
            Sexp::Str(s) => Value::String(s.clone()).to_string(),
            Sexp::Atom(a) => a.clone(),
            Sexp::Unterminated(s) => format!("\"{s}"),
        }
    }
}

struct Reader<'a> {
    chars: Vec<char>,
    pos: usize,
    tools: &'a [ToolSpec],
}

impl Reader<'_> {
    fn is_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    fn skip_ws(&mut self) {
        while self.pos < self.chars.len() && self.chars[self.pos].is_whitespace() {
            self.pos += 1;
        }
    }

    /// The word starting at `at` (up to whitespace or a parenthesis).
    fn word_at(&self, at: usize) -> String {
        self.chars[at..]
            .iter()
            .take_while(|c| !c.is_whitespace() && !matches!(c, '(' | ')' | '"'))
            .collect()
    }

    /// Read a list whose `(` is at `self.pos`. Reaching the end of the reply
    /// closes every open list. A list headed by a tool name is a call.
    fn list(&mut self) -> Sexp {
        self.pos += 1; // the `(`
        let mut items = Vec::new();
        loop {
            if let [Sexp::Atom(head)] = items.as_slice() {
                if self.is_tool(head) {
                    return self.call_rest(items);
                }
            }
            self.skip_ws();
            let Some(&c) = self.chars.get(self.pos) else {
                return Sexp::List(items);
            };
            match c {
                ')' => {
                    self.pos += 1;
                    return Sexp::List(items);
                }
                '(' => items.push(self.list()),
                '"' => items.push(self.string()),
                _ => items.push(self.atom()),
            }
        }
    }

    /// The arguments of a call whose name is read. An argument that starts
    /// with a tool name means the call was never closed: it ends there, so
    /// `(read_file "a"` followed by `(list_directory ".")` is two calls.
    fn call_rest(&mut self, mut items: Vec<Sexp>) -> Sexp {
        loop {
            self.skip_ws();
            let Some(&c) = self.chars.get(self.pos) else {
                return Sexp::List(items);
            };
            match c {
                ')' => {
                    self.pos += 1;
                    return Sexp::List(items);
                }
                '(' => {
                    if self.is_tool(&self.head_after(self.pos)) {
                        return Sexp::List(items);
                    }
                    items.push(self.list());
                }
                '"' => items.push(self.string()),
                _ => items.push(self.atom()),
            }
        }
    }

    fn atom(&mut self) -> Sexp {
        let w = self.word_at(self.pos);
        // A stray character that starts no word (a lone `)` is handled by
        // the callers) still has to be consumed.
        self.pos += w.chars().count().max(1);
        Sexp::Atom(w)
    }

    /// The first word after the `(` at `at`.
    fn head_after(&self, at: usize) -> String {
        let mut p = at + 1;
        while p < self.chars.len() && self.chars[p].is_whitespace() {
            p += 1;
        }
        self.word_at(p)
    }

    /// A string whose `"` is at `self.pos`; an unterminated one ends at the
    /// end of the reply.
    fn string(&mut self) -> Sexp {
        self.pos += 1;
        let mut s = String::new();
        while let Some(&c) = self.chars.get(self.pos) {
            self.pos += 1;
            match c {
                '"' => return Sexp::Str(s),
                '\\' => {
                    let Some(&e) = self.chars.get(self.pos) else {
                        break;
                    };
                    self.pos += 1;
                    s.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                }
                other => s.push(other),
            }
        }
        Sexp::Unterminated(s)
    }
}

/// Whether a `(` at `at` starts something meant as a call: a tuple `((`,
/// a known tool, or (at the start of a line) a word followed by an
/// argument-like token, so `(frobnicate "x")` is reported as an unknown
/// tool while `(see above)` in prose is left alone.
fn starts_call(r: &Reader, at: usize, line_start: bool) -> bool {
    let mut p = at + 1;
    while p < r.chars.len() && r.chars[p].is_whitespace() {
        p += 1;
    }
    if r.chars.get(p) == Some(&'(') {
        let mut q = p + 1;
        while q < r.chars.len() && r.chars[q].is_whitespace() {
            q += 1;
        }
        return r.is_tool(&r.word_at(q)) || line_start;
    }
    let head = r.word_at(p);
    if head.is_empty() {
        return false;
    }
    if r.is_tool(&head) {
        return true;
    }
    // A word that could be a tool name, followed by a quoted or named
    // argument: `(1) first` and `(a) option` in a numbered list are prose.
    let mut chars = head.chars();
    let name_like = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !line_start || !name_like {
        return false;
    }
    let mut q = p + head.chars().count();
    while q < r.chars.len() && r.chars[q] == ' ' {
        q += 1;
    }
    matches!(r.chars.get(q), Some('"' | ':'))
}

fn is_fence(line: &str) -> bool {
    line.trim_start().starts_with("```")
}

/// Read the calls out of a model's reply.
pub fn parse_calls(reply: &str, specs: &[ToolSpec]) -> ParsedReply {
    // Drop fence lines (keeping their content), so ```lisp blocks read as text.
    let text: String = reply
        .split_inclusive('\n')
        .filter(|l| !is_fence(l))
        .collect();
    let mut r = Reader {
        chars: text.chars().collect(),
        pos: 0,
        tools: specs,
    };
    let mut forms = Vec::new();
    let mut prose = String::new();
    let mut line_start = true;
    while r.pos < r.chars.len() {
        let c = r.chars[r.pos];
        if c == '(' && starts_call(&r, r.pos, line_start) {
            forms.push(r.list());
            line_start = false;
            continue;
        }
        prose.push(c);
        if c == '\n' {
            line_start = true;
        } else if !c.is_whitespace() {
            line_start = false;
        }
        r.pos += 1;
    }

    let mut out = ParsedReply {
        prose: prose.trim().to_string(),
        ..ParsedReply::default()
    };
    let mut attempts: Vec<Sexp> = Vec::new();
    for form in forms {
        match form {
            Sexp::List(items) if matches!(items.first(), Some(Sexp::List(_))) => {
                for item in items {
                    match item {
                        Sexp::List(_) => attempts.push(item),
                        other => out.errors.push(format!(
                            "`{}` inside the tuple of calls is not a call; write each call as (tool \"argument\")",
                            other.render()
                        )),
                    }
                }
            }
            Sexp::List(items) if items.is_empty() => out
                .errors
                .push("`()` is an empty call; write (tool \"argument\")".into()),
            other => attempts.push(other),
        }
    }
    if attempts.len() > MAX_CALLS {
        let skipped: Vec<String> = attempts[MAX_CALLS..].iter().map(Sexp::render).collect();
        out.errors.push(format!(
            "only {MAX_CALLS} calls are run per reply; these were not run: {}",
            skipped.join(" ")
        ));
        attempts.truncate(MAX_CALLS);
    }
    for (i, form) in attempts.into_iter().enumerate() {
        match to_call(&form, specs) {
            Ok((name, arguments)) => out.calls.push(ToolCall {
                id: format!("text-{}", i + 1),
                name,
                arguments,
            }),
            Err(e) => out.errors.push(e.to_string()),
        }
    }
    out
}

/// Why one call in a reply could not be run, worded for the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum CallError {
    #[error("`{form}` is not a call")]
    NotACall { form: String },
    #[error("`{form}` does not start with a tool name; write (tool \"argument\")")]
    NoToolName { form: String },
    #[error("unknown tool `{name}` in `{form}`; the tools are: {tools}")]
    UnknownTool {
        name: String,
        form: String,
        tools: String,
    },
    #[error(
        "in the call to `{name}`, the string starting \"{start}\" is never closed; end it with a double quote"
    )]
    Unterminated { name: String, start: String },
    #[error("in `{form}`: expected a :name before {got}")]
    NotAKeyword { form: String, got: String },
    #[error("`{name}` has no argument `{key}`; it takes: {takes}")]
    NoSuchArgument {
        name: String,
        key: String,
        takes: String,
    },
    #[error("in `{form}`: :{key} has no value")]
    NoValue { form: String, key: String },
    #[error(
        "`{name}` takes at most {max} argument{} ({params}), got {got} in `{form}`",
        plural(*.max)
    )]
    TooMany {
        name: String,
        max: usize,
        params: String,
        got: usize,
        form: String,
    },
    #[error(
        "`{name}` needs {needed} argument{} ({params}), got {got} in `{form}`: missing {missing}",
        plural(*.needed)
    )]
    Missing {
        name: String,
        needed: usize,
        params: String,
        got: usize,
        form: String,
        missing: String,
    },
    #[error("argument `{param}` of `{tool}` must be {} {ty}, got {got}", article(.ty))]
    WrongType {
        param: String,
        tool: String,
        ty: String,
        got: String,
    },
}

/// The `s` of "arguments" when there are not exactly one.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// "an" before a vowel, else "a".
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn to_call(form: &Sexp, specs: &[ToolSpec]) -> Result<(String, Value), CallError> {
    let Sexp::List(items) = form else {
        return Err(CallError::NotACall {
            form: form.render(),
        });
    };
    let Some(Sexp::Atom(name)) = items.first() else {
        return Err(CallError::NoToolName {
            form: form.render(),
        });
    };
    let Some(spec) = specs.iter().find(|s| &s.name == name) else {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        return Err(CallError::UnknownTool {
            name: name.clone(),
            form: form.render(),
            tools: names.join(", "),
        });
    };
    if let Some(Sexp::Unterminated(u)) = items.iter().find(|i| matches!(i, Sexp::Unterminated(_))) {
        let start: String = u.chars().take(20).collect();
        return Err(CallError::Unterminated {
            name: name.clone(),
            start,
        });
    }
    let order = parameter_order(spec);
    let args = &items[1..];
    let mut obj = Map::new();
    let keyword_form = args
        .iter()
        .any(|a| matches!(a, Sexp::Atom(w) if w.starts_with(':')));
    if keyword_form {
        let mut it = args.iter();
        while let Some(k) = it.next() {
            let Sexp::Atom(k) = k else {
                return Err(CallError::NotAKeyword {
                    form: form.render(),
                    got: k.render(),
                });
            };
            let key = k.trim_start_matches(':');
            let Some((_, ty, _)) = order.iter().find(|(n, _, _)| n == key) else {
                return Err(CallError::NoSuchArgument {
                    name: name.clone(),
                    key: key.to_string(),
                    takes: order
                        .iter()
                        .map(|p| p.0.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            let Some(v) = it.next() else {
                return Err(CallError::NoValue {
                    form: form.render(),
                    key: key.to_string(),
                });
            };
            obj.insert(key.to_string(), typed(name, key, ty, v)?);
        }
    } else {
        if args.len() > order.len() {
            return Err(CallError::TooMany {
                name: name.clone(),
                max: order.len(),
                params: order
                    .iter()
                    .map(|p| p.0.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                got: args.len(),
                form: form.render(),
            });
        }
        for ((pname, ty, _), v) in order.iter().zip(args) {
            obj.insert(pname.clone(), typed(name, pname, ty, v)?);
        }
    }
    let missing: Vec<&str> = order
        .iter()
        .filter(|(n, _, req)| *req && !obj.contains_key(n))
        .map(|(n, _, _)| n.as_str())
        .collect();
    if !missing.is_empty() {
        let needed = order.iter().filter(|p| p.2).count();
        return Err(CallError::Missing {
            name: name.clone(),
            needed,
            params: order
                .iter()
                .filter(|p| p.2)
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            got: args.len(),
            form: form.render(),
            missing: missing.join(", "),
        });
    }
    Ok((name.clone(), Value::Object(obj)))
}

/// Convert one argument to the schema's type. Quoted numbers and booleans
/// are accepted: models quote everything.
fn typed(tool: &str, param: &str, ty: &str, v: &Sexp) -> Result<Value, CallError> {
    let fail = || CallError::WrongType {
        param: param.to_string(),
        tool: tool.to_string(),
        ty: ty.to_string(),
        got: v.render(),
    };
    let text = match v {
        Sexp::Str(s) | Sexp::Atom(s) => Some(s.as_str()),
        Sexp::List(_) | Sexp::Unterminated(_) => None,
    };
    match ty {
        "string" => match v {
            Sexp::List(_) | Sexp::Unterminated(_) => Err(fail()),
            Sexp::Str(s) | Sexp::Atom(s) => Ok(Value::String(s.clone())),
        },
        "integer" => text
            .and_then(|t| t.trim().parse::<i64>().ok())
            .map(Value::from)
            .ok_or_else(fail),
        "number" => text
            .and_then(|t| t.trim().parse::<f64>().ok())
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(fail),
        "boolean" => match text.map(|t| t.trim().to_ascii_lowercase()).as_deref() {
            Some("true" | "t" | "yes") => Ok(Value::Bool(true)),
            Some("false" | "nil" | "no") => Ok(Value::Bool(false)),
            _ => Err(fail()),
        },
        "array" => match v {
            Sexp::List(items) => Ok(Value::Array(items.iter().map(plain).collect())),
            Sexp::Str(s) => match serde_json::from_str::<Value>(s) {
                Ok(a @ Value::Array(_)) => Ok(a),
                _ => Err(fail()),
            },
            Sexp::Atom(_) | Sexp::Unterminated(_) => Err(fail()),
        },
        "object" => match text.and_then(|t| serde_json::from_str::<Value>(t).ok()) {
            Some(o @ Value::Object(_)) => Ok(o),
            _ => Err(fail()),
        },
        _ => Ok(plain(v)),
    }
}

/// An element of a list argument: strings stay strings, bare numbers and
/// booleans become JSON numbers and booleans.
fn plain(v: &Sexp) -> Value {
    match v {
        Sexp::Str(s) | Sexp::Unterminated(s) => Value::String(s.clone()),
        Sexp::Atom(a) => serde_json::from_str::<Value>(a)
            .ok()
            .filter(|v| v.is_number() || v.is_boolean())
            .unwrap_or_else(|| Value::String(a.clone())),
        Sexp::List(items) => Value::Array(items.iter().map(plain).collect()),
    }
}

/// Show a call the way the model would write it, arguments by name.
pub fn render_call(call: &ToolCall) -> String {
    let mut s = format!("({}", call.name);
    if let Some(obj) = call.arguments.as_object() {
        for (k, v) in obj {
            s.push_str(&format!(" :{k} {v}"));
        }
    }
    s.push(')');
    s
}

/// The one message that feeds every result (and every problem) of a reply
/// back to the model.
pub fn format_results(results: &[(ToolCall, String, bool)], errors: &[String]) -> String {
    let mut s = String::new();
    if !results.is_empty() {
        s.push_str("Results of your tool calls:\n");
        for (i, (call, output, is_error)) in results.iter().enumerate() {
            let status = if *is_error { "failed" } else { "ok" };
            s.push_str(&format!(
                "\n[{}] {} → {status}\n{}\n",
                i + 1,
                render_call(call),
                output.trim_end()
            ));
        }
    }
    if !errors.is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str("Problems with your reply (correct them and call again):\n");
        for e in errors {
            s.push_str(&format!("- {e}\n"));
        }
    }
    s
}

/// Rewrite a request for a model without function calling: the tool belt
/// joins the system prompt, no native tools are sent, the assistant's calls
/// stay as the text it wrote, and each round's tool results (plus any
/// problems) become one user message built by [`format_results`].
pub fn to_text_request(request: &crate::llm::ChatRequest) -> crate::llm::ChatRequest {
    use crate::llm::{ChatMessage, Role};

    let mut messages: Vec<ChatMessage> = Vec::with_capacity(request.messages.len() + 1);
    let belt = tool_belt(&request.tools);
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut results: Vec<(ToolCall, String, bool)> = Vec::new();
    // The images of those results, carried by the user message they become.
    let mut result_images: Vec<crate::llm::Image> = Vec::new();
    let flush = |messages: &mut Vec<ChatMessage>,
                 results: &mut Vec<(ToolCall, String, bool)>,
                 images: &mut Vec<crate::llm::Image>| {
        if !results.is_empty() {
            messages.push(
                ChatMessage::user(format_results(results, &[])).with_images(std::mem::take(images)),
            );
            results.clear();
        }
    };
    for m in &request.messages {
        match m.role {
            Role::System => {
                let mut text = m.content.clone();
                if !request.tools.is_empty() {
                    text.push_str("\n\n");
                    text.push_str(&belt);
                }
                messages.push(ChatMessage::system(text));
            }
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let call = calls
                    .iter()
                    .find(|c| c.id == id)
                    .cloned()
                    .unwrap_or(ToolCall {
                        id,
                        name: "tool".into(),
                        arguments: Value::Null,
                    });
                results.push((call, m.content.clone(), m.is_error));
                result_images.extend(m.images.iter().cloned());
            }
            Role::Assistant => {
                flush(&mut messages, &mut results, &mut result_images);
                calls = m.tool_calls.clone();
                messages.push(ChatMessage::assistant(m.content.clone(), Vec::new()));
            }
            Role::User => {
                flush(&mut messages, &mut results, &mut result_images);
                // Two user messages in a row (results, then problems) read
                // better as one.
                match messages.last_mut() {
                    Some(last) if last.role == Role::User => {
                        last.content.push_str("\n\n");
                        last.content.push_str(&m.content);
                        last.images.extend(m.images.iter().cloned());
                    }
                    _ => messages.push(m.clone()),
                }
            }
        }
    }
    flush(&mut messages, &mut results, &mut result_images);
    crate::llm::ChatRequest {
        messages,
        tools: Vec::new(),
        max_tokens: request.max_tokens,
        temperature: request.temperature,
    }
}

#[cfg(test)]
mod text_request_tests {
    use super::*;
    use crate::llm::{ChatMessage, ChatRequest, Role};
    use serde_json::json;

    #[test]
    fn tools_move_into_the_prompt_and_results_become_one_message() {
        let spec = ToolSpec {
            name: "read_file".into(),
            description: "Read a file.".into(),
            parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        };
        let call = |id: &str, p: &str| ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({"path": p}),
        };
        let req = ChatRequest {
            messages: vec![
                ChatMessage::system("base"),
                ChatMessage::user("read a and b"),
                ChatMessage::assistant(
                    "(read_file \"a\") (read_file \"b\")",
                    vec![call("t1", "a"), call("t2", "b")],
                ),
                ChatMessage::tool_result("t1", "AAA", false),
                ChatMessage::tool_result("t2", "no such file", true),
                ChatMessage::user(format_results(&[], &["unknown tool `x`".into()])),
            ],
            tools: vec![spec],
            max_tokens: None,
            temperature: None,
        };
        let out = to_text_request(&req);
        assert!(out.tools.is_empty());
        let roles: Vec<Role> = out.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User]
        );
        assert!(out.messages[0].content.starts_with("base\n\n## Tools"));
        assert!(out.messages[0].content.contains("read_file"));
        assert!(out.messages[2].tool_calls.is_empty());
        let last = &out.messages[3].content;
        assert!(
            last.contains("[1] (read_file :path \"a\") → ok\nAAA"),
            "{last}"
        );
        assert!(
            last.contains("[2] (read_file :path \"b\") → failed\nno such file"),
            "{last}"
        );
        assert!(last.contains("- unknown tool `x`"), "{last}");
    }
}

#[cfg(test)]
mod call_error_tests {
    use super::*;

    /// The model reads these messages: their wording is what the enum
    /// must keep.
    #[test]
    fn call_errors_keep_their_wording() {
        let cases = [
            (
                CallError::NotACall { form: "x".into() },
                "`x` is not a call",
            ),
            (
                CallError::NoToolName {
                    form: "(\"a\")".into(),
                },
                "`(\"a\")` does not start with a tool name; write (tool \"argument\")",
            ),
            (
                CallError::NotAKeyword {
                    form: "(f \"a\" :b 1)".into(),
                    got: "\"a\"".into(),
                },
                "in `(f \"a\" :b 1)`: expected a :name before \"a\"",
            ),
            (
                CallError::NoValue {
                    form: "(f :path)".into(),
                    key: "path".into(),
                },
                "in `(f :path)`: :path has no value",
            ),
            (
                CallError::TooMany {
                    name: "f".into(),
                    max: 2,
                    params: "a b".into(),
                    got: 3,
                    form: "(f 1 2 3)".into(),
                },
                "`f` takes at most 2 arguments (a b), got 3 in `(f 1 2 3)`",
            ),
            (
                CallError::Missing {
                    name: "f".into(),
                    needed: 1,
                    params: "a".into(),
                    got: 0,
                    form: "(f)".into(),
                    missing: "a".into(),
                },
                "`f` needs 1 argument (a), got 0 in `(f)`: missing a",
            ),
            (
                CallError::WrongType {
                    param: "p".into(),
                    tool: "f".into(),
                    ty: "array".into(),
                    got: "1".into(),
                },
                "argument `p` of `f` must be an array, got 1",
            ),
            (
                CallError::WrongType {
                    param: "p".into(),
                    tool: "f".into(),
                    ty: "number".into(),
                    got: "x".into(),
                },
                "argument `p` of `f` must be a number, got x",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
