//! The text tool protocol against the kind of output small models really
//! produce: prose around calls, code fences, missing parentheses, too many
//! calls, unknown tools, wrong arity and quoted numbers.

use passepartout::llm::text_protocol::{format_results, parse_calls, tool_belt};
use passepartout::llm::{ToolCall, ToolSpec};
use serde_json::json;

fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_file".into(),
            description: "Read a file.".into(),
            parameters: json!({
                "type": "object",
                "properties": { "path": { "type": "string", "description": "File path." } },
                "required": ["path"]
            }),
        },
        ToolSpec {
            name: "write_file".into(),
            description: "Write a file.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string" },
                    "content": { "type": "string" }
                },
                "required": ["path", "content"]
            }),
        },
        ToolSpec {
            name: "git_log".into(),
            description: "Show commits.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "count": { "type": "integer" },
                    "all": { "type": "boolean" }
                },
                "required": []
            }),
        },
        ToolSpec {
            name: "remember".into(),
            description: "Save a note.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "title": { "type": "string" },
                    "text": { "type": "string" },
                    "tags": { "type": "array" }
                },
                "required": ["title", "text"]
            }),
        },
    ]
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args,
    }
}

#[test]
fn one_call_per_line_with_prose_around() {
    let reply = "I'll look at the manifest first.\n(read_file \"Cargo.toml\")\nThen I'll decide.";
    let p = parse_calls(reply, &specs());
    assert_eq!(
        p.calls,
        vec![call("text-1", "read_file", json!({ "path": "Cargo.toml" }))]
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert_eq!(
        p.prose,
        "I'll look at the manifest first.\n\nThen I'll decide."
    );
}

#[test]
fn a_tuple_inside_a_code_fence() {
    let reply = "```lisp\n((read_file \"a.txt\")\n (write_file \"b.txt\" \"line one\\nline \\\"two\\\"\"))\n```\n";
    let p = parse_calls(reply, &specs());
    assert_eq!(
        p.calls,
        vec![
            call("text-1", "read_file", json!({ "path": "a.txt" })),
            call(
                "text-2",
                "write_file",
                json!({ "path": "b.txt", "content": "line one\nline \"two\"" })
            ),
        ]
    );
    assert!(p.errors.is_empty());
    assert_eq!(p.prose, "");
}

#[test]
fn missing_closing_parentheses_are_repaired() {
    // The first call is never closed; the tuple is never closed either.
    let p = parse_calls("(read_file \"a.txt\"\n(git_log 3)", &specs());
    assert_eq!(
        p.calls,
        vec![
            call("text-1", "read_file", json!({ "path": "a.txt" })),
            call("text-2", "git_log", json!({ "count": 3 })),
        ]
    );
    let p = parse_calls("((read_file \"a\") (read_file \"b\"", &specs());
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[1].arguments, json!({ "path": "b" }));
    assert!(p.errors.is_empty());
}

#[test]
fn six_calls_run_five_and_report_the_sixth() {
    let reply = "((read_file \"1\") (read_file \"2\") (read_file \"3\") (read_file \"4\") (read_file \"5\") (read_file \"6\"))";
    let p = parse_calls(reply, &specs());
    assert_eq!(p.calls.len(), 5);
    assert_eq!(p.calls[4].arguments, json!({ "path": "5" }));
    assert_eq!(
        p.errors,
        vec!["only 5 calls are run per reply; these were not run: (read_file \"6\")".to_string()]
    );
}

#[test]
fn unknown_tool_and_wrong_arity_are_named_precisely() {
    let reply = "(frobnicate \"x\")\n(read_file \"a\" \"b\")\n(write_file \"only-path\")";
    let p = parse_calls(reply, &specs());
    assert!(p.calls.is_empty());
    assert_eq!(
        p.errors,
        vec![
            "unknown tool `frobnicate` in `(frobnicate \"x\")`; the tools are: read_file, write_file, git_log, remember".to_string(),
            "`read_file` takes at most 1 argument (path), got 2 in `(read_file \"a\" \"b\")`".to_string(),
            "`write_file` needs 2 arguments (path content), got 1 in `(write_file \"only-path\")`: missing content".to_string(),
        ]
    );
}

