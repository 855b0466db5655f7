//! The only stage with side effects: carry out the plan's exec section exactly — its
//! privilege steps, then replace this process by the program with the planned argv, the
//! complete environment and working directory (or, with `--init`, run it as a child).

use std::ffi::CString;
use std::io;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use infera_exec_derive::Refuse;

use crate::error::Refusal;
use crate::spec::{ExecSpec, Step};

#[derive(Debug, Error, Refuse)]
pub enum ExecError {
    #[error("execve `{}` failed: {cause}", program.display())]
    #[refuse(code = "exec-not-found", exit = NotFound)]
    NotFound { program: PathBuf, cause: io::Error },
    #[error("execve `{}` failed: {cause}", program.display())]
    #[refuse(
        code = "exec-failed",
        exit = CannotExec,
        hint_opt = (cause.raw_os_error() == Some(nix::libc::ENOEXEC)).then(|| "the file (or the interpreter its `#!` line names) is neither an ELF binary nor a valid `#!` script; it is not run through /bin/sh".to_string())
    )]
    Failed { program: PathBuf, cause: io::Error },
    #[error("the leader `{host}` did not resolve within {seconds} s ({why}); this rank would wait for it after loading its weights")]
    #[refuse(
        code = "leader-unresolvable",
        exit = Missing,
        hint = "the leader pod has no IP yet, or its name is wrong (LWS_LEADER_ADDRESS / --leader-address); raise INFERA_LEADER_WAIT, or check the group's headless Service"
    )]
    LeaderUnresolvable { host: String, seconds: u64, why: String },
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

/// The exec section as execve takes it, built before anything forks: after a fork in a
/// process that may have threads (the integrity check hashes with a pool), only
/// async-signal-safe calls are allowed, so nothing may be allocated there.
///
/// execve itself, never `execvp`: glibc's execvp runs a file without a valid header
/// through `/bin/sh` (ENOEXEC), and std's `Command` uses execvp.
pub struct Prepared {
    path: CString,
    cwd: Option<CString>,
    // The argument and environment strings, each NUL-terminated, one after another: one
    // allocation for all of them (a pod's environment is often a hundred variables, and
    // two or three allocations each was a tenth of a start's). Never changed once the
    // pointer arrays point into it, so it never moves.
    _strings: Vec<u8>,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
}

// SAFETY: the raw pointers point into the strings this struct owns, which are never
// mutated or dropped while it lives; sharing it only reads them.
unsafe impl Send for Prepared {}
unsafe impl Sync for Prepared {}

fn cstring(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| nul_error())
}

fn nul_error() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in an argument or variable")
}

impl Prepared {
    pub fn new(x: &ExecSpec) -> io::Result<Prepared> {
        let file = file(x);
        let path = cstring(file.as_os_str().as_bytes())?;
        let args = x.argv.iter().skip(1).map(|a| a.as_bytes());
        let size = x.host_argv0.as_deref().unwrap_or(file).as_os_str().len()
            + 1
            + args.clone().map(|a| a.len() + 1).sum::<usize>()
            + x.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
        let mut strings: Vec<u8> = Vec::with_capacity(size);
        // Where each string starts; the pointers are taken once every string is in.
        let mut argv_at = Vec::with_capacity(x.argv.len().max(1));
        let mut envp_at = Vec::with_capacity(x.env.len());
        let mut put = |parts: &[&[u8]], at: &mut Vec<usize>| -> io::Result<()> {
            at.push(strings.len());
            for p in parts {
                if p.contains(&0) {
                    return Err(nul_error());
                }
                strings.extend_from_slice(p);
            }
            strings.push(0);
            Ok(())
        };
        let argv0 = x.host_argv0.as_deref().unwrap_or(file);
        put(&[argv0.as_os_str().as_bytes()], &mut argv_at)?;
        for a in args {
            put(&[a], &mut argv_at)?;
        }
        for (k, v) in &x.env {
            put(&[k.as_bytes(), b"=", v.as_bytes()], &mut envp_at)?;
        }
        debug_assert_eq!(strings.len(), size);
        let cwd = match x.host_cwd.as_ref().or(x.cwd.as_ref()) {
            Some(d) => Some(cstring(d.as_os_str().as_bytes())?),
            None => None,
        };
        let base = strings.as_ptr().cast::<c_char>();
        // SAFETY: every offset is the start of a NUL-terminated string inside `strings`.
        let ptrs = |at: &[usize]| {
            at.iter().map(|&i| unsafe { base.add(i) }).chain(std::iter::once(std::ptr::null())).collect()
        };
        let (argv, envp) = (ptrs(&argv_at), ptrs(&envp_at));
        Ok(Prepared { path, cwd, _strings: strings, argv, envp })
    }

