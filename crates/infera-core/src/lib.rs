//! What every part of the launcher stands on: refusals and their exit codes, and reading
//! files safely — inside an image root, bounded, never blocking on a FIFO, never through a
//! link planted where the launcher writes — with what names and file headers say.

#![forbid(unsafe_code)]

// The `Refuse` derive names its items by their one path, `::infera_core::error::…`, here too.
extern crate self as infera_core;

pub mod at;
pub mod error;
pub mod exe;
pub mod filekind;
pub mod image;
pub mod names;
pub mod nofollow;
pub mod pyassign;
pub mod rootfs;
pub mod term;
pub mod version;
