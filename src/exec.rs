//! The only stage with side effects: replace this process by the planned command.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::error::{Exit, Refusal};
use crate::plan::ExecSpec;

/// Build the command exactly as planned. std resets SIGPIPE and the signal mask in the
/// child before execve, so the engine does not inherit Rust's ignored SIGPIPE.
pub fn command(x: &ExecSpec) -> Command {
    let mut c = Command::new(&x.program);
    if let Some(a0) = x.argv.first() {
        c.arg0(a0);
    }
    c.args(x.argv.iter().skip(1));
    c.envs(x.env.iter());
    c
}

/// execve; only returns on failure, mapped to 126/127.
pub fn exec(x: &ExecSpec) -> Refusal {
    let err = command(x).exec();
    exec_error(&x.program, &err)
}

pub fn exec_error(program: &std::path::Path, err: &io::Error) -> Refusal {
    let (exit, code) = match err.kind() {
        io::ErrorKind::NotFound => (Exit::NotFound, "exec-not-found"),
        _ => (Exit::CannotExec, "exec-failed"),
    };
    Refusal::new(exit, code, format!("execve `{}` failed: {err}", program.display()))
}
