//! Logs go to stderr through `tracing`; stdout carries only the plan.
//!
//! Every event carries a `code` (the finding's or the step's) and a message. `INFERA_LOG`
//! filters them in tracing's directive syntax (a level, or `target=level` pairs; default
//! `info`: the warnings and the one line that says what a start does). `INFERA_LOG_FORMAT=json`
//! writes one JSON object per line for log collectors.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use infera_exec_derive::Refuse;
use thiserror::Error;
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{span, Event, Metadata, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};

use infera_facts::envvars::{self as ev, Env};

/// What `INFERA_LOG` is when unset or empty.
pub(crate) const DEFAULT_FILTER: &str = "info";
/// The launcher's events are all under this target (its module paths).
const TARGET: &str = "infera_exec";
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum LogError {
    #[error("{}=`{value}`: {reason}", ev::INFERA_LOG)]
    #[refuse(
        code = "log-filter-invalid",
        exit = Usage,
        hint = "give a level (off, error, warn, info, debug, trace) or target=level directives, comma-separated, e.g. `debug` or `info,infera_exec::exec=debug`"
    )]
    Filter { value: String, reason: String },
    #[error("{}=`{value}`: expected text or json", ev::INFERA_LOG_FORMAT)]
    #[refuse(code = "log-format-invalid", exit = Usage, hint = infera_facts::suggest::did_you_mean(value, ["text", "json"]).unwrap_or_else(|| "unset it for text lines, or set json".to_string()))]
    Format { value: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Json,
}

/// `INFERA_LOG` checked and read. Each directive is a level, a target of the launcher's
/// (`infera_exec` or one of its modules) or `target=level`; anything else is refused rather
/// than read as a target that matches nothing and silences every log.
pub(crate) fn filter(value: &str) -> Result<Targets, LogError> {
    let bad = |reason: String| LogError::Filter { value: value.to_string(), reason };
    let mut kept = Vec::new();
    for d in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if d.contains('[') || d.contains('{') {
            return Err(bad(format!("`{d}`: span and field filters select nothing here (the launcher logs no spans)")));
        }
        let (target, level) = match d.split_once('=') {
            Some((t, l)) => (Some(t.trim()), Some(l.trim())),
            None if LevelFilter::from_str(d).is_ok() => (None, Some(d)),
            None => (Some(d), None),
        };
        if let Some(l) = level {
            if LevelFilter::from_str(l).is_err() || l.is_empty() {
                let hint = infera_facts::suggest::did_you_mean(&l.to_ascii_lowercase(), LEVELS)
                    .map_or_else(String::new, |h| format!("; {h}"));
                return Err(bad(format!("`{l}` is not a level (off, error, warn, info, debug, trace){hint}")));
            }
        }
        if let Some(t) = target {
            if !(t == TARGET || t.starts_with("infera_exec::")) {
                let hint = infera_facts::suggest::did_you_mean(&t.to_ascii_lowercase(), LEVELS)
                    .map_or_else(|| format!("the launcher's logs are under `{TARGET}`; the engine's own logging has its own variables (VLLM_LOGGING_LEVEL, SGLANG_LOG_LEVEL)"), |h| format!("not a level either; {h}"));
                return Err(bad(format!("`{t}` is not a target of infera-exec's logs: {hint}")));
            }
        }
        kept.push(d);
    }
    let text = if kept.is_empty() { DEFAULT_FILTER.to_string() } else { kept.join(",") };
    Targets::from_str(&text).map_err(|e| bad(e.to_string()))
}

pub(crate) fn format(env: &Env) -> Result<Format, LogError> {
    match ev::get(env, ev::INFERA_LOG_FORMAT).map(|v| v.to_string_lossy()) {
        None => Ok(Format::Text),
        Some(v) if v.is_empty() || v.eq_ignore_ascii_case("text") => Ok(Format::Text),
        Some(v) if v.eq_ignore_ascii_case("json") => Ok(Format::Json),
        Some(v) => Err(LogError::Format { value: v.into_owned() }),
    }
}

