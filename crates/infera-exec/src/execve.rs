//! The exec itself: the plan's exec section as execve takes it (built before anything
//! forks, so the child of a fork only makes async-signal-safe calls), and the exec.

use std::ffi::CString;
use std::io;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use infera_exec_derive::Refuse;

use crate::spec::ExecSpec;

#[derive(Debug, Error, Refuse)]
pub(crate) enum ExecError {
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
    #[error("the leader `{host}` resolves to {ip}, this pod's own loopback: this rank would meet only itself and wait for the group forever")]
    #[refuse(
        code = "rendezvous-unreachable",
        exit = Refused,
        hint = "the name is mapped to loopback in this pod (/etc/hosts, hostAliases?): give the leader's headless-Service name (LWS_LEADER_ADDRESS) or its pod IP"
    )]
    LeaderLoopback { host: String, ip: std::net::IpAddr },
}

pub(crate) fn exec_error(program: &Path, cause: io::Error) -> ExecError {
    let program = program.to_path_buf();
    match cause.kind() {
        io::ErrorKind::NotFound => ExecError::NotFound { program, cause },
        _ => ExecError::Failed { program, cause },
    }
}

/// The file execve is given: the host file with `--root`, else the program itself.
pub(crate) fn file(x: &ExecSpec) -> &Path {
    x.host_program.as_deref().unwrap_or(&x.program)
}

/// The exec section as execve takes it, built before anything forks: after a fork in a
/// process that may have threads (the integrity check hashes with a pool), only
/// async-signal-safe calls are allowed, so nothing may be allocated there.
///
/// execve itself, never `execvp`: glibc's execvp runs a file without a valid header
/// through `/bin/sh` (ENOEXEC), and std's `Command` uses execvp.
pub(crate) struct Prepared {
    path: CString,
    cwd: Option<CString>,
    // The strings the pointer arrays point into: owned here, never changed.
    _strings: Vec<CString>,
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
    pub(crate) fn new(x: &ExecSpec) -> io::Result<Prepared> {
        let file = file(x);
        let path = cstring(file.as_os_str().as_bytes())?;
        let argv0 = x.host_argv0.as_deref().unwrap_or(file).as_os_str().as_bytes();
        let args = std::iter::once(argv0).chain(x.argv.iter().skip(1).map(|a| a.as_bytes()));
        let args: Vec<CString> = args.map(cstring).collect::<io::Result<_>>()?;
        let env: Vec<CString> = x
            .env
            .iter()
            .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<io::Result<_>>()?;
        let cwd = match x.host_cwd.as_ref().or(x.cwd.as_ref()) {
            Some(d) => Some(cstring(d.as_os_str().as_bytes())?),
            None => None,
        };
        let ptrs = |v: &[CString]| v.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let (argv, envp) = (ptrs(&args), ptrs(&env));
        let strings = args.into_iter().chain(env).collect();
        Ok(Prepared { path, cwd, _strings: strings, argv, envp })
    }

    /// Reset every signal disposition to default and empty the mask (std resets SIGPIPE, but
    /// not a mask inherited from whoever started the launcher, nor other ignored signals),
    /// change to the working directory, then execve. Returns only on failure.
    /// Async-signal-safe: it allocates nothing.
    pub(crate) fn exec(&self) -> io::Error {
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
    pub(crate) fn command(self: &std::sync::Arc<Self>) -> Command {
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
            prefetch: None,
        }
    }

    /// The strings a NULL-terminated pointer array points at.
    fn strings(ptrs: &[*const c_char]) -> Vec<Vec<u8>> {
        assert_eq!(ptrs.last(), Some(&std::ptr::null()), "NULL-terminated");
        // SAFETY: every pointer but the last is a NUL-terminated string the Prepared owns.
        ptrs[..ptrs.len() - 1].iter().map(|&p| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()).collect()
    }

    #[test]
    fn argv_and_environment_are_the_specs_strings() {
        let env: &[(&[u8], &[u8])] = &[(b"A", b""), (b"PATH", b"/usr/bin:/bin"), (b"X", b"a=b \xff")];
        let x = spec(&[b"python3", b"-m", b"infera.engine.vllm", b"", b"\xfe\x01"], env);
        let p = Prepared::new(&x).unwrap();
        let argv = strings(&p.argv);
        assert_eq!(argv, [&b"/img/usr/bin/python3.12"[..], b"-m", b"infera.engine.vllm", b"", b"\xfe\x01"]);
        assert_eq!(strings(&p.envp), [&b"A="[..], b"PATH=/usr/bin:/bin", b"X=a=b \xff"]);
        assert_eq!(p.path.as_bytes(), b"/img/usr/bin/python3.12");
        // One block, exactly as long as the strings.
        assert_eq!(p._strings.len(), argv.len() + 3);

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
