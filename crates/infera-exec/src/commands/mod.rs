//! The commands: a run of one image (`worker`, `server`, PROGRAM, their dry runs, a single
//! `check`), `check`'s matrix, `node`, `--version`.

pub(crate) mod check;
pub(crate) mod node;
pub(crate) mod run;
pub(crate) mod version;
