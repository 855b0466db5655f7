//! The program the run execs must be runnable as the container sees it: found (127),
//! a regular file with an execute bit on an exec mount (126).

use std::path::PathBuf;

use thiserror::Error;

use infera_core::exe::ExecFile;
use infera_exec_derive::Refuse;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum ProgramError {
    #[error("the {what} `{}` cannot be found: {reason}", program.display())]
    #[refuse(code = "exec-not-found", exit = NotFound, hint = "the image's {what} link points at nothing; fix the image or PATH")]
    NotFound { what: &'static str, program: PathBuf, reason: String },
    #[error("the {what} `{}` is not an executable file (mode {mode:o})", program.display())]
    #[refuse(
        code = "exec-not-executable",
        exit = CannotExec,
        hint = "the image's {what} lost its execute bit, or the filesystem is mounted noexec"
    )]
    NotExecutable { what: &'static str, program: PathBuf, mode: u32 },
    #[error("the {what} `{}` is {kind}, not an executable file", program.display())]
    #[refuse(code = "exec-not-executable", exit = CannotExec, hint = "the image's {what} must be a regular file: fix the image or the path")]
    NotAFile { what: &'static str, program: PathBuf, kind: &'static str },
    #[error("the {what} `{}` is on a filesystem mounted noexec: execve would fail with EACCES", program.display())]
    #[refuse(code = "exec-noexec", exit = CannotExec, hint = "mount the image's filesystem without noexec")]
    NoexecMount { what: &'static str, program: PathBuf },
    #[error("the {what} `{}` is {kind}: execve would fail with ENOEXEC", program.display())]
    #[refuse(
        code = "exec-format",
        exit = CannotExec,
        hint = "point it at an ELF binary or a `#!` script; a file without a valid header is not run through /bin/sh"
    )]
    Format { what: &'static str, program: PathBuf, kind: &'static str },
    #[error("the {what} `{}` is a `#!` script whose interpreter `{interpreter}` cannot be found: {reason}", program.display())]
    #[refuse(
        code = "exec-interpreter-missing",
        exit = NotFound,
        hint = "execve fails with ENOENT: install that interpreter in the image, or fix the script's `#!` line"
    )]
    InterpreterMissing { what: &'static str, program: PathBuf, interpreter: String, reason: String },
    #[error("the {what} `{}` is a `#!` script whose interpreter `{interpreter}` cannot be executed: {why}", program.display())]
    #[refuse(
        code = "exec-interpreter-unusable",
        exit = CannotExec,
        hint = "the interpreter must be an executable regular file on an exec mount: fix the image or the script's `#!` line"
    )]
    InterpreterUnusable { what: &'static str, program: PathBuf, interpreter: String, why: String },
    #[error("`{name}` is not on the container's PATH ({path}) nor in the tree's `{}`", bin.display())]
    #[refuse(code = "exec-not-found", exit = NotFound, hint = "name a program the image has, or give its absolute path")]
    NotOnPath { name: String, path: String, bin: PathBuf },
    #[error("the working directory `{}` (INFERA_EXEC_CHDIR) is not a directory in the image: {reason}", dir.display())]
    #[refuse(code = "chdir-missing", exit = Missing, hint = "set INFERA_EXEC_CHDIR to a directory the image has (default /), or empty to keep the launcher's")]
    NoWorkdir { dir: PathBuf, reason: String },
}

pub(crate) fn runnable(program: &std::path::Path, what: &'static str, file: &ExecFile) -> Result<(), ProgramError> {
    let program = program.to_path_buf();
    match file {
        ExecFile::Missing { reason } => Err(ProgramError::NotFound { what, program, reason: reason.clone() }),
        ExecFile::NotRegular { kind } => Err(ProgramError::NotAFile { what, program, kind }),
        ExecFile::NotExecutable { mode } => Err(ProgramError::NotExecutable { what, program, mode: *mode }),
        ExecFile::NoexecMount => Err(ProgramError::NoexecMount { what, program }),
        ExecFile::Ok { header: infera_core::exe::Header::Unknown(kind), .. } => {
            Err(ProgramError::Format { what, program, kind })
        }
        ExecFile::Interpreter { interpreter, file } => Err(match runnable(interpreter.as_ref(), "interpreter", file) {
            Err(ProgramError::NotFound { reason, .. }) => {
                ProgramError::InterpreterMissing { what, program, interpreter: interpreter.clone(), reason }
            }
            Err(e) => ProgramError::InterpreterUnusable {
                what,
                program,
                interpreter: interpreter.clone(),
                why: e.to_string(),
            },
            Ok(()) => return Ok(()),
        }),
        ExecFile::Ok { .. } => Ok(()),
    }
}