#[test]
fn arguments_are_typed_by_the_schema() {
    let p = parse_calls(
        "((git_log \"10\" \"true\") (git_log :all nil) (remember \"Coffee\" \"Black, no sugar\" (\"prefs\" \"food\")))",
        &specs(),
    );
    assert_eq!(
        p.calls,
        vec![
            // Positional order: required first (none), then the optional ones.
            call("text-1", "git_log", json!({ "all": true, "count": 10 })),
            call("text-2", "git_log", json!({ "all": false })),
            call(
                "text-3",
                "remember",
                json!({ "title": "Coffee", "text": "Black, no sugar", "tags": ["prefs", "food"] })
            ),
        ]
    );
    let p = parse_calls("(git_log 3 \"maybe\")", &specs());
    assert!(p.calls.is_empty());
    assert_eq!(
        p.errors,
        vec!["argument `all` of `git_log` must be a boolean, got \"maybe\"".to_string()]
    );
    let p = parse_calls("(git_log :count \"ten\")", &specs());
    assert_eq!(
        p.errors,
        vec!["argument `count` of `git_log` must be an integer, got \"ten\"".to_string()]
    );
}

#[test]
fn prose_parentheses_are_not_calls() {
    let p = parse_calls(
        "The build failed (see the log above), so nothing changed.\n(Also, the tests were skipped.)\n(1) rerun them\n(a) or skip them\n(note) that's all",
        &specs(),
    );
    assert!(p.calls.is_empty());
    assert!(p.errors.is_empty(), "{:?}", p.errors);
}

#[test]
fn keyword_arguments_and_unknown_keywords() {
    let p = parse_calls("(write_file :content \"x\" :path \"a.txt\")", &specs());
    assert_eq!(
        p.calls[0].arguments,
        json!({ "path": "a.txt", "content": "x" })
    );
    let p = parse_calls("(read_file :file \"a.txt\")", &specs());
    assert_eq!(
        p.errors,
        vec!["`read_file` has no argument `file`; it takes: path".to_string()]
    );
}

#[test]
fn the_tool_belt_lists_signatures_in_positional_order() {
    let belt = tool_belt(&specs());
    assert!(
        belt.contains(
            "\n(read_file path)\n  Read a file.\n  - path (string, required): File path.\n"
        ),
        "{belt}"
    );
    assert!(belt.contains("\n(write_file path content)\n"));
    assert!(belt.contains("\n(git_log [count] [all])\n"));
    assert!(belt.contains("\n(remember title text [tags])\n"));
}

#[test]
fn results_and_errors_come_back_in_one_message() {
    let results = vec![
        (
            call("text-1", "read_file", json!({ "path": "a.txt" })),
            "hello\n".to_string(),
            false,
        ),
        (
            call("text-2", "git_log", json!({ "count": 2 })),
            "not a git repository".to_string(),
            true,
        ),
    ];
    let msg = format_results(&results, &["unknown tool `frob`".to_string()]);
    assert_eq!(
        msg,
        "Results of your tool calls:\n\
         \n[1] (read_file :path \"a.txt\") → ok\nhello\n\
         \n[2] (git_log :count 2) → failed\nnot a git repository\n\
         \nProblems with your reply (correct them and call again):\n- unknown tool `frob`\n"
    );
}

#[test]
fn an_unclosed_string_is_reported_not_guessed() {
    let p = parse_calls("(read_file \"src/main.rs)\nI will read it.", &specs());
    assert!(p.calls.is_empty());
    assert_eq!(
        p.errors,
        vec!["in the call to `read_file`, the string starting \"src/main.rs)\nI will \" is never closed; end it with a double quote".to_string()]
    );
}
