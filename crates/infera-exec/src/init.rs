//! `--init`: run the planned command as a child and stay as a tiny init with tini's
//! semantics: forward every catchable signal, reap every zombie, exit with the child's
//! code or 128+signal (126/127 when it cannot be exec'd). No threads, no async runtime.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

use crate::spec::{ExecSpec, InitSpec};
use infera_core::error::Refusal;

/// Signals an init must not block: the synchronous ones (a fault of its own, SIGSYS a seccomp
/// filter's refusal of a system call: blocked, the kernel would kill it all the same, with no
/// chance to say why), and those that cannot be caught (tini leaves the same unblocked).
const NOT_FORWARDED: [Signal; 9] = [
    Signal::SIGKILL,
    Signal::SIGSTOP,
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGTRAP,
    Signal::SIGABRT,
    Signal::SIGSYS,
];

fn blocked_set() -> SigSet {
    let mut set = SigSet::all();
    for s in NOT_FORWARDED {
        set.remove(s);
    }
    set
}

/// Block the signals init forwards, in the calling (main) thread, so that every thread
/// started after it (the integrity check's hashing pool) inherits the mask: a signal sent
/// while the launcher is still planning stays pending for init's loop instead of killing
/// the process by its default action (SIGUSR1 would exit 138 and orphan the engine; PID 1
/// would lose a SIGTERM). Called before anything else in an init-mode run.
pub(crate) fn block_signals() {
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked_set()), None) {
        tracing::warn!(code = "init-sigmask", "cannot block signals ({e})");
    }
}

/// Returns the exit code the launcher must exit with, or the refusal when the child
/// cannot be started (126/127).
pub(crate) fn run(
    x: &ExecSpec,
    opts: &InitSpec,
    prepared: std::sync::Arc<crate::execve::Prepared>,
) -> Result<i32, Refusal> {
    // Bounded when the request was resolved (0 ..= a day), so the conversion cannot fail.
    let grace = opts.grace_seconds.and_then(|g| Duration::try_from_secs_f64(g).ok());
    let pid1 = std::process::id() == 1;
    if !pid1 {
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(
                code = "init-subreaper",
                "cannot become a child subreaper ({e}); orphans of the engine will not be reaped here"
            );
        }
    }
    let set = blocked_set();
    let mut old = SigSet::empty();
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old)) {
        tracing::warn!(code = "init-sigmask", "cannot block signals ({e})");
    }

    let mut cmd = prepared.command();
    if opts.group {
        cmd.process_group(0);
    }
    // The child resets dispositions and the mask before execve (Prepared::exec).
    let child = match cmd.spawn() {
        Ok(c) => Pid::from_raw(c.id() as i32),
        Err(e) => return Err(crate::execve::exec_error(crate::execve::file(x), e).into()),
    };
    let target = if opts.group { Pid::from_raw(-child.as_raw()) } else { child };
    let mut deadline: Option<Instant> = None;
    let mut status: Option<i32> = None;

    loop {
        // Reap everything that has exited: the child and any orphan reparented to us.
        while let Reap::Exited(pid, code) = reap_one() {
            if pid == child.as_raw() {
                status = Some(code);
            }
        }
        if let Some(code) = status {
            end_leftovers(pid1);
            return Ok(code);
        }
        let timeout = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(Duration::from_secs(1)),
            None => Duration::from_secs(1),
        };
        match wait_signal(&set, timeout) {
            Some(nix::libc::SIGCHLD) | None => {}
            Some(sig) => {
                // Every catchable signal, real-time ones included (nix has no enum for them).
                // SAFETY: kill(2) with a pid and a signal number the kernel just delivered.
                unsafe { nix::libc::kill(target.as_raw(), sig) };
                if sig == nix::libc::SIGTERM && deadline.is_none() {
                    deadline = grace.and_then(|g| Instant::now().checked_add(g));
                }
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            tracing::warn!(code = "init-grace", "the engine outlived the grace period after SIGTERM; sending SIGKILL");
            let _ = kill(target, Signal::SIGKILL);
            if pid1 {
                // As the container's PID 1, everything else in the namespace is a leftover.
                let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
            }
            deadline = None;
        }
    }
}

/// How long what the child left behind gets between SIGTERM and SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(10);

/// The child is gone; what it left is ours now (we are its subreaper, or PID 1): a wrapper
/// killed before its engine was ready leaves that engine running in its own session. Each
/// such process (and its process group) gets SIGTERM, SIGKILL after LEFTOVER_GRACE, and is
/// reaped: the launcher leaves no process behind.
fn end_leftovers(pid1: bool) {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + LEFTOVER_GRACE;
    let mut termed: Vec<i32> = Vec::new();
    let mut killing = false;
    loop {
        loop {
            match reap_one() {
                Reap::Exited(..) => continue,
                Reap::Running => break,
                Reap::NoChildren => return,
            }
        }
        if !killing && Instant::now() >= deadline {
            tracing::warn!(
                code = "init-leftovers",
                "processes the engine left outlived {LEFTOVER_GRACE:?} after SIGTERM; sending SIGKILL"
            );
            killing = true;
        }
        let sig = if killing { Signal::SIGKILL } else { Signal::SIGTERM };
        let targets = if pid1 { vec![-1] } else { crate::procs::children_of(me) };
        for pid in targets {
            if killing || !termed.contains(&pid) {
                if pid > 0 {
                    // The group first: an engine started with start_new_session leads its own.
                    let _ = kill(Pid::from_raw(-pid), sig);
                }
                let _ = kill(Pid::from_raw(pid), sig);
                termed.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

enum Reap {
    /// A child exited: its pid and code (128+n for a death by signal n).
    Exited(i32, i32),
    /// Children remain, none has exited.
    Running,
    NoChildren,
}

/// Reap one exited child without blocking. The raw status is read with libc's macros: nix's
/// waitpid fails with EINVAL for a signal it has no enum value for (a real-time one) after the
/// kernel already reaped the child, and that status would be lost.
fn reap_one() -> Reap {
    loop {
        let mut st: nix::libc::c_int = 0;
        // SAFETY: waitpid(2) with a valid out-pointer; WNOHANG never blocks.
        let pid = unsafe { nix::libc::waitpid(-1, &mut st, nix::libc::WNOHANG) };
        if pid > 0 {
            let code = if nix::libc::WIFEXITED(st) {
                nix::libc::WEXITSTATUS(st)
            } else if nix::libc::WIFSIGNALED(st) {
                128 + nix::libc::WTERMSIG(st)
            } else {
                continue; // stopped or continued: not an exit
            };
            return Reap::Exited(pid, code);
        }
        if pid == 0 {
            return Reap::Running;
        }
        if Errno::last() == Errno::EINTR {
            continue;
        }
        return Reap::NoChildren; // ECHILD (or nothing waitpid could ever report)
    }
}

/// sigtimedwait: the number of the next pending signal of `set`, or None on timeout.
pub(crate) fn wait_signal(set: &SigSet, timeout: Duration) -> Option<i32> {
    let ts = nix::libc::timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: a valid signal set and timespec; no info struct requested.
    let r = unsafe { nix::libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
    (r > 0).then_some(r)
}
