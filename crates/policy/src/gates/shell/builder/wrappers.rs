//! Wrapper commands stripped to the program they run: `sudo`, `doas`,
//! `env NAME=value`, `nice -n 5`, `timeout 10`, `nohup`, `flock FILE`,
//! `su -c CMD`, ... Every gate judges `sudo env X=1 rm -rf /` as `rm`, so
//! each wrapper's own options (and which of them take a value) are known
//! here, in one list.

use crate::gates::shell::commands::basename;

pub(super) fn split_assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let name = name.strip_suffix('+').unwrap_or(name);
    let valid = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then(|| (name.to_string(), value.to_string()))
}

/// Strip `sudo`, `doas`, `env`, `command`, `builtin`, `exec`, `nice`,
/// `nohup`, `timeout`, `busybox`, ... with their own options.
pub(super) fn strip_wrappers(
    mut words: Vec<String>,
    assignments: &mut Vec<(String, String)>,
) -> (Vec<String>, Vec<String>) {
    let mut wrappers = Vec::new();
    while let Some(first) = words.first() {
        let name = basename(first).to_string();
        // Options of each wrapper that take a value.
        let valued: &[&str] = match name.as_str() {
            "sudo" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"],
            "doas" => &["-u", "-C"],
            "env" => &["-u", "-C", "-S", "--unset", "--chdir"],
            "nice" => &["-n", "--adjustment"],
            "ionice" => &["-c", "-n", "-p", "-P", "-u"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "stdbuf" => &["-i", "-o", "-e"],
            "chrt" | "taskset" => &[],
            "command" | "builtin" | "exec" | "nohup" | "busybox" | "setsid" | "time"
            | "unbuffer" | "caffeinate" | "strace" | "ltrace" | "fakeroot" | "torsocks"
            | "proxychains" | "proxychains4" | "su" | "runuser" | "xvfb-run" | "flock" => &[],
            _ => break,
        };
        if name == "command" && words.get(1).is_some_and(|w| w == "-v" || w == "-V") {
            break;
        }
        if name == "su" || name == "runuser" {
            // `su -c CMD [user]`: turn into `sh -c CMD`.
            if let Some(i) = words.iter().position(|w| w == "-c" || w == "--command") {
                if let Some(cmd) = words.get(i + 1).cloned() {
                    wrappers.push(name);
                    return (wrappers, vec!["sh".into(), "-c".into(), cmd]);
                }
            }
            break;
        }
        if name == "flock" {
            // `flock FILE CMD...`
            wrappers.push(name);
            words.drain(..2.min(words.len()));
            continue;
        }
        wrappers.push(name.clone());
        words.remove(0);
        // Options of the wrapper.
        while let Some(w) = words.first() {
            if w == "--" {
                words.remove(0);
                break;
            }
            if name == "env" {
                if let Some((k, v)) = split_assignment(w) {
                    assignments.push((k, v));
                    words.remove(0);
                    continue;
                }
            }
            if w.starts_with('-') && w.len() > 1 {
                let takes_value = valued.contains(&w.as_str());
                words.remove(0);
                if takes_value && !words.is_empty() {
                    words.remove(0);
                }
                continue;
            }
            break;
        }
        if name == "timeout" && !words.is_empty() {
            words.remove(0); // the duration
        }
        if (name == "chrt" || name == "taskset")
            && words
                .first()
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_hexdigit() || c == 'x'))
        {
            // `chrt 10 cmd`, `taskset 0x1 cmd`: a leading number or mask.
            words.remove(0);
        }
        while let Some(first) = words.first() {
            match split_assignment(first) {
                Some(kv) => {
                    assignments.push(kv);
                    words.remove(0);
                }
                None => break,
            }
        }
    }
    if words.is_empty() {
        // `env` or `sudo` alone: the wrapper is the program.
        if let Some(last) = wrappers.pop() {
            words.push(last);
        }
    }
    (wrappers, words)
}
