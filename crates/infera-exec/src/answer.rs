//! The answer: what goes to stdout (written whole, a failed write exit 74) and a refusal —
//! on stderr (a JSON line under JSON logs), in the termination message Kubernetes shows, and,
//! before there is a plan, as the answer in the format asked for.

use std::fmt::Write as _;
use std::io::Write;

use crate::cli::Output;
use crate::{logging, report, termination};
use infera_core::error::{Exit, Refusal};
use infera_facts::envvars::Env;

/// A line of text into a String.
macro_rules! w {
    ($o:expr, $($t:tt)*) => {{ let _ = writeln!($o, $($t)*); }};
}

/// A refusal before any plan, on stdout as the answer in the format asked for (text: none,
/// stderr says it).
pub(crate) fn print_error_as(r: &Refusal, output: Output) {
    let text = match output {
        Output::Json => format!("{:#}\n", serde_json::json!({ "error": r })),
        Output::Yaml => report::yaml(&serde_json::json!({ "error": r }).to_string()).unwrap_or_default(),
        Output::Junit => junit_error(r),
        Output::Text | Output::Affinity => return,
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
}

/// Write an answer to stdout, flushed. A write error (a full disk, a closed pipe) is said on
/// stderr and is exit 74.
pub(crate) fn emit(text: &str) -> Result<(), i32> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::io::stderr()
                .write_all(format!("error[output-failed]: cannot write the answer to stdout: {e}\n").as_bytes());
            Err(Exit::Output.code())
        }
    }
}

/// A refusal before there is a plan to print: in JSON or JUnit, the answer on stdout first
/// (every JSON answer carries an `error`; CI gets a report even then), then [`refuse`].
pub(crate) fn refuse_in(r: &Refusal, output: Output, env: &Env) -> i32 {
    print_error_as(r, output);
    refuse(r, env)
}

/// The one place a refusal is printed (and written where Kubernetes shows it).
pub(crate) fn refuse(r: &Refusal, env: &Env) -> i32 {
    // With JSON logs the refusal is one more JSON line: a log collector most needs this one.
    let text = match logging::format(env) {
        Ok(logging::Format::Json) => logging::refusal_line(r),
        _ => r.render(),
    };
    let _ = std::io::stderr().write_all(text.as_bytes());
    termination::write(r, env);
    r.exit.code()
}

/// The report of a refusal before any image was judged (no overlay, a usage error): one
/// case, in error, so that CI still gets a report.
fn junit_error(e: &Refusal) -> String {
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w!(o, "<testsuites name=\"infera-exec check\" tests=\"1\" failures=\"0\" errors=\"1\">");
    w!(o, "  <testsuite name=\"infera-exec check\" tests=\"1\" failures=\"0\" errors=\"1\">");
    w!(o, "    <testcase classname=\"infera-exec\" name=\"check\">");
    let body = format!("exit code {}\n{}", e.exit.code(), e.hint.as_deref().unwrap_or(""));
    w!(o, "      <error type=\"{}\" message=\"{}\">{}</error>", xml(&e.code), xml(&e.message), xml(&body));
    w!(o, "    </testcase>");
    w!(o, "  </testsuite>");
    w!(o, "</testsuites>");
    o
}

/// Text as XML 1.0 character data or an attribute value: the five markup characters as
/// entities, tab, newline and carriage return as character references (an attribute's would
/// read back as spaces), and the characters XML 1.0 cannot carry at all (the other C0
/// controls, U+FFFE/U+FFFF) as `\u{…}` so that nothing is dropped silently.
pub(crate) fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
