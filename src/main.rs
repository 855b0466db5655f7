// The C `main`, not std's: std's start-up reads /proc/self/maps (a file open, reads and a
// sscanf per mapping, to place a guard for the main thread's stack) and maps an alternate
// signal stack, all before the first line of the launcher runs; an entrypoint that execs
// within milliseconds gets nothing from either. What std's start-up does that a launcher
// does need is done here: SIGPIPE ignored (a closed pipe is an error to report, not a
// silent death) and fds 0-2 open (a file opened later must never become stdout).
// The environment is std's (`environ`); the arguments are read from `main`'s own.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
use std::ffi::{c_char, c_int};

/// The process entry, called by the C runtime.
///
/// # Safety
/// `argv` holds `argc` valid NUL-terminated strings, as the C runtime passes them.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    use nix::libc;
    // SAFETY: plain libc calls on this process's own signal disposition and descriptors,
    // before any other thread exists.
    unsafe {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
        if libc::poll(fds.as_mut_ptr(), 3, 0) != -1 {
            for p in fds {
                if p.revents & libc::POLLNVAL != 0 {
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                    if null != p.fd {
                        libc::abort();
                    }
                }
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // The arguments as the C runtime passed them (std's own copy is filled at load by
    // glibc only, not by musl).
    let args: Vec<std::ffi::OsString> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            use std::os::unix::ffi::OsStrExt;
            // SAFETY: the C runtime's argv holds argc valid NUL-terminated strings.
            let arg = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            std::ffi::OsStr::from_bytes(arg.to_bytes()).to_os_string()
        })
        .collect();
    let env: infera_exec::Env = std::env::vars_os().collect();
    let code = infera_exec::run(args, env);
    std::process::exit(code);
}
