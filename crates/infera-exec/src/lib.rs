//! infera-exec: Request + Facts + Manifests → Plan → exec. The crate root only dispatches: the
//! command line to its command (`commands/`), each of which reads what it needs (`gather`),
//! plans (`plan/`) and answers (`answer`), or execs.

mod answer;
mod choices;
mod cli;
mod commands;
mod error;
mod exec;
mod execve;
mod exits;
mod gather;
mod imageenv;
mod init;
mod leader;
mod logging;
mod plan;
mod prefetch;
mod privs;
mod procs;
#[cfg(test)]
mod refusals;
mod report;
mod request;
mod rule_table;
mod spec;
pub mod support;
mod term;
mod termination;

use std::ffi::OsString;
use std::io::Write;

use answer::{emit, print_error_as, refuse_in};
use cli::Invocation;
use infera_core::error::{Exit, Refusal};
use request::Request;

use infera_facts::envvars::Env;

/// Parse, plan, print or exec. Returns the exit code when it does not exec.
pub fn run(argv: Vec<OsString>, env: Env) -> i32 {
    // Whether a refusal found before there is a request answers in JSON too: read from the
    // raw argv only when there is one.
    let raw = argv.clone();
    let output = || cli::wants_output(&raw, &env);
    if let Err(e) = logging::init(&env) {
        return refuse_in(&Refusal::from(e), output(), &env);
    }
    let invocation = match cli::parse(argv) {
        Ok(c) => c,
        Err(e) => {
            let json_log = matches!(logging::format(&env), Ok(logging::Format::Json));
            if !e.use_stderr() {
                // --help: the answer on stdout, a write that fails said as any answer's (74).
                return match emit(&e.render().to_string()) {
                    Ok(()) => Exit::Ok.code(),
                    Err(code) => code,
                };
            }
            let text = term::clap_error(&e);
            if !json_log {
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
            let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
            // clap's tip (a similar option, or where an engine's args go) is the hint.
            let hint = text.lines().find_map(|l| l.trim().strip_prefix("hint: ")).map(str::to_string);
            let r = Refusal { code: "usage".into(), message: first, hint, exit: Exit::Usage };
            // The parser's message as the answer in the format asked for: the `error` object
            // every JSON answer carries, a JUnit report of that one error.
            print_error_as(&r, output());
            if json_log {
                let _ = std::io::stderr().write_all(logging::refusal_line(&r).as_bytes());
            }
            termination::write(&r, &env);
            return Exit::Usage.code();
        }
    };
    let outcome = match invocation {
        Invocation::Version => Ok(Done::Print(commands::version::version_text(&env))),
        Invocation::Program { options, command } => Request::from_command(options, command, &env)
            .map_err(Refusal::from)
            .map(|r| Done::Exit(commands::run::launch(&r, &env))),
        Invocation::Role { role, options, args } => Request::resolve(role, options, args, &env)
            .map_err(Refusal::from)
            .map(|r| Done::Exit(commands::run::launch(&r, &env))),
        Invocation::Manifest(m) => infera_overlay::manifest_cmd::run(&m.into()).map(Done::Print),
        Invocation::Install { dest, from } => infera_overlay::install::run(&dest, from).map(Done::Print),
        Invocation::Node { output, name } => Ok(Done::Exit(commands::node::node_profile(output, name, &env))),
        Invocation::Prefetch(a) => Ok(Done::Exit(prefetch::main(&a))),
        Invocation::Completion(shell) => Ok(Done::Print(cli::completion(shell))),
    };
    match outcome {
        Ok(Done::Print(text)) => match emit(&text) {
            Ok(()) => Exit::Ok.code(),
            Err(code) => code,
        },
        Ok(Done::Exit(code)) => code,
        // Refused before there is a plan (a usage error in a variable).
        Err(r) => refuse_in(&r, output(), &env),
    }
}

enum Done {
    /// Text for stdout, exit 0.
    Print(String),
    /// The launch already printed what it had to; exit with this code.
    Exit(i32),
}
