//! The binary: the arguments and environment as the process got them, handed to the
//! library, whose exit code is the process's. std's start-up already ignores SIGPIPE (a
//! closed pipe is a write error to report) and opens /dev/null on a closed fd 0-2 (so a
//! file opened later never becomes stdout).

fn main() {
    let args = std::env::args_os().collect();
    let env: infera_exec::Env = std::env::vars_os().collect();
    std::process::exit(infera_exec::run(args, env));
}
