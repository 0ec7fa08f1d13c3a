//! What a flight plan shows of the person's secret values, and the way
//! back (issue 38).
//!
//! The plan's record (`<id>.json`, private to the person) keeps the action
//! exactly as proposed: approving it must run what was judged. What people
//! and clients read — the Org rendering, the `org` an editor is sent, the
//! plan printed by `run` and `plans show` — has each of the person's known
//! secret values, in any form, replaced by `[redacted: value of X from F]`,
//! as tool output is for the model.
//!
//! The Org action block is also what a person edits, so a block read back
//! holds those labels. An unedited block stands for the proposal itself;
//! in an edited one each label is put back to the value it stood for in
//! the proposal. A label the proposal cannot account for any more (the
//! secret file changed since the plan was shown, or two values share it)
//! refuses the edit instead of running the label's text.

use std::collections::HashMap;

use serde_json::Value;

use crate::action::Action;
use crate::gates::known_values::ValueMatcher;
use crate::gates::secrets::{redact_values, value_redactions};

use super::parse::PlanParseError;

/// How every label begins, and what shows an edited block still holds one.
const LABEL_START: &str = "[redacted: value of ";

/// `text` as a person may read it: the known values hidden.
pub fn hide(text: &str, values: Option<&ValueMatcher>) -> String {
    match values {
        Some(values) if !values.is_empty() => redact_values(text, values),
        _ => text.to_string(),
    }
}

/// Every string inside `value` as a person may read it.
pub fn hide_in_json(value: &mut Value, values: &ValueMatcher) {
    if values.is_empty() {
        return;
    }
    for_each_string_mut(value, &mut |text| *text = redact_values(text, values));
}

/// The edited action with each label put back to the value it stood for
/// in `original`.
pub fn restore(
    edited: Action,
    original: &Action,
    values: &ValueMatcher,
) -> Result<Action, PlanParseError> {
    let mut edited_value = serde_json::to_value(&edited).map_err(internal)?;
    if !holds_label(&edited_value) {
        return Ok(edited);
    }
    // label → the value it stands for (None: two different values).
    let mut meaning: HashMap<String, Option<String>> = HashMap::new();
    let original_value = serde_json::to_value(original).map_err(internal)?;
    for_each_string(&original_value, &mut |text| {
        for (range, label) in value_redactions(text, values) {
            let value = text[range].to_string();
            meaning
                .entry(label)
                .and_modify(|known| {
                    if known.as_deref() != Some(value.as_str()) {
                        *known = None;
                    }
                })
                .or_insert(Some(value));
        }
    });
    let literal = labels_in(&original_value);
    let mut unresolved: Option<String> = None;
    for_each_string_mut(&mut edited_value, &mut |text| {
        for (label, value) in &meaning {
            if let Some(value) = value {
                if text.contains(label.as_str()) {
                    *text = text.replace(label.as_str(), value);
                }
            }
        }
        for label in labels_of(text) {
            if !literal.contains(&label) && unresolved.is_none() {
                unresolved = Some(label);
            }
        }
    });
    if let Some(label) = unresolved {
        return Err(PlanParseError::UnknownRedaction { label });
    }
    serde_json::from_value(edited_value).map_err(internal)
}

fn internal(e: serde_json::Error) -> PlanParseError {
    PlanParseError::Unrestorable(e.to_string())
}

fn holds_label(value: &Value) -> bool {
    let mut found = false;
    for_each_string(value, &mut |text| found |= text.contains(LABEL_START));
    found
}

/// Every label written out in the strings of `value`.
fn labels_in(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for_each_string(value, &mut |text| out.extend(labels_of(text)));
    out
}

/// Every `[redacted: value of …]` in `text`.
fn labels_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(LABEL_START) {
        let tail = &rest[start..];
        match tail.find(']') {
            Some(end) => {
                out.push(tail[..=end].to_string());
                rest = &tail[end + 1..];
            }
            None => {
                out.push(tail.to_string());
                break;
            }
        }
    }
    out
}

fn for_each_string(value: &Value, f: &mut dyn FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| for_each_string(v, f)),
        Value::Object(map) => map.values().for_each(|v| for_each_string(v, f)),
        _ => {}
    }
}

fn for_each_string_mut(value: &mut Value, f: &mut dyn FnMut(&mut String)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|v| for_each_string_mut(v, f)),
        Value::Object(map) => map.values_mut().for_each(|v| for_each_string_mut(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Effect;
    use crate::gates::known_values::KnownValue;

    const SECRET: &str = "s3cretPw-7Hq2Lx9Wp";

    fn values() -> ValueMatcher {
        ValueMatcher::new(&[KnownValue::new(SECRET, "value of DB_PASSWORD from .env")])
    }

    fn run(script: &str) -> Action {
        Action::shell_for_tests(script)
    }

    fn script(action: &Action) -> &str {
        match &action.effect {
            Effect::Run { script, .. } => script,
            _ => "",
        }
    }

    #[test]
    fn what_is_shown_hides_the_value_in_any_form() {
        let encoded = crate::gates::known_values::base64(SECRET.as_bytes());
        let text = format!("PGPASSWORD={SECRET} psql\n{encoded}");
        let shown = hide(&text, Some(&values()));
        assert!(!shown.contains(SECRET), "{shown}");
        assert!(
            shown.contains("[redacted: value of DB_PASSWORD from .env]"),
            "{shown}"
        );
        assert_eq!(hide(&text, None), text);
    }

    #[test]
    fn every_string_of_a_permission_request_is_hidden() {
        let mut request = serde_json::json!({
            "toolCall": { "title": format!("psql -W {SECRET}"), "content": [{ "text": SECRET }] },
            "options": [{ "name": "Allow once" }]
        });
        hide_in_json(&mut request, &values());
        let text = request.to_string();
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains("Allow once"), "{text}");
    }

    #[test]
    fn an_edited_block_gets_the_values_back_where_the_labels_were() {
        let original = run(&format!("PGPASSWORD={SECRET} psql -c 'select 1'"));
        let shown = hide(script(&original), Some(&values()));
        let edited = run(&shown.replace("select 1", "select 2"));
        let back = restore(edited, &original, &values()).expect("restores");
        assert_eq!(
            script(&back),
            format!("PGPASSWORD={SECRET} psql -c 'select 2'")
        );
    }

    #[test]
    fn a_label_the_proposal_cannot_account_for_is_refused() {
        let original = run("psql -c 'select 1'");
        let edited = run("PGPASSWORD='[redacted: value of DB_PASSWORD from .env]' psql");
        let err = restore(edited, &original, &values()).expect_err("refused");
        assert!(err.to_string().contains("DB_PASSWORD"), "{err}");
    }

    #[test]
    fn a_label_the_model_wrote_itself_stays_text() {
        // The model cannot make a label fetch a value it never had.
        let original = run("echo '[redacted: value of DB_PASSWORD from .env]'");
        let edited = run("echo '[redacted: value of DB_PASSWORD from .env]' # ok");
        let back = restore(edited.clone(), &original, &values()).expect("kept");
        assert_eq!(back, edited);
        assert!(!script(&back).contains(SECRET));
    }
}
