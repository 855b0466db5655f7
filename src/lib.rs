//! infera-exec: Request + Facts + Manifests → Plan → exec.

pub mod cli;
pub mod dialect;
pub mod envvars;
pub mod error;
pub mod exec;
pub mod facts;
pub mod finding;
pub mod init;
pub mod install;
pub mod logging;
pub mod manifest;
pub mod manifest_cmd;
pub mod overlay;
pub mod payload;
pub mod plan;
pub mod privs;
pub mod report;
pub mod rootfs;
pub mod rules;
pub mod usable;
pub mod version;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;

use clap::Parser;

use cli::{Cli, Command, Output, Request, Role};
use error::{Exit, Refusal};

/// The environment as a value (never read from globals after `main`).
pub type Env = BTreeMap<OsString, OsString>;

/// Parse, plan, print or exec. Returns the exit code when it does not exec.
pub fn run(argv: Vec<OsString>, env: Env) -> i32 {
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { Exit::Usage.code() } else { 0 };
        }
    };
    let req = match cli.command {
        Command::Worker(a) => Request::from_cli(Role::Worker, a),
        Command::Server(a) => Request::from_cli(Role::Server, a),
        Command::Check(a) => Request::from_cli(Role::Check, a),
        Command::Manifest(m) => return manifest_cmd::run(m),
        Command::Install { dest, from } => return install::run(&dest, from),
    };
    launch(&req, &env)
}

pub fn launch(req: &Request, env: &Env) -> i32 {
    let root = rootfs::Root::new(std::path::absolute(&req.root).unwrap_or_else(|_| req.root.clone()));
    let models = if req.role.runs_engine() { dialect::model_refs(&req.args) } else { Vec::new() };
    let overlay = overlay::load(&req.overlay, nix::unistd::geteuid().is_root()).map_err(Refusal::from);
    let probe: std::collections::BTreeSet<String> =
        overlay.iter().flat_map(|o| o.trees.iter().flat_map(|t| t.modules.iter().cloned())).collect();
    let facts = facts::Facts::gather(root, env, &models, &probe);
    let plan = plan::plan(&plan::Inputs { req, facts: &facts, overlay: &overlay, env });

    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    if req.dry_run {
        let text = match req.output {
            Output::Json => report::json(&plan) + "\n",
            Output::Text => report::text(&plan, req.role == Role::Check),
        };
        let _ = out.write_all(text.as_bytes());
        if let Some(e) = &plan.error {
            let _ = err.write_all(e.render().as_bytes());
        }
        return plan.exit().code();
    }
    if let Some(e) = &plan.error {
        if req.output == Output::Json {
            let _ = out.write_all((report::json(&plan) + "\n").as_bytes());
        }
        let _ = err.write_all(e.render().as_bytes());
        return e.exit.code();
    }
    for f in &plan.findings {
        match f.level {
            finding::Level::Warn => tracing::warn!("infera-exec: [{}] {}", f.code, f.message),
            finding::Level::Info => tracing::info!("infera-exec: [{}] {}", f.code, f.message),
        }
    }
    let Some(x) = &plan.exec else {
        return Exit::Ok.code();
    };
    let _ = err.flush();
    drop(out);
    drop(err);
    // The plan holds the kept set, validated and canonical: exactly what the dry run showed.
    if let Some(keep) = &x.keep_caps {
        let keep = privs::parse_keep(keep);
        if let Err(r) = keep.and_then(|k| privs::drop_all_but(&k, req.no_new_privs)) {
            let _ = std::io::stderr().write_all(r.render().as_bytes());
            return r.exit.code();
        }
    } else if req.no_new_privs {
        if let Err(e) = nix::sys::prctl::set_no_new_privs() {
            let r = Refusal::new(Exit::CannotExec, "no-new-privs-failed", format!("cannot set no_new_privs: {e}"));
            let _ = std::io::stderr().write_all(r.render().as_bytes());
            return r.exit.code();
        }
    }
    if req.init {
        // Bounded while planning (0 ..= MAX_GRACE_SECONDS), so the conversion cannot fail.
        let grace = req.init_grace.and_then(|g| std::time::Duration::try_from_secs_f64(g).ok());
        return init::run(x, &init::Options { group: req.init_group, grace });
    }
    let refusal = exec::exec(x);
    let _ = std::io::stderr().write_all(refusal.render().as_bytes());
    refusal.exit.code()
}