    /// Reset every signal disposition to default and empty the mask (std resets SIGPIPE, but
    /// not a mask inherited from whoever started the launcher, nor other ignored signals),
    /// change to the working directory, then execve. Returns only on failure.
    /// Async-signal-safe: it allocates nothing.
    pub fn exec(&self) -> io::Error {
        use nix::libc;
        // SAFETY: signal/sigprocmask/chdir/execve with valid arguments: the sets are local,
        // the strings and NULL-terminated pointer arrays are owned by `self`.
        unsafe {
            for s in 1..=libc::SIGRTMAX() {
                if s != libc::SIGKILL && s != libc::SIGSTOP {
                    libc::signal(s, libc::SIG_DFL);
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                return io::Error::last_os_error();
            }
            if let Some(d) = &self.cwd {
                if libc::chdir(d.as_ptr()) != 0 {
                    return io::Error::last_os_error();
                }
            }
            libc::execve(self.path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
        }
        io::Error::last_os_error()
    }

    /// The child of `--init`: a fork whose only work is [`Prepared::exec`]; its failure
    /// comes back as the spawn error (std's CLOEXEC pipe).
    pub fn command(self: &std::sync::Arc<Self>) -> Command {
        let p = std::sync::Arc::clone(self);
        let mut c = Command::new("/");
        // SAFETY: the closure runs between fork and exec and only calls `exec`, which is
        // async-signal-safe and allocates nothing.
        unsafe {
            c.pre_exec(move || Err(p.exec()));
        }
        c
    }
}

/// Carry out the exec section, in its order: the steps, the privilege drop, then the exec
/// (or the child, in init mode). Returns only when the run cannot happen (the refusal) or,
/// in init mode, with the code the launcher must exit with.
pub fn run(x: &ExecSpec) -> Result<i32, Refusal> {
    let prepared = Prepared::new(x).map_err(|e| exec_error(file(x), e))?;
    await_leader(x)?;
    steps(x);
    crate::privs::apply(&x.privileges)?;
    if let Some(init) = &x.init {
        return crate::init::run(x, init, std::sync::Arc::new(prepared));
    }
    let err = prepared.exec();
    Err(exec_error(file(x), err).into())
}

/// A rank > 0 of a group: wait until the leader's name resolves, or refuse.
fn await_leader(x: &ExecSpec) -> Result<(), ExecError> {
    for step in &x.steps {
        if let Step::AwaitLeader { host, timeout_seconds, resolv_conf, hosts } = step {
            let t = std::time::Duration::from_secs(*timeout_seconds);
            match crate::resolve::wait(host, resolv_conf, hosts, t) {
                Ok((ip, took)) => {
                    tracing::info!(code = "leader-resolved", "`{host}` is {ip} (after {:.1} s)", took.as_secs_f64())
                }
                Err(why) => {
                    return Err(ExecError::LeaderUnresolvable { host: host.clone(), seconds: *timeout_seconds, why })
                }
            }
        }
    }
    Ok(())
}

/// The steps before the exec. None can stop the start: each failure is a warning.
fn steps(x: &ExecSpec) {
    let patches = x.steps.iter().any(|s| matches!(s, Step::Patch { .. }));
    // Two launchers of one container (an engine and its router) patching the same files at
    // once would race: hold a lock while patching (best effort: no /tmp, no lock).
    let _lock = patches.then(lock_patches).flatten();
    for step in &x.steps {
        match step {
            Step::Patch { file, argv, host_program, timeout_seconds, .. } => {
                let program = host_program.as_deref().unwrap_or(Path::new(&argv[0]));
                patch(x, program, file, argv, std::time::Duration::from_secs(*timeout_seconds));
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
}

fn lock_patches() -> Option<nix::fcntl::Flock<std::fs::File>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open("/tmp/.infera-exec-patches.lock")
        .ok()?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).ok()
}

/// Run one patch in `/` with the exec's environment, in a process group of its own; after
/// `limit` the whole group is killed (what the patch started would otherwise keep running,
/// holding the container's stderr).
fn patch(x: &ExecSpec, program: &Path, file: &Path, argv: &[std::ffi::OsString], limit: std::time::Duration) {
    let mut c = Command::new(program);
    c.arg0(&argv[0]).args(&argv[1..]).env_clear().envs(x.env.iter()).current_dir("/").process_group(0);
    c.stdin(std::process::Stdio::null()).stdout(io::stderr());
    let name = file.display();
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            tracing::warn!(code = "engine-patch-failed", "`{name}` could not be started: {e}; continuing");
            return;
        }
    };
    match wait_for(&mut child, limit) {
        Ok(Some(st)) if st.success() => tracing::info!(code = "engine-patch", "`{name}` applied"),
        Ok(Some(st)) => {
            tracing::warn!(code = "engine-patch-failed", "`{name}` exited with {st}; continuing without it");
        }
        Ok(None) => {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pid), nix::sys::signal::Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            tracing::warn!(
                code = "engine-patch-timeout",
                "`{name}` ran longer than {} s and was killed; continuing",
                limit.as_secs()
            );
        }
        Err(e) => tracing::warn!(code = "engine-patch-failed", "`{name}`: {e}; continuing"),
    }
}

