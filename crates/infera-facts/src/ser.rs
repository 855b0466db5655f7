//! JSON forms of paths and OS strings, for the facts and the plan that shows them.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};

// JSON forms of OS strings: a string when UTF-8, else {"hex": "..."} so nothing is lost.
pub fn os_json(s: &OsStr) -> serde_json::Value {
    match s.to_str() {
        Some(t) => serde_json::Value::String(t.to_string()),
        None => {
            serde_json::json!({ "hex": s.as_bytes().iter().map(|b| format!("{b:02x}")).collect::<String>() })
        }
    }
}

pub fn ser_path<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    os_json(p.as_os_str()).serialize(s)
}

pub fn ser_opt_path<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    p.as_ref().map(|p| os_json(p.as_os_str())).serialize(s)
}

/// Paths as `ser_path` shows each.
pub fn ser_paths<S: Serializer>(v: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    v.iter().map(|p| os_json(p.as_os_str())).collect::<Vec<_>>().serialize(s)
}

pub fn ser_os_vec<S: Serializer>(v: &[OsString], s: S) -> Result<S::Ok, S::Error> {
    v.iter().map(|x| os_json(x)).collect::<Vec<_>>().serialize(s)
}
