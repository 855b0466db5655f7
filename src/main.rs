//! The binary: the arguments and environment as the process got them, handed to the
//! library, whose exit code is the process's. std's start-up already ignores SIGPIPE (a
//! closed pipe is a write error to report) and opens /dev/null on a closed fd 0-2 (so a
//! file opened later never becomes stdout).

fn main() {
    // A panic is a bug: said as a refusal is, exit 70, not a death by SIGABRT.
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write;
        let _ = std::io::stderr().write_all(
            format!("error[internal]: {info}\nhint: this is a bug in infera-exec: please report it with the command line and the image\n").as_bytes(),
        );
        std::process::exit(70);
    }));
    let args = std::env::args_os().collect();
    let env: infera_exec::Env = std::env::vars_os().collect();
    std::process::exit(infera_exec::run(args, env));
}
