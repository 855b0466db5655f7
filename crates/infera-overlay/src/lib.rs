//! The infera overlay, as the launcher reads it and as it is built: the manifest of each
//! tree (types, validation, JSON Schema), the trees of both layouts read into one model
//! with their safety checks, the integrity records (`payload.json`: what a tree's files
//! say, their sizes and digests) and their verification, and the build-side tools —
//! `manifest generate|verify|schema` and `install` (the initContainer copy).

#![forbid(unsafe_code)]

pub mod install;
pub mod manifest;
pub mod manifest_cmd;
pub mod overlay;
pub mod payload;

// The shared foundations, under the names this crate's modules (and the Refuse derive's
// `crate::error` paths) use.
