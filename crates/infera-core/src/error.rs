//! Where outcomes become exit codes (the README's table).
//!
//! Every module has its own error enum whose variants carry the path and the cause; each
//! enum implements [`Refuse`], so the variant itself knows its stable code, its exit code
//! and the hint a user can act on. A [`Refusal`] is the printable form, made from any of
//! them with `?`/`into()` and rendered in one place (`lib.rs`).

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
    /// The output could not be written (stdout full or closed): an answer that did not
    /// arrive is not a success.
    Output = 74,
    /// A bug in the launcher (a panic, a plan it cannot render): said on stderr.
    Internal = 70,
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

/// An error that refuses the run: its message is its `Display`.
pub trait Refuse: std::fmt::Display {
    /// Stable machine-readable name (the JSON `error.code`).
    fn code(&self) -> &str;
    fn exit(&self) -> Exit;
    /// What the user can do about it.
    fn hint(&self) -> Option<String> {
        None
    }
}

/// One refusal as the catalogue (docs/refusals.md) lists it: its code, exit code, and the
/// templates of its message and hint (`{field}` stands for what is found at run time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doc {
    pub code: &'static str,
    pub exit: Exit,
    pub message: &'static str,
    pub hint: Option<&'static str>,
}

/// A refusal: what was found, where, what was expected, and what to do.
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

impl<E: Refuse> From<E> for Refusal {
    fn from(e: E) -> Refusal {
        Refusal { code: e.code().to_string(), message: e.to_string(), hint: e.hint(), exit: e.exit() }
    }
}

/// A bug, said as a refusal is (exit 70).
pub fn internal(what: &str) -> Refusal {
    Refusal {
        code: "internal".into(),
        message: what.to_string(),
        hint: Some("this is a bug in infera-exec: please report it with the command line and the image".into()),
        exit: Exit::Internal,
    }
}

impl Refusal {
    /// The text form printed on stderr: `error[code]: ...` then `hint: ...`.
    pub fn render(&self) -> String {
        let mut s = format!("error[{}]: {}\n", self.code, crate::term::safe(&self.message));
        if let Some(h) = &self.hint {
            s.push_str("hint: ");
            s.push_str(&crate::term::safe(h));
            s.push('\n');
        }
        s
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}
