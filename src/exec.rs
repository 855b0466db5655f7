//! The only stage with side effects: replace this process by the planned command.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::error::{Exit, Refusal};
use crate::plan::ExecSpec;

/// Build the command exactly as planned. Right before execve every signal disposition
/// is reset to default and the signal mask emptied: std resets SIGPIPE, but not a mask
/// inherited from whoever started the launcher, nor other ignored signals.
pub fn command(x: &ExecSpec) -> Command {
    let file = x.host_program.as_ref().unwrap_or(&x.program);
    let mut c = Command::new(file);
    c.arg0(file);
    c.args(x.argv.iter().skip(1));
    c.envs(x.env.iter());
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

/// execve; only returns on failure, mapped to 126/127.
pub fn exec(x: &ExecSpec) -> Refusal {
    let err = command(x).exec();
    exec_error(x.host_program.as_ref().unwrap_or(&x.program), &err)
}

pub fn exec_error(program: &std::path::Path, err: &io::Error) -> Refusal {
    let (exit, code) = match err.kind() {
        io::ErrorKind::NotFound => (Exit::NotFound, "exec-not-found"),
        _ => (Exit::CannotExec, "exec-failed"),
    };
    Refusal::new(exit, code, format!("execve `{}` failed: {err}", program.display()))
}
