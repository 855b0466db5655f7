//! Findings: what the plan wants the operator to know (defaults added, evidence that
//! disagrees, rules overridden). They never change the exit code by themselves.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub level: Level,
    pub code: String,
    pub message: String,
    /// A warning the pod accepts (`--allow CODE`, INFERA_ALLOW, `--allow-file`): by what,
    /// and why. It stays in the report; it fails neither a run nor `--fail-on warn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
}

impl Finding {
    pub fn info(code: &str, message: impl Into<String>) -> Self {
        Finding { level: Level::Info, code: code.to_string(), message: message.into(), accepted: None }
    }
    pub fn warn(code: &str, message: impl Into<String>) -> Self {
        Finding { level: Level::Warn, code: code.to_string(), message: message.into(), accepted: None }
    }

    /// A warning that counts: not accepted.
    pub fn warns(&self) -> bool {
        self.level == Level::Warn && self.accepted.is_none()
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
) -> Result<(), infera_core::error::Refusal>
where
    E: std::fmt::Display + Into<infera_core::error::Refusal>,
{
    if !allow.iter().any(|a| a == code) {
        return Err(e.into());
    }
    findings.push(Finding::warn(code, format!("allowed by INFERA_ALLOW/--allow: {e}")));
    Ok(())
}
