//! The Plan: the exact program, argv, environment, steps and findings. A pure function of
//! the Request, the Facts (the image's and the trees') and the overlay's manifests: no
//! module under `plan/` reads a file. `--dry-run` prints it, the real run carries it out.

mod args;
mod caps;
mod env;
mod program;
mod safety;
mod select;
mod usable;

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::Serialize;

pub use caps::{implied as implied_capabilities, CapRow};

use crate::cli::{Request, Role, UsageError};
use crate::engines::Engine;
use crate::envvars::Env;
use crate::error::{Exit, Refusal};
use crate::facts::{Facts, FactsView};
use crate::finding::Finding;
use crate::overlay::{Overlay, Tree};
use crate::spec::ExecSpec;

#[derive(Debug, Clone, Serialize)]
pub struct EngineView {
    pub name: &'static str,
    pub version: Option<String>,
    pub module: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan<'a> {
    pub role: &'static str,
    pub family: Option<String>,
    pub tree: Option<PathBuf>,
    pub engine: Option<EngineView>,
    pub facts: FactsView<'a>,
    pub capabilities: Vec<CapRow>,
    pub exec: Option<ExecSpec>,
    pub findings: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Refusal>,
}

impl Plan<'_> {
    pub fn exit(&self) -> Exit {
        self.error.as_ref().map_or(Exit::Ok, |e| e.exit)
    }
}

pub struct Inputs<'a> {
    pub req: &'a Request,
    pub facts: &'a Facts,
    pub overlay: &'a Result<Overlay, Refusal>,
    pub env: &'a Env,
}

/// The tree the request would run from, if one can be chosen: for gathering the facts
/// that are only wanted about that tree (its integrity check).
pub fn selected_family(inp: &Inputs) -> Option<String> {
    let (Ok(python), Ok(rocm), Ok(overlay)) = (&inp.facts.python, &inp.facts.rocm, inp.overlay) else {
        return None;
    };
    select::family(inp.req, python, rocm, overlay).map(|t| t.family.clone())
}

pub fn plan<'a>(inp: &Inputs<'a>) -> Plan<'a> {
    let mut p = Plan {
        role: inp.req.role.name(),
        family: None,
        tree: None,
        engine: None,
        facts: inp.facts.view(),
        capabilities: Vec::new(),
        exec: None,
        findings: inp.facts.findings.clone(),
        error: None,
    };
    if let Err(e) = build(inp, &mut p) {
        p.error = Some(e);
    }
    p
}

fn build(inp: &Inputs, p: &mut Plan) -> Result<(), Refusal> {
    let (req, facts) = (inp.req, inp.facts);
    if let Some(i) = req.args.iter().position(|a| a.as_bytes().contains(&0)) {
        return Err(UsageError::ArgNul { index: i + 1 }.into());
    }
    let python = facts.python.as_ref().map_err(Clone::clone)?;
    let rocm = facts.rocm.as_ref().map_err(Clone::clone)?;
    let overlay = inp.overlay.as_ref().map_err(Clone::clone)?;

    let tree = select::tree(req, python, rocm, overlay, &mut p.findings)?;
    p.family = Some(tree.family.clone());
    p.tree = Some(tree.dir.clone());
    safety::integrity(tree)?;

    let (engine, module) = target(req, facts, overlay, tree, p)?;
    select::module_present(tree, module)?;

    let parsed = engine.map(|e| crate::dialect::read(e, &req.args)).unwrap_or_default();
    p.capabilities = match caps::rows(&req.require, overlay, tree, engine, &parsed) {
        Ok(rows) => rows,
        Err((rows, refusal)) => {
            p.capabilities = rows;
            return Err(refusal);
        }
    };
    caps::usability(&mut p.capabilities, req.privileges.keep_caps.as_deref(), facts, rocm, inp.env)?;
    safety::noexec(tree)?;
    if req.role.runs_engine() {
        gpu_presence(facts, &mut p.findings);
    }
    safety::shadowing(tree, facts)?;

    let added = match engine {
        Some(e) => args::apply(&args::Ctx { req, facts, engine: e, parsed: &parsed, env: inp.env }, &mut p.findings)?,
        None => Vec::new(),
    };
    let child = env::child_env(tree, inp.env, &mut p.findings);
    // The plan names container paths. With --root (an unpacked image read in place) a real
    // run execs the image's interpreter file from this host: `host_program`, the
    // interpreter resolved inside the root (a venv's link may be absolute and would point
    // at the host's own python).
    let program = python.executable.clone();
    let host_program = (!facts.root.is_host_root()).then(|| facts.root.host(&python.resolved));
    let mut argv: Vec<OsString> = vec![program.clone().into_os_string(), "-m".into(), module.into()];
    argv.extend(req.args.iter().cloned());
    argv.extend(added.iter().cloned());
    p.exec = Some(ExecSpec {
        program: program.clone(),
        host_program,
        argv,
        env: child.env,
        env_set: child.set,
        added_args: added,
        cwd: None,
        init: req.init.clone(),
        privileges: req.privileges.clone(),
        steps: Vec::new(),
    });
    if let Some(file) = &facts.interpreter_file {
        program::runnable(&program, file)?;
    }
    Ok(())
}

/// The engine (workers) and the module of the tree to run.
fn target<'t>(
    req: &Request,
    facts: &Facts,
    overlay: &Overlay,
    tree: &'t Tree,
    p: &mut Plan,
) -> Result<(Option<Engine>, &'t str), Refusal> {
    if req.role == Role::Server {
        return Ok((None, select::server_module(tree)?));
    }
    let e = select::engine(req.engine, facts)?;
    let module = select::engine_module(tree, overlay, e, facts, &mut p.findings)?;
    p.engine = Some(EngineView {
        name: e.name(),
        version: facts.engine(e).map(|i| i.version.clone()),
        module: module.to_string(),
    });
    Ok((Some(e), module))
}

/// GPUs allocated by the visible-devices variables but no device nodes: a warning, so
/// CPU-only test machines keep working.
fn gpu_presence(facts: &Facts, findings: &mut Vec<Finding>) {
    let (Some(h), Ok(g)) = (facts.host.as_ref(), facts.gpus.as_ref()) else { return };
    if g.source.from_env() && g.count.unwrap_or(0) > 0 && !h.kfd && h.render_nodes == 0 {
        findings.push(Finding::warn(
            "gpus-not-present",
            format!(
                "{} GPUs expected ({}) but the container has no /dev/kfd or /dev/dri/renderD* device nodes",
                g.count.unwrap_or(0),
                g.source
            ),
        ));
    }
}
