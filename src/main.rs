// The C `main`, not std's: std's start-up reads /proc/self/maps (a file open, reads and a
// sscanf per mapping, to place a guard for the main thread's stack) and maps an alternate
// signal stack, all before the first line of the launcher runs; an entrypoint that execs
// within milliseconds gets nothing from either. What std's start-up does that a launcher
// does need is done here: SIGPIPE ignored (a closed pipe is an error to report, not a
// silent death) and fds 0-2 open (a file opened later must never become stdout).
// The environment is std's (`environ`); the arguments are read from `main`'s own.
#![cfg_attr(not(test), no_main)]

// musl's allocator (mallocng) was ~38 % of a musl build's instructions to the execve (530 k of
// 1.40 M, callgrind) and mapped and unmapped its groups as it went; the musl build uses
// dlmalloc (glibc's malloc descends from it) instead, behind a spin lock (musl's pthread
// mutex, which dlmalloc's own global wrapper takes, cost more than the allocations). The
// glibc build keeps glibc's.
#[cfg(all(target_env = "musl", not(test)))]
#[global_allocator]
static ALLOC: musl_alloc::Locked = musl_alloc::Locked::new();

#[cfg(all(target_env = "musl", not(test)))]
mod musl_alloc {
    use std::alloc::{GlobalAlloc, Layout};
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, Ordering};

    pub struct Locked {
        busy: AtomicBool,
        heap: UnsafeCell<dlmalloc::Dlmalloc>,
    }

    // SAFETY: `heap` is only reached while `busy` is held (see `with`).
    unsafe impl Sync for Locked {}

    impl Locked {
        pub const fn new() -> Locked {
            Locked { busy: AtomicBool::new(false), heap: UnsafeCell::new(dlmalloc::Dlmalloc::new()) }
        }

        /// `f` on the heap, alone: other threads (the integrity check's hashing pool) wait.
        /// Async-signal-safe code never allocates (the child of a fork only execs), so a
        /// lock held across a fork is never waited for.
        fn with<R>(&self, f: impl FnOnce(&mut dlmalloc::Dlmalloc) -> R) -> R {
            while self.busy.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                std::thread::yield_now();
            }
            // SAFETY: `busy` is held: no other reference to the heap exists until it is let go.
            let r = f(unsafe { &mut *self.heap.get() });
            self.busy.store(false, Ordering::Release);
            r
        }
    }

    // SAFETY: each call is dlmalloc's matching call, made under the lock, with the layout
    // GlobalAlloc's contract guarantees.
    unsafe impl GlobalAlloc for Locked {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            self.with(|h| unsafe { h.malloc(l.size(), l.align()) })
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            self.with(|h| unsafe { h.calloc(l.size(), l.align()) })
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            self.with(|h| unsafe { h.free(p, l.size(), l.align()) })
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            self.with(|h| unsafe { h.realloc(p, l.size(), l.align(), new) })
        }
    }
}

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
