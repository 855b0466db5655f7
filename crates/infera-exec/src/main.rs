//! The binary: the arguments and environment as the process got them, handed to the
//! library, whose exit code is the process's. std's start-up already ignores SIGPIPE (a
//! closed pipe is a write error to report) and opens /dev/null on a closed fd 0-2 (so a
//! file opened later never becomes stdout); where there is no /dev/null, `fill_closed_stdio`
//! runs first so that std does not abort.

use std::os::fd::{AsRawFd, IntoRawFd};

use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
use nix::sys::stat::Mode;

/// Runs before std's start-up, which aborts with SIGABRT and no message when fd 0, 1 or 2 is
/// closed and /dev/null cannot be opened (a chroot or a minimal /dev). Each closed one gets an
/// end of a pipe whose other end is closed: stdin reads end-of-file, a write to stdout or
/// stderr fails with EPIPE (a dry run's plan that cannot be written is then exit 74, said on
/// stderr). The ends are close-on-exec, so the program exec'd sees the fds closed, as given.
/// With /dev/null present nothing is done here: std opens it, as it always has.
extern "C" fn fill_closed_stdio() {
    let closed = |fd| fcntl(fd, FcntlArg::F_GETFD) == Err(nix::errno::Errno::EBADF);
    if !(0..3).any(closed) {
        return;
    }
    if let Ok(null) = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty()) {
        let _ = nix::unistd::close(null);
        return;
    }
    for fd in (0..3).filter(|&fd| closed(fd)) {
        let Ok((read, write)) = nix::unistd::pipe2(OFlag::O_CLOEXEC) else { return };
        let (keep, other) = if fd == 0 { (read, write) } else { (write, read) };
        if keep.as_raw_fd() == fd {
            let _ = keep.into_raw_fd();
        } else if nix::unistd::dup3(keep.as_raw_fd(), fd, OFlag::O_CLOEXEC).is_ok() && other.as_raw_fd() == fd {
            // dup3 replaced `other`, which had landed on `fd`: it is not ours to close.
            let _ = other.into_raw_fd();
        }
    }
}

#[used]
#[link_section = ".init_array"]
static FILL_CLOSED_STDIO: extern "C" fn() = fill_closed_stdio;

/// mimalloc, not musl's malloc, which maps and unmaps pages around a parse's worth of small
/// allocations, the bulk of the launcher's own time (BENCHMARKS.md; ripgrep's musl build swaps its
/// allocator too). With
/// its `override` feature it is libc's malloc too (musl's opendir buffers).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // A panic is a bug: said as a refusal is, exit 70, not a death by SIGABRT.
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write;
        let _ = std::io::stderr().write_all(
            format!("error[internal]: {info}\nhint: this is a bug in infera-exec: please report it with the command line and the image\n").as_bytes(),
        );
        std::process::exit(70);
    }));
    // Debug builds only: the tests' way to reach the hook above (no input makes a panic).
    if cfg!(debug_assertions) && std::env::var_os("INFERA_EXEC_TEST_PANIC").is_some() {
        panic!("a panic the test asked for");
    }
    let args = std::env::args_os().collect();
    let env: infera_facts::envvars::Env = std::env::vars_os().collect();
    std::process::exit(infera_exec::run(args, env));
}
