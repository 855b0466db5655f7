//! The only stage with side effects: carry out the plan's exec section exactly — its
//! privilege steps, then replace this process by the program with the planned argv, the
//! complete environment and working directory (or, with `--init`, run it as a child).

use crate::execve::{exec_error, file, ExecError, Prepared};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::spec::{ExecSpec, Step};
use infera_core::error::Refusal;

/// Carry out the exec section, in its order: the steps, the privilege drop, the `start` log
/// line (after it nothing refuses), then the exec (or the child, in init mode). Returns only
/// when the run cannot happen (the refusal) or, in init mode, with the code the launcher
/// must exit with.
///
/// SIGTERM and SIGINT (what a pod is stopped with) are held from here and looked at
/// between the steps and inside their waits: one that comes before the exec ends the launch
/// with 128+n and nothing started, whether the launcher is PID 1 (which has no default
/// action for them) or not. The exec empties the mask again.
pub(crate) fn run(x: &ExecSpec, start: &str) -> Result<i32, Refusal> {
    let prepared = Prepared::new(x).map_err(|e| exec_error(file(x), e))?;
    let _ = nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&stop_set()), None);
    if let Some(sig) = await_leader(x)? {
        return Ok(stopped(sig, "waiting for the leader"));
    }
    if let Some(sig) = steps(x) {
        return Ok(stopped(sig, "running the engine patches"));
    }
    if let Some(sig) = stop(std::time::Duration::ZERO) {
        return Ok(stopped(sig, "before the exec"));
    }
    crate::privs::apply(&x.privileges)?;
    tracing::info!(code = "start", "{start}");
    if let Some(p) = &x.prefetch {
        crate::prefetch::spawn(p, x.init.is_none());
    }
    if let Some(init) = &x.init {
        return crate::init::run(x, init, std::sync::Arc::new(prepared));
    }
    let err = prepared.exec();
    Err(exec_error(file(x), err).into())
}

fn stop_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGTERM);
    set.add(nix::sys::signal::Signal::SIGINT);
    set
}

/// A SIGTERM or SIGINT that came (within `d`), if one did.
fn stop(d: std::time::Duration) -> Option<i32> {
    crate::init::wait_signal(&stop_set(), d)
}

fn stopped(sig: i32, during: &str) -> i32 {
    tracing::warn!(
        code = "stopped",
        "signal {sig} while {during}: exiting with {}, the program was not started",
        128 + sig
    );
    128 + sig
}

/// `--wait-model`: wait until each absent absolute model path exists (a download Job still
/// running), logging the wait, for at most `w.seconds` in all (None: until a stop signal).
/// Run before the facts are read, so the rules see the model once it is there; after the
/// wait an absent path is refused by the plan. SIGTERM and SIGINT are held from here on, as
/// in `run`: Some(the exit code, 128+n) when one ended the wait.
pub(crate) fn await_models(models: &[std::ffi::OsString], w: &crate::request::ModelWait) -> Option<i32> {
    let _ = nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&stop_set()), None);
    let start = std::time::Instant::now();
    let limit = w.seconds.map_or(std::time::Duration::MAX, std::time::Duration::from_secs);
    let (how_long, said) = (w.how_long(), &w.said);
    // Paths only: a repository id is resolved through the Hugging Face cache, not waited for.
    for path in models.iter().map(Path::new).filter(|p| p.is_absolute()) {
        if path.exists() {
            continue;
        }
        tracing::info!(
            code = "model-wait",
            "`{}` does not exist yet: waiting {how_long} for it ({said})",
            path.display()
        );
        let mut said_at = start.elapsed();
        while !path.exists() {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return None;
            }
            if let Some(sig) = stop(left.min(std::time::Duration::from_secs(1))) {
                return Some(stopped(sig, "waiting for the model"));
            }
            if start.elapsed() - said_at >= std::time::Duration::from_secs(60) {
                said_at = start.elapsed();
                let left = match w.seconds {
                    Some(_) => format!("{} s left", limit.saturating_sub(said_at).as_secs()),
                    None => format!("{} s so far", said_at.as_secs()),
                };
                tracing::info!(code = "model-wait", "still waiting for `{}` ({left})", path.display());
            }
        }
        tracing::info!(
            code = "model-appeared",
            "`{}` appeared after {:.1} s",
            path.display(),
            start.elapsed().as_secs_f64()
        );
    }
    None
}

