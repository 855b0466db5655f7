//! Text that reaches a terminal or a log: the launcher's own lines start at column 0
//! (`error[…]:`, `hint:`, `WARN infera-exec:`), so a value it echoes — a variable, a path,
//! an argument — must not start one, nor move the cursor. JSON output needs none of this
//! (serde_json escapes every control character).

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with control characters other than newline and tab written as escapes (`\u{1b}`,
/// `\r`), and every line after the first indented by two spaces unless it already is: an
/// echoed `\nerror[x]: …` reads as a continuation, never as a line of the launcher's own.
pub fn safe(s: &str) -> Cow<'_, str> {
    let clean = !s.chars().any(|c| c.is_control() && c != '\t' && c != '\n')
        && !s.split('\n').skip(1).any(|l| !l.is_empty() && !l.starts_with("  "));
    if clean {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.is_empty() && !line.starts_with("  ") {
                out.push_str("  ");
            }
        }
        for c in line.chars() {
            match c {
                '\t' => out.push(c),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
    }
    Cow::Owned(out)
}

/// Every control character, newline included, as an escape: for a value quoted inside a
/// line of someone else's format (clap's `invalid value '…'`).
pub fn escape_all(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_cannot_forge_lines_or_move_the_cursor() {
        assert!(matches!(safe("plain `value` and a\ttab"), Cow::Borrowed(_)));
        assert!(matches!(safe("a list:\n  one\n  two\n"), Cow::Borrowed(_)));
        assert_eq!(safe("vlm\nerror[ok]: forged\nhint: x"), "vlm\n  error[ok]: forged\n  hint: x");
        assert_eq!(safe("a\r\u{1b}[2Kb\u{7f}"), "a\\r\\u{1b}[2Kb\\u{7f}");
        assert_eq!(safe("end\n"), "end\n");
        assert_eq!(escape_all("a\nb\u{1b}"), "a\\nb\\u{1b}");
    }
}