/// Install the logger. On a bad `INFERA_LOG`/`INFERA_LOG_FORMAT` the default logger is
/// installed (so the refusal itself is logged as usual) and the error returned.
pub(crate) fn init(env: &Env) -> Result<(), LogError> {
    let value = ev::get(env, ev::INFERA_LOG).map(|v| v.to_string_lossy().into_owned()).unwrap_or_default();
    let (targets, fmt) = match (filter(&value), format(env)) {
        (Ok(t), Ok(f)) => (Ok(t), f),
        (Err(e), f) => (Err(e), f.unwrap_or(Format::Text)),
        (Ok(_), Err(e)) => (Err(e), Format::Text),
    };
    let installed = targets.clone().unwrap_or_else(|_| Targets::new().with_default(LevelFilter::INFO));
    let _ = tracing::subscriber::set_global_default(Lines { targets: installed, json: fmt == Format::Json });
    targets.map(|_| ())
}

/// The logger: events the filter lets through, one line each on stderr (one `write`, so
/// lines of processes sharing stderr do not interleave), in text or JSON. The launcher
/// logs no spans, so none are kept (a span gets a constant id).
struct Lines {
    targets: Targets,
    json: bool,
}

impl Subscriber for Lines {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.enabled(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.targets.would_enable(metadata.target(), metadata.level())
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        use std::io::Write as _;
        let line = self.line(event);
        // A closed or full stderr loses the line, as it would any other program's; the
        // start goes on (the plan and the exit code do not depend on the log).
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

#[derive(Default)]
struct Fields {
    code: String,
    message: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "code" => self.code = value.to_string(),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "code" => self.code = format!("{value:?}").trim_matches('"').to_string(),
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            _ => {}
        }
    }
}

impl Lines {
    /// One log line: `WARN infera-exec: [code] message`, or a JSON object; with its newline.
    fn line(&self, event: &Event<'_>) -> String {
        let mut f = Fields::default();
        event.record(&mut f);
        let level = event.metadata().level();
        if self.json {
            let line = serde_json::json!({
                "time": rfc3339(std::time::SystemTime::now()),
                "level": level.as_str().to_ascii_lowercase(),
                "code": f.code,
                "message": f.message,
                "target": event.metadata().target(),
            });
            format!("{line}\n")
        } else {
            let mut s = String::with_capacity(f.code.len() + f.message.len() + 24);
            let _ = writeln!(s, "{} infera-exec: [{}] {}", level.as_str(), f.code, infera_core::term::safe(&f.message));
            s
        }
    }
}

/// A refusal as a JSON log line: the fields of every line (level `error`, its code and
/// message), with its hint and exit code.
pub(crate) fn refusal_line(r: &infera_core::error::Refusal) -> String {
    let line = serde_json::json!({
        "time": rfc3339(std::time::SystemTime::now()),
        "level": "error",
        "code": r.code,
        "message": r.message,
        "hint": r.hint,
        "exit_code": r.exit.code(),
        "target": TARGET,
    });
    format!("{line}\n")
}

/// `2026-12-03T10:41:07.123Z`. A clock outside 1970–9999 is said as the nearest of the two
/// (humantime panics before the epoch and fails after year 9999).
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    use std::time::{Duration, UNIX_EPOCH};
    let t = t.clamp(UNIX_EPOCH, UNIX_EPOCH + Duration::from_secs(253_402_300_799));
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_in_tracing_syntax() {
        for ok in ["", "info", "DEBUG", "warn,infera_exec::exec=debug", "infera_exec=trace", "3", "off", " info , "] {
            assert!(filter(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("debgu", "`debgu` is not a target of infera-exec's logs: not a level either; did you mean `debug`?"),
            ("vllm=debug", "`vllm` is not a target of infera-exec's logs: the launcher's logs are under `infera_exec`"),
            ("infera_exec=loud", "`loud` is not a level (off, error, warn, info, debug, trace)"),
            ("info,[span]=debug", "`[span]=debug`: span and field filters select nothing here"),
            ("a=b=c", "is not"),
        ] {
            let e = filter(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("INFERA_LOG=`{bad}`: ")), "{e}");
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn timestamps() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_796_291_267_123);
        assert_eq!(rfc3339(t), "2026-12-03T09:47:47.123Z");
        assert_eq!(rfc3339(std::time::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        let before = std::time::UNIX_EPOCH - std::time::Duration::from_secs(86_400);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000Z");
        let after = std::time::UNIX_EPOCH + std::time::Duration::from_secs(300_000_000_000);
        assert_eq!(rfc3339(after), "9999-12-31T23:59:59.000Z");
    }
}
