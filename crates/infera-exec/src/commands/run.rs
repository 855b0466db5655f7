//! A run of one image: `worker`, `server`, a PROGRAM, their dry runs and a single `check` —
//! the plan printed, or refused, or exec'd.

use std::ffi::OsString;
use std::io::Write;

use crate::answer::{emit, refuse, refuse_in};
use crate::choices::Role;
use crate::cli::Output;
use crate::commands::check;
use crate::error::{self};
use crate::gather::{given_nodes, load_overlay, wait_for_model, Gathered};
use crate::request::Request;
use crate::{choices, exec, init, plan, report, term};
use infera_core::error::Exit;
use infera_facts::envvars::Env;

/// The launch, in the order data flows: request → image facts → engine (decided once) →
/// engine args (read once) → the model → selection (once) → the tree's facts → plan → print
/// or exec. Each stage takes the values of the ones before it; only the last acts.
pub(crate) fn launch(req: &Request, env: &Env) -> i32 {
    if req.init.is_some() && !req.dry_run {
        init::block_signals();
    }
    let given = match given_nodes(req) {
        Ok(g) => g,
        Err(r) => return refuse_in(&r, req.output, env),
    };
    if check::wanted(req) || (req.role == Role::Check && given.nodes.len() > 1) {
        return check::run(req, env, given);
    }
    if given.nodes.len() > 1 {
        return refuse_in(&infera_core::error::Refusal::from(error::UsageError::NodeMany), req.output, env);
    }
    let mut g = match Gathered::read(req, env, req.image.image.first().map(OsString::as_os_str), &given.nodes) {
        Ok(g) => g,
        Err(r) => return refuse_in(&r, req.output, env),
    };
    if let Some(code) = wait_for_model(req, &g.root, g.model()) {
        return code;
    }
    g.read_models(req);
    let (overlay, opts) = load_overlay(req);
    let Some(node) = g.nodes.first() else {
        return refuse_in(&infera_core::error::internal("no node to plan for"), req.output, env);
    };
    let choice = plan::select::TreeChoice::of(req.family.as_deref());
    g.with_plan(req, &choice, node, &overlay, &opts, |plan| {
        if req.dry_run {
            return print_plan(plan, req, &g.env);
        }
        run_plan(plan, req, &g.env)
    })
}

/// The dry run: the plan on stdout (text or JSON), then its refusal, if any, on stderr.
fn print_plan(plan: &plan::Plan, req: &Request, env: &Env) -> i32 {
    let text = match req.output {
        Output::Json | Output::Yaml => {
            match report::json(plan).and_then(|j| report::structured(j, req.output == Output::Yaml)) {
                Ok(text) => text,
                Err(e) => {
                    return refuse(
                        &infera_core::error::internal(&format!("the plan cannot be written as JSON: {e}")),
                        env,
                    )
                }
            }
        }
        // JUnit is the matrix's (`check::wanted`): a single plan is never asked for in it.
        Output::Text | Output::Junit | Output::Affinity => {
            // Where stdout and stderr go to one place (a terminal, `> log 2>&1`, one pipe) the
            // refusal is said once, on stderr with its hint.
            infera_core::term::safe(&report::text(plan, req.role == Role::Check, !term::one_place())).into_owned()
        }
    };
    match (&plan.error, emit(&text)) {
        (Some(e), _) => refuse(e, env),
        (None, Err(code)) => code,
        (None, Ok(())) => warned(plan, req),
    }
}

/// `check --fail-on warn`: a plan with a warning fails the gate (exit 1, said on stderr).
fn warned(plan: &plan::Plan, req: &Request) -> i32 {
    let warnings = plan.findings.iter().filter(|f| f.warns()).count();
    if req.role != Role::Check || req.fail_on != choices::FailOn::Warn || warnings == 0 {
        return Exit::Ok.code();
    }
    let _ = std::io::stderr().write_all(
        format!("check: {warnings} warning(s) and --fail-on warn (exit {})\n", check::CELL_REFUSED).as_bytes(),
    );
    check::CELL_REFUSED
}

/// The real run: the findings logged (the warnings each a line, the rest at debug), then
/// the refusal, or the exec.
fn run_plan(plan: &plan::Plan, req: &Request, env: &Env) -> i32 {
    for f in &plan.findings {
        match f.level {
            infera_facts::finding::Level::Warn if f.accepted.is_some() => {
                tracing::info!(
                    code = f.code.as_str(),
                    "accepted ({}): {}",
                    f.accepted.as_deref().unwrap_or(""),
                    f.message
                )
            }
            infera_facts::finding::Level::Warn => tracing::warn!(code = f.code.as_str(), "{}", f.message),
            infera_facts::finding::Level::Info => tracing::debug!(code = f.code.as_str(), "{}", f.message),
        }
    }
    if let Some(e) = &plan.error {
        if matches!(req.output, Output::Json | Output::Yaml) {
            if let Ok(text) = report::json(plan).and_then(|j| report::structured(j, req.output == Output::Yaml)) {
                let _ = std::io::stdout().write_all(text.as_bytes());
            }
        }
        return refuse(e, env);
    }
    let Some(x) = &plan.exec else {
        return Exit::Ok.code();
    };
    let _ = std::io::stdout().flush();
    match exec::run(x, &report::start_line(plan, x)) {
        Ok(code) => code,
        Err(r) => refuse(&r, env),
    }
}
