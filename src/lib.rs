//! infera-exec: Request + Facts + Manifests → Plan → exec.

pub mod cli;
pub mod dialect;
pub mod engines;
pub mod envvars;
pub mod error;
pub mod exec;
pub mod execve;
pub mod facts;
pub mod finding;
pub mod imageenv;
pub mod init;
pub mod install;
pub mod logging;
pub mod manifest;
pub mod manifest_cmd;
pub mod nofollow;
pub mod overlay;
pub mod payload;
pub mod plan;
pub mod privs;
pub mod report;
pub mod request;
pub mod resolve;
pub mod rootfs;
pub mod rules;
pub mod spec;
pub mod suggest;
pub mod term;
pub mod termination;
pub mod version;

use std::ffi::OsString;
use std::io::Write;

use cli::{Invocation, Output};
use error::{Exit, Refusal};
use request::{Request, Role, Verify};

pub use envvars::Env;

/// Parse, plan, print or exec. Returns the exit code when it does not exec.
pub fn run(argv: Vec<OsString>, env: Env) -> i32 {
    // Whether a refusal found before there is a request answers in JSON too: read from the
    // raw argv only when there is one.
    let raw = argv.clone();
    let json = || cli::wants_json(&raw, &env);
    if let Err(e) = logging::init(&env) {
        let r = Refusal::from(e);
        if json() {
            print_json_error(&r);
        }
        return refuse(&r, &env);
    }
    let invocation = match cli::parse(argv) {
        Ok(c) => c,
        Err(e) => {
            let json_log = matches!(logging::format(&env), Ok(logging::Format::Json));
            if !e.use_stderr() {
                let _ = e.print();
                return 0; // --help
            }
            let text = term::clap_error(&e);
            if !json_log {
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
            let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
            // clap's tip (a similar option, or where an engine's args go) is the hint.
            let hint = text.lines().find_map(|l| l.trim().strip_prefix("tip: ")).map(str::to_string);
            let r = Refusal { code: "usage".into(), message: first, hint, exit: Exit::Usage };
            if json() {
                // The parser's message, as the `error` object every JSON answer carries.
                print_json_error(&r);
            }
            if json_log {
                let _ = std::io::stderr().write_all(logging::refusal_line(&r).as_bytes());
            }
            termination::write(&r, &env);
            return Exit::Usage.code();
        }
    };
    let outcome = match invocation {
        Invocation::Version => Ok(Done::Print(version_text(&env))),
        Invocation::Program { options, command } => {
            Request::from_command(options, command, &env).map_err(Refusal::from).map(|r| Done::Exit(launch(&r, &env)))
        }
        Invocation::Role { role, options, args } => {
            Request::resolve(role, options, args, &env).map_err(Refusal::from).map(|r| Done::Exit(launch(&r, &env)))
        }
        Invocation::Manifest(m) => manifest_cmd::run(&m).map(Done::Print),
        Invocation::Install { dest, from } => install::run(&dest, from).map(Done::Print),
    };
    match outcome {
        Ok(Done::Print(text)) => match emit(&text) {
            Ok(()) => Exit::Ok.code(),
            Err(code) => code,
        },
        Ok(Done::Exit(code)) => code,
        Err(r) => {
            // Refused before there is a plan to print (a usage error in a variable, a root
            // that does not exist): JSON still answers with its `error` object.
            if json() {
                print_json_error(&r);
            }
            refuse(&r, &env)
        }
    }
}

/// `--version`: the launcher, the commit it was built from, and the overlay it would use
/// with the families (ABI trees) that overlay carries.
fn version_text(env: &Env) -> String {
    let dir = envvars::get_nonempty(env, envvars::INFERA_OVERLAY)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| overlay::discover(std::env::current_exe().ok().as_deref()));
    let trees = match overlay::load(&dir, &overlay::LoadOptions::default()) {
        Ok(ov) => {
            let fams: Vec<String> = ov
                .trees
                .iter()
                .map(|t| {
                    let engines: Vec<&str> = t.manifest.engines.keys().map(String::as_str).collect();
                    if engines.is_empty() {
                        t.family.clone()
                    } else {
                        format!("{} ({})", t.family, engines.join(", "))
                    }
                })
                .collect();
            if fams.is_empty() {
                "no trees".to_string()
            } else {
                fams.join(", ")
            }
        }
        Err(e) => format!("none ({})", Refusal::from(e).message),
    };
    format!(
        "infera-exec {} (commit {})\noverlay {}: {trees}\n",
        env!("CARGO_PKG_VERSION"),
        env!("INFERA_COMMIT"),
        dir.display()
    )
}

