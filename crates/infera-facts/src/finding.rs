//! Findings: what the plan wants the operator to know (defaults added, evidence that
//! disagrees, rules overridden). They never change the exit code by themselves.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub level: Level,
    pub code: String,
    pub message: String,
}

impl Finding {
    pub fn info(code: &str, message: impl Into<String>) -> Self {
        Finding { level: Level::Info, code: code.to_string(), message: message.into() }
    }
    pub fn warn(code: &str, message: impl Into<String>) -> Self {
        Finding { level: Level::Warn, code: code.to_string(), message: message.into() }
    }
}

/// A file that exists but cannot be read as a file (a FIFO, a device, a permission) is said,
/// never taken for absent: the warning names it and what is done without it.
pub fn unreadable(findings: &mut Vec<Finding>, code: &str, path: &std::path::Path, e: &std::io::Error, without: &str) {
    if e.kind() != std::io::ErrorKind::NotFound {
        findings.push(Finding::warn(
            code,
            format!("`{}` {}; {without}", path.display(), infera_core::rootfs::io_reason(e)),
        ));
    }
}

/// A judgement the pod may override (`--allow CODE`, INFERA_ALLOW: `request::ALLOWABLE`):
/// refused, or when allowed a warning that says what was allowed.
pub fn unless_allowed<E>(
    allow: &[String],
    code: &str,
    e: E,
    findings: &mut Vec<Finding>,
) -> Result<(), crate::error::Refusal>
where
    E: std::fmt::Display + Into<crate::error::Refusal>,
{
    if !allow.iter().any(|a| a == code) {
        return Err(e.into());
    }
    findings.push(Finding::warn(code, format!("allowed by INFERA_ALLOW/--allow: {e}")));
    Ok(())
}
