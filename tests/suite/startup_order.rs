//! The start-up layout's list, `link/startup.order` (build.rs hands it to
//! the linker). The linker skips a name it does not find without a word,
//! so a damaged list — a merge conflict, a hand edit, a tracer's
//! placeholder — would only cost start-up speed, silently: the list must
//! hold symbol names only, each once, under the header its script writes.

use std::collections::HashSet;

#[test]
fn the_startup_order_lists_symbol_names_once() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("link/startup.order");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("# Written by scripts/startup-order.sh"),
        "{} lost its header",
        path.display()
    );
    let symbol = regex::Regex::new(r"^[A-Za-z_][A-Za-z0-9_$.]*$").unwrap();
    let mut seen = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        assert!(
            symbol.is_match(line),
            "{}:{}: not a symbol name: {line:?}",
            path.display(),
            n + 1
        );
        assert!(
            seen.insert(line),
            "{}:{}: listed twice: {line}",
            path.display(),
            n + 1
        );
    }
    // serve's start alone runs about a thousand of the binary's functions.
    assert!(seen.len() >= 500, "only {} functions listed", seen.len());
}