/// The child's status once it exits, or None after `limit`. Woken the moment it exits
/// (a pidfd, Linux 5.3+); without pidfds, checked at growing intervals.
fn wait_for(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> io::Result<Option<std::process::ExitStatus>> {
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
            return Ok(Some(st));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
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
fn replace(src: &Path, dst: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dst)?.permissions().mode();
    let dir = dst.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(format!(".infera-exec-{}.tmp", std::process::id()));
    let result = std::fs::copy(src, &tmp)
        .and_then(|_| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)))
        .and_then(|()| std::fs::rename(&tmp, dst));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CStr, OsString};
    use std::os::unix::ffi::OsStringExt;

    fn spec(argv: &[&[u8]], env: &[(&[u8], &[u8])]) -> ExecSpec {
        ExecSpec {
            program: "/usr/bin/python3".into(),
            host_program: Some("/img/usr/bin/python3.12".into()),
            host_argv0: None,
            argv: argv.iter().map(|a| OsString::from_vec(a.to_vec())).collect(),
            env: env.iter().map(|(k, v)| (OsString::from_vec(k.to_vec()), OsString::from_vec(v.to_vec()))).collect(),
            env_set: Vec::new(),
            added_args: Vec::new(),
            cwd: None,
            host_cwd: None,
            init: None,
            privileges: Default::default(),
            steps: Vec::new(),
            args_digest: None,
        }
    }

    /// The strings a NULL-terminated pointer array points at.
    fn strings(ptrs: &[*const c_char]) -> Vec<Vec<u8>> {
        assert_eq!(ptrs.last(), Some(&std::ptr::null()), "NULL-terminated");
        // SAFETY: every pointer but the last is a NUL-terminated string the Prepared owns.
        ptrs[..ptrs.len() - 1].iter().map(|&p| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()).collect()
    }

    #[test]
    fn argv_and_environment_are_the_specs_strings_in_one_block() {
        let env: &[(&[u8], &[u8])] = &[(b"A", b""), (b"PATH", b"/usr/bin:/bin"), (b"X", b"a=b \xff")];
        let x = spec(&[b"python3", b"-m", b"infera.engine.vllm", b"", b"\xfe\x01"], env);
        let p = Prepared::new(&x).unwrap();
        let argv = strings(&p.argv);
        assert_eq!(argv, [&b"/img/usr/bin/python3.12"[..], b"-m", b"infera.engine.vllm", b"", b"\xfe\x01"]);
        assert_eq!(strings(&p.envp), [&b"A="[..], b"PATH=/usr/bin:/bin", b"X=a=b \xff"]);
        assert_eq!(p.path.as_bytes(), b"/img/usr/bin/python3.12");
        // One block, exactly as long as the strings.
        let total: usize = argv.iter().chain(&strings(&p.envp)).map(|s| s.len() + 1).sum();
        assert_eq!(p._strings.len(), total);
        assert_eq!(p._strings.capacity(), total, "sized once, never moved");

        let empty = Prepared::new(&spec(&[], &[])).unwrap();
        assert_eq!(strings(&empty.argv), [&b"/img/usr/bin/python3.12"[..]]);
        assert!(strings(&empty.envp).is_empty());
    }

    #[test]
    fn a_nul_byte_anywhere_is_refused() {
        for x in [
            spec(&[b"python3", b"a\0b"], &[]),
            spec(&[b"python3"], &[(b"K", b"v\0")]),
            spec(&[b"python3"], &[(b"K\0", b"v")]),
        ] {
            let e = Prepared::new(&x).err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert_eq!(e.to_string(), "a NUL byte in an argument or variable");
        }
    }
}