fn print_json_error(r: &Refusal) {
    let v = serde_json::json!({ "error": r });
    let _ = std::io::stdout().write_all(format!("{v:#}\n").as_bytes());
}

enum Done {
    /// Text for stdout, exit 0.
    Print(String),
    /// The launch already printed what it had to; exit with this code.
    Exit(i32),
}

/// Write an answer to stdout, flushed. A write error (a full disk, a closed pipe) is said on
/// stderr and is exit 74.
fn emit(text: &str) -> Result<(), i32> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::io::stderr()
                .write_all(format!("error[output-failed]: cannot write the answer to stdout: {e}\n").as_bytes());
            Err(Exit::Output.code())
        }
    }
}

/// A bug, said as a refusal is (exit 70).
fn internal(what: &str, env: &Env) -> i32 {
    let r = Refusal {
        code: "internal".into(),
        message: what.to_string(),
        hint: Some("this is a bug in infera-exec: please report it with the command line and the image".into()),
        exit: Exit::Internal,
    };
    refuse(&r, env)
}

/// The one place a refusal is printed (and written where Kubernetes shows it).
fn refuse(r: &Refusal, env: &Env) -> i32 {
    // With JSON logs the refusal is one more JSON line: a log collector most needs this one.
    let text = match logging::format(env) {
        Ok(logging::Format::Json) => logging::refusal_line(r),
        _ => r.render(),
    };
    let _ = std::io::stderr().write_all(text.as_bytes());
    termination::write(r, env);
    r.exit.code()
}

