//! clap's usage errors made safe for a terminal (the rest of the terminal's rules are
//! `infera_core::term`'s, re-exported here).

use std::ffi::OsStr;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;

/// clap's message for a usage error, with the values it echoes escaped (clap prints them
/// as given: a newline in `--engine` would start a line of its own). Its own format kept.
pub(crate) fn clap_error(e: &clap::Error) -> String {
    // One label for what to do, as every refusal says it: clap's `tip:` is our `hint:`.
    let mut text = e.render().to_string().replace("\n  tip: ", "\n  hint: ");
    // clap names no accepted spelling of a boolean: say them.
    if text.contains("value was not a boolean") && !text.contains("\n  hint: ") {
        text = text.replacen(
            "value was not a boolean\n",
            "value was not a boolean\n\n  hint: give true or false (also 1/0, yes/no, on/off)\n",
            1,
        );
    }
    for (_, value) in e.context() {
        let values: Vec<&str> = match value {
            clap::error::ContextValue::String(s) => vec![s.as_str()],
            clap::error::ContextValue::Strings(v) => v.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        for v in values.into_iter().filter(|v| v.chars().any(char::is_control)) {
            text = text.replace(v, &infera_core::term::escape_all(v));
        }
    }
    text
}

/// Whether stdout and stderr are one place: one terminal, or the same file or pipe
/// (`> log 2>&1`, `2>&1 | less`), where a text said on both would be read twice.
pub(crate) fn one_place() -> bool {
    match (rustix::fs::fstat(std::io::stdout()), rustix::fs::fstat(std::io::stderr())) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// The width a table is fitted to: `COLUMNS` where the shell exports it, else 100 (a report
/// written to a file or a CI log is read in a window about that wide).
pub(crate) fn columns(env: &infera_facts::envvars::Env) -> usize {
    infera_facts::envvars::get(env, infera_facts::envvars::COLUMNS)
        .and_then(|v| v.to_str()?.trim().parse::<usize>().ok())
        .filter(|w| (40..=1000).contains(w))
        .unwrap_or(100)
}

/// Quote for a POSIX shell so the printed command can be pasted; non-UTF-8 bytes use
/// bash's `$'\xNN'` form so nothing is lost.
pub(crate) fn shell_quote(s: &OsStr) -> String {
    let b = s.as_bytes();
    if !b.is_empty() && b.iter().all(|c| c.is_ascii_alphanumeric() || b"_-./=:,+@%^".contains(c)) {
        return String::from_utf8_lossy(b).into_owned();
    }
    match s.to_str() {
        Some(t) if !t.chars().any(|c| c.is_control()) => format!("'{}'", t.replace('\'', "'\\''")),
        _ => {
            let mut out = String::from("$'");
            for &c in b {
                match c {
                    b'\'' => out.push_str("\\'"),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(c as char),
                    _ => {
                        let _ = write!(out, "\\x{c:02x}");
                    }
                }
            }
            out.push('\'');
            out
        }
    }
}
