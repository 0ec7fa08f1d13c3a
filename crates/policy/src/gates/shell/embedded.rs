//! Shell text inside other languages: the strings Python, Perl, Ruby,
//! Node and Emacs Lisp hand to a shell.

use super::static_regex;

/// Shell strings that a Python script hands to a shell: the first string
/// argument of `os.system`, `os.popen`, `subprocess.*(..., shell=True)`, and
/// list-form `subprocess.run(["rm", "-rf", "/"])` re-joined with quoting.
pub fn python_shell_strings(code: &str) -> Vec<String> {
    static CALL: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    static LIST_ITEM: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let call = CALL.get_or_init(|| {
        static_regex(
            r#"(?s)\b(?:os\.system|os\.popen|os\.exec\w*|os\.spawn\w*|subprocess\.\w+|commands\.getoutput|pty\.spawn)\s*\(\s*(?:r|b|f|rb|br)?(?:"""(.*?)"""|'''(.*?)'''|"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|\[([^\]]*)\])"#,
        )
    });
    let item = LIST_ITEM.get_or_init(|| static_regex(r#""((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'"#));
    let mut out = Vec::new();
    for cap in call.captures_iter(code) {
        if let Some(list) = cap.get(5) {
            let words: Vec<String> = item
                .captures_iter(list.as_str())
                .filter_map(|c| c.get(1).or_else(|| c.get(2)))
                .map(|m| shell_quote(&python_unescape(m.as_str())))
                .collect();
            if !words.is_empty() {
                out.push(words.join(" "));
            }
        } else if let Some(m) = cap.get(1).or(cap.get(2)).or(cap.get(3)).or(cap.get(4)) {
            out.push(python_unescape(m.as_str()));
        }
    }
    out
}

/// Shell strings in Perl, Ruby, Node, PHP or awk code: the string argument
/// of `system`, `exec`, `execSync`, `popen`, `shell_exec`, `passthru`, and
/// backtick strings.
pub fn code_shell_strings(code: &str) -> Vec<String> {
    static CALL: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let call = CALL.get_or_init(|| {
        static_regex(
            r#"(?:\b(?:system|exec|execSync|spawnSync|popen|shell_exec|passthru|os\.execute|io\.popen)\s*\(?\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')|`([^`]+)`)"#,
        )
    });
    call.captures_iter(code)
        .filter_map(|c| c.get(1).or(c.get(2)).or(c.get(3)))
        .map(|m| m.as_str().replace("\\\"", "\"").replace("\\'", "'"))
        .collect()
}

/// Shell strings inside Emacs Lisp: `(shell-command "...")`,
/// `(shell-command-to-string "...")`, `(call-process-shell-command "...")`,
/// `(async-shell-command "...")`.
pub fn elisp_shell_strings(code: &str) -> Vec<String> {
    static CALL: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let call = CALL.get_or_init(|| {
        static_regex(
            r#"\((?:shell-command|shell-command-to-string|async-shell-command|call-process-shell-command|start-process-shell-command)\s+(?:"[^"]*"\s+(?:nil\s+)?)?"((?:[^"\\]|\\.)*)""#,
        )
    });
    call.captures_iter(code)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str().replace("\\\"", "\"").replace("\\\\", "\\"))
        .collect()
}

fn python_unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('x') => {
                let hex: String = (0..2).filter_map(|_| chars.next()).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(b) => out.push(char::from(b)),
                    Err(_) => out.push_str(&hex),
                }
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

pub(crate) fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,~".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
