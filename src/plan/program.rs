//! The program the run execs must be runnable as the container sees it: found (127),
//! a regular file with an execute bit on an exec mount (126).

use std::path::PathBuf;

use thiserror::Error;

use crate::facts::ExecFile;
use infera_exec_derive::Refuse;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum ProgramError {
    #[error("the interpreter `{}` cannot be found: {reason}", program.display())]
    #[refuse(code = "exec-not-found", exit = NotFound, hint = "the image's python3 link points at nothing; fix the image or PATH")]
    NotFound { program: PathBuf, reason: String },
    #[error("the interpreter `{}` is not an executable file (mode {mode:o})", program.display())]
    #[refuse(
        code = "exec-not-executable",
        exit = CannotExec,
        hint = "the image's interpreter lost its execute bit, or the filesystem is mounted noexec"
    )]
    NotExecutable { program: PathBuf, mode: u32 },
    #[error("the interpreter `{}` is on a filesystem mounted noexec: execve would fail with EACCES", program.display())]
    #[refuse(code = "exec-noexec", exit = CannotExec, hint = "mount the image's filesystem without noexec")]
    NoexecMount { program: PathBuf },
}

pub fn runnable(program: &std::path::Path, file: &ExecFile) -> Result<(), ProgramError> {
    let program = program.to_path_buf();
    match file {
        ExecFile::Missing { reason } => Err(ProgramError::NotFound { program, reason: reason.clone() }),
        ExecFile::NotRegular { mode } | ExecFile::NotExecutable { mode } => {
            Err(ProgramError::NotExecutable { program, mode: *mode })
        }
        ExecFile::NoexecMount => Err(ProgramError::NoexecMount { program }),
        ExecFile::Ok { .. } => Ok(()),
    }
}