/// A rank > 0 of a group: wait until the leader's name resolves, or refuse; Some: the
/// signal that ended the wait.
fn await_leader(x: &ExecSpec) -> Result<Option<i32>, ExecError> {
    use crate::leader::Unresolved;
    for step in &x.steps {
        if let Step::AwaitLeader { host, timeout_seconds } = step {
            let t = std::time::Duration::from_secs(*timeout_seconds);
            match crate::leader::wait(host, t, &stop) {
                Ok((ip, took)) => {
                    tracing::info!(code = "leader-resolved", "`{host}` is {ip} (after {:.1} s)", took.as_secs_f64());
                    // Written as 127.0.0.1 the plan refuses it; a name can lead there too.
                    if ip.is_loopback() || ip.is_unspecified() {
                        return Err(ExecError::LeaderLoopback { host: host.clone(), ip });
                    }
                }
                Err(Unresolved::Stopped(sig)) => return Ok(Some(sig)),
                Err(Unresolved::TimedOut(why)) => {
                    return Err(ExecError::LeaderUnresolvable { host: host.clone(), seconds: *timeout_seconds, why })
                }
            }
        }
    }
    Ok(None)
}

/// The steps before the exec. None can stop the start (each failure is a warning) but a
/// signal: Some(its number).
fn steps(x: &ExecSpec) -> Option<i32> {
    for step in &x.steps {
        match step {
            Step::Patch { file, argv, host_program, timeout_seconds, lock, host_lock, .. } => {
                let program = host_program.as_deref().unwrap_or(Path::new(&argv[0]));
                let limit = std::time::Duration::from_secs(*timeout_seconds);
                let _held = match lock_dir(host_lock.as_deref().unwrap_or(lock), limit) {
                    Locked::Held(f) => Some(f),
                    Locked::Stopped(sig) => return Some(sig),
                    Locked::Not => None,
                };
                if let Some(sig) = patch(x, program, file, argv, limit) {
                    return Some(sig);
                }
            }
            Step::AwaitLeader { .. } => {} // taken first, by await_leader
            Step::Replace { from, to, host_from, host_to, .. } => {
                let (src, dst) = (host_from.as_deref().unwrap_or(from), host_to.as_deref().unwrap_or(to));
                match replace(src, dst) {
                    Ok(()) => tracing::info!(code = "replaced", "`{}` with `{}`", to.display(), from.display()),
                    Err(e) => tracing::warn!(
                        code = "replace-failed",
                        "cannot put `{}` in place of `{}`: {e}; RDMA may be unavailable",
                        from.display(),
                        to.display()
                    ),
                }
            }
        }
    }
    None
}

enum Locked {
    Held(nix::fcntl::Flock<std::fs::File>),
    /// A signal ended the wait for the lock.
    Stopped(i32),
    /// Run without it (said why).
    Not,
}

/// `flock` the engine's install directory, so that two starts in one container (a second
/// process, a restart racing the first) do not patch the same files at once. A directory
/// the image already has: nothing is created, and no other user can plant anything in its
/// place. The wait ends on SIGTERM/SIGINT, and after `limit` (a holder that hangs) the
/// patch runs without the lock, said so.
fn lock_dir(dir: &Path, limit: std::time::Duration) -> Locked {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(dir);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(
                code = "patch-lock-unavailable",
                "cannot open `{}` to lock it: {e}; patching without the lock",
                dir.display()
            );
            return Locked::Not;
        }
    };
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Locked::Held(held),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) => f = back,
            Err((_, e)) => {
                tracing::warn!(
                    code = "patch-lock-unavailable",
                    "cannot lock `{}`: {e}; patching without the lock",
                    dir.display()
                );
                return Locked::Not;
            }
        }
        if !said {
            said = true;
            tracing::info!(
                code = "patch-lock-wait",
                "another start is patching the engine (`{}` is locked): waiting up to {} s",
                dir.display(),
                limit.as_secs()
            );
        }
        if start.elapsed() >= limit {
            tracing::warn!(
                code = "patch-lock-timeout",
                "`{}` was still locked after {} s: patching without the lock",
                dir.display(),
                limit.as_secs()
            );
            return Locked::Not;
        }
        if let Some(sig) = stop(std::time::Duration::from_millis(100)) {
            return Locked::Stopped(sig);
        }
    }
}