pub fn launch(req: &Request, env: &Env) -> i32 {
    if req.init.is_some() && !req.dry_run {
        init::block_signals();
    }
    // With --image-env, the environment the image's containers start with.
    let image_env = match imageenv::resolve(&req.image_env, &req.root, &req.image_env_said) {
        Ok(v) => v,
        Err(e) => {
            let r = Refusal::from(e);
            if req.output == Output::Json {
                print_json_error(&r);
            }
            return refuse(&r, env);
        }
    };
    let with_image;
    let env = if image_env.is_empty() {
        env
    } else {
        let mut e = env.clone();
        e.extend(image_env);
        with_image = e;
        &with_image
    };
    let root = rootfs::Root::new(std::path::absolute(&req.root).unwrap_or_else(|_| req.root.clone()));
    if let Err(e) = root.check() {
        let r = Refusal::from(e);
        if req.output == Output::Json {
            print_json_error(&r);
        }
        return refuse(&r, env);
    }
    let models = if req.role.runs_engine() { dialect::model_refs(&req.args) } else { Vec::new() };
    // A model volume the download Job is still filling: wait for it (a real run in the pod).
    if let Some(w) = req.wait_model.as_ref().filter(|_| !req.dry_run && root.is_host_root()) {
        if let Some(code) = exec::await_models(&models, w.seconds, &w.said) {
            return code;
        }
    }
    let configs: Vec<std::ffi::OsString> = if req.role.runs_engine() {
        dialect::config_pairs(&req.args).into_iter().filter_map(|(_, f)| f).collect()
    } else {
        Vec::new()
    };
    let modules = match &req.target {
        request::Target::Module { module, .. } => vec![module.clone()],
        _ => Vec::new(),
    };
    // Manifests and layout only: the selected tree's facts are gathered once it is known.
    let opts = overlay::LoadOptions { check_writable: true, modules, lazy: true };
    let dir = req.overlay.clone().unwrap_or_else(|| overlay::discover(std::env::current_exe().ok().as_deref()));
    let overlay = overlay::load(&dir, &opts).map_err(Refusal::from);
    let program = match &req.target {
        request::Target::Program { program } => Some(program.as_os_str()),
        _ => None,
    };
    let wanted = facts::Wanted {
        models: &models,
        configs: &configs,
        probe: None,
        interpreter: req.interpreter(),
        program,
        chdir: req.chdir.as_deref(),
        engine: match req.engine {
            cli::EngineChoice::One(e) => Some(e),
            cli::EngineChoice::Auto => None,
        },
        network: req.group.as_ref().is_some_and(|g| g.size > 1)
            || [envvars::GLOO_SOCKET_IFNAME, envvars::NCCL_SOCKET_IFNAME]
                .iter()
                .any(|k| envvars::get(env, k).is_some()),
        infiniband: envvars::get(env, envvars::MC_GID_INDEX).is_some()
            || req.args.iter().any(|a| a.as_encoded_bytes().starts_with(b"--disaggregation-ib-device")),
    };
    let facts = facts::Facts::gather(&root, env, &wanted);
    // The tree the run would use, and what only that tree needs read: its files' walk, its
    // facts and integrity check, the image's packages its top-level modules could clash with.
    let inputs = plan::Inputs { req, facts: &facts, overlay: &overlay, selected: None, env };
    let selected = match (plan::selected_family(&inputs), &overlay) {
        (Some(family), Ok(ov)) => ov.trees.iter().find(|t| t.family == family).map(|t| {
            let mut tree = overlay::selected(t, &opts);
            if req.verify != Verify::Off {
                tree.facts.integrity = Some(payload::integrity(&tree, req.verify == Verify::Digest));
            }
            let probe: std::collections::BTreeSet<String> =
                tree.facts.top_modules.keys().chain(tree.facts.cap_modules.values().flatten()).cloned().collect();
            let site = facts.probed_site(&root, &probe);
            plan::Selected { tree, site }
        }),
        _ => None,
    };
    let plan = plan::plan(&plan::Inputs { req, facts: &facts, overlay: &overlay, selected: selected.as_ref(), env });

    if req.dry_run {
        let text = match req.output {
            Output::Json => match report::json(&plan) {
                Ok(j) => j + "\n",
                Err(e) => return internal(&format!("the plan cannot be written as JSON: {e}"), env),
            },
            Output::Text => term::safe(&report::text(&plan, req.role == Role::Check)).into_owned(),
        };
        let written = emit(&text);
        let code = match (&plan.error, written) {
            (Some(e), _) => refuse(e, env),
            (None, Err(code)) => code,
            (None, Ok(())) => Exit::Ok.code(),
        };
        return code;
    }
    // The findings first: on a refusal they are what explains it. The warnings are each
    // worth a line; the rest is summed up in the start line (and shown at debug).
    for f in &plan.findings {
        match f.level {
            finding::Level::Warn => tracing::warn!(code = f.code.as_str(), "{}", f.message),
            finding::Level::Info => tracing::debug!(code = f.code.as_str(), "{}", f.message),
        }
    }
    if let Some(e) = &plan.error {
        if req.output == Output::Json {
            if let Ok(j) = report::json(&plan) {
                let _ = std::io::stdout().write_all((j + "\n").as_bytes());
            }
        }
        return refuse(e, env);
    }
    let Some(x) = &plan.exec else {
        return Exit::Ok.code();
    };
    let _ = std::io::stdout().flush();
    match exec::run(x, &report::start_line(&plan, x)) {
        Ok(code) => code,
        Err(r) => refuse(&r, env),
    }
}
