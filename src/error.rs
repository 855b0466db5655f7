//! The one place where outcomes become exit codes (DESIGN.md, "Exit codes").

use serde::Serialize;

/// Documented exit codes. Nothing else may be returned by the launcher itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Exit {
    Ok = 0,
    Usage = 2,
    /// The overlay or a manifest is invalid or unsafe.
    Invalid = 65,
    /// Something required is missing (overlay, interpreter, model path).
    Missing = 66,
    /// No tree for this ABI, or a capability cannot be supplied.
    Unsupported = 69,
    /// Engine configuration refused.
    Refused = 78,
    /// The target exists but cannot be executed.
    CannotExec = 126,
    /// The target was not found.
    NotFound = 127,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// A refusal: what was found, where, what was expected, and what to do.
/// `code` is a stable machine-readable name (also the JSON `error.code`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Serialised as the number the process exits with.
    #[serde(rename = "exit_code", serialize_with = "ser_exit")]
    pub exit: Exit,
}

fn ser_exit<S: serde::Serializer>(e: &Exit, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i32(e.code())
}

impl Refusal {
    pub fn new(exit: Exit, code: impl Into<String>, message: impl Into<String>) -> Self {
        Refusal { exit, code: code.into(), message: message.into(), hint: None }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The text form printed on stderr: `error: ...` then `hint: ...`.
    pub fn render(&self) -> String {
        let mut s = format!("error[{}]: {}\n", self.code, self.message);
        if let Some(h) = &self.hint {
            s.push_str(&format!("hint: {h}\n"));
        }
        s
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Refusal {}
