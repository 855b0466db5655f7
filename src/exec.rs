//! The only stage with side effects: carry out the plan's exec section exactly — its
//! privilege steps, then replace this process by the program with the planned argv, the
//! complete environment and working directory (or, with `--init`, run it as a child).

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use infera_exec_derive::Refuse;

use crate::error::Refusal;
use crate::spec::ExecSpec;

#[derive(Debug, Error, Refuse)]
pub enum ExecError {
    #[error("execve `{}` failed: {cause}", program.display())]
    #[refuse(code = "exec-not-found", exit = NotFound)]
    NotFound { program: PathBuf, cause: io::Error },
    #[error("execve `{}` failed: {cause}", program.display())]
    #[refuse(code = "exec-failed", exit = CannotExec)]
    Failed { program: PathBuf, cause: io::Error },
}

pub fn exec_error(program: &Path, cause: io::Error) -> ExecError {
    let program = program.to_path_buf();
    match cause.kind() {
        io::ErrorKind::NotFound => ExecError::NotFound { program, cause },
        _ => ExecError::Failed { program, cause },
    }
}

/// The file execve is given: the host file with `--root`, else the program itself.
pub fn file(x: &ExecSpec) -> &Path {
    x.host_program.as_deref().unwrap_or(&x.program)
}

/// Build the command exactly as planned. Right before execve every signal disposition
/// is reset to default and the signal mask emptied: std resets SIGPIPE, but not a mask
/// inherited from whoever started the launcher, nor other ignored signals.
pub fn command(x: &ExecSpec) -> Command {
    let file = file(x);
    let mut c = Command::new(file);
    c.arg0(file);
    c.args(x.argv.iter().skip(1));
    c.env_clear();
    c.envs(x.env.iter());
    if let Some(d) = x.host_cwd.as_ref().or(x.cwd.as_ref()) {
        c.current_dir(d);
    }
    // SAFETY: only async-signal-safe calls (signal, sigprocmask) before execve.
    unsafe {
        c.pre_exec(|| {
            use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
            for s in Signal::iterator() {
                if s != Signal::SIGKILL && s != Signal::SIGSTOP {
                    let _ = signal(s, SigHandler::SigDfl);
                }
            }
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None).map_err(io::Error::from)?;
            Ok(())
        });
    }
    c
}

/// Carry out the exec section. Returns only when the run cannot happen (the refusal) or,
/// in init mode, with the code the launcher must exit with.
pub fn run(x: &ExecSpec) -> Result<i32, Refusal> {
    crate::privs::apply(&x.privileges)?;
    if let Some(init) = &x.init {
        return crate::init::run(x, init);
    }
    let err = command(x).exec();
    Err(exec_error(file(x), err).into())
}