/// Run one patch in `/` with the exec's environment, in a process group of its own; after
/// `limit` the whole group is killed (what the patch started would otherwise keep running,
/// holding the container's stderr).
/// Some: a signal came while it ran (it was killed with its group).
fn patch(
    x: &ExecSpec,
    program: &Path,
    file: &Path,
    argv: &[std::ffi::OsString],
    limit: std::time::Duration,
) -> Option<i32> {
    let mut c = Command::new(program);
    c.arg0(&argv[0]).args(&argv[1..]).env_clear().envs(x.env.iter()).current_dir("/").process_group(0);
    c.stdin(std::process::Stdio::null()).stdout(io::stderr());
    let name = file.display();
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            tracing::warn!(code = "engine-patch-failed", "`{name}` could not be started: {e}; continuing");
            return None;
        }
    };
    let kill_group = |child: &mut std::process::Child| {
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pid), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    };
    match wait_for(&mut child, limit) {
        Ok(Waited::Exited(st)) if st.success() => tracing::info!(code = "engine-patch", "`{name}` applied"),
        Ok(Waited::Exited(st)) => {
            tracing::warn!(code = "engine-patch-failed", "`{name}` exited with {st}; continuing without it");
        }
        Ok(Waited::TimedOut) => {
            kill_group(&mut child);
            tracing::warn!(
                code = "engine-patch-timeout",
                "`{name}` ran longer than {} s and was killed; continuing",
                limit.as_secs()
            );
        }
        Ok(Waited::Stopped(sig)) => {
            kill_group(&mut child);
            return Some(sig);
        }
        Err(e) => tracing::warn!(code = "engine-patch-failed", "`{name}`: {e}; continuing"),
    }
    None
}

enum Waited {
    Exited(std::process::ExitStatus),
    TimedOut,
    Stopped(i32),
}

/// The child's status once it exits, or why the wait ended first (`limit`, a signal).
/// Woken the moment it exits (a pidfd, Linux 5.3+); without pidfds, checked at growing
/// intervals; the signals are looked at every 100 ms at most.
fn wait_for(child: &mut std::process::Child, limit: std::time::Duration) -> io::Result<Waited> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let deadline = std::time::Instant::now() + limit;
    let pid = nix::libc::pid_t::try_from(child.id()).unwrap_or(nix::libc::pid_t::MAX);
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    let pidfd = i32::try_from(fd).ok().filter(|fd| *fd >= 0).map(|fd| {
        // SAFETY: a descriptor just returned by the kernel, owned here only.
        unsafe { OwnedFd::from_raw_fd(fd) }
    });
    let mut nap = std::time::Duration::from_micros(200);
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Waited::Exited(st));
        }
        if let Some(sig) = stop(std::time::Duration::ZERO) {
            return Ok(Waited::Stopped(sig));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(Waited::TimedOut);
        }
        let left = left.min(std::time::Duration::from_millis(100));
        match &pidfd {
            Some(fd) => {
                let mut p = nix::libc::pollfd { fd: fd.as_raw_fd(), events: nix::libc::POLLIN, revents: 0 };
                let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
                // SAFETY: one valid pollfd; EINTR or a timeout loop back to the checks above.
                unsafe { nix::libc::poll(&mut p, 1, ms) };
            }
            None => {
                std::thread::sleep(nap.min(left));
                nap = (nap * 2).min(std::time::Duration::from_millis(50));
            }
        }
    }
}

/// Copy `src` beside `dst` with `dst`'s mode, then rename it over `dst` (never a half file).
/// The copy is created exclusively (`O_EXCL`: nothing already there, a link included, is
/// opened) and the source read only if it is a regular file (a FIFO would block).
fn replace(src: &Path, dst: &Path) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = std::fs::metadata(dst)?.permissions().mode();
    let dir = dst.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(format!(".infera-exec-{}.tmp", std::process::id()));
    let copy = || -> io::Result<()> {
        let mut from = infera_core::rootfs::open_regular(src)?;
        let mut to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp)?;
        io::copy(&mut from, &mut to)?;
        to.set_permissions(std::fs::Permissions::from_mode(mode))
    };
    let result = copy().and_then(|()| std::fs::rename(&tmp, dst));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
