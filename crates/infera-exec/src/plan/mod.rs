//! The Plan: the exact program, argv, environment, steps and findings. A pure function of
//! the Request, the Facts (the image's and the trees') and the overlay's manifests: no
//! module under `plan/` reads a file. `--dry-run` prints it, the real run carries it out.

pub(crate) mod argv;
pub(crate) mod caps;
pub(crate) mod defaults;
mod env;
pub(crate) mod gpu;
mod layout;
pub(crate) mod load;
pub(crate) mod memory;
pub(crate) mod model;
pub(crate) mod node;
pub(crate) mod pd;
pub(crate) mod program;
pub(crate) mod ranks;
pub(crate) mod rules;
pub(crate) mod safety;
pub(crate) mod select;
mod share;
mod steps;
pub(crate) mod transport;
mod usable;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::Serialize;

use program::ProgramError;

use crate::error::UsageError;
use crate::plan::caps::CapRow;
use crate::request::Request;
use crate::spec::ExecSpec;
use infera_core::error::Refusal;
use infera_facts::envvars::Env;
use infera_facts::finding::Finding;
use infera_facts::model::ModelFacts;
use infera_facts::{Facts, FactsView};
use infera_overlay::overlay::Overlay;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct EngineView {
    pub name: &'static str,
    pub version: Option<String>,
    pub module: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan<'a> {
    pub role: &'static str,
    pub family: Option<String>,
    #[serde(serialize_with = "infera_facts::ser::ser_opt_path")]
    pub tree: Option<PathBuf>,
    pub engine: Option<EngineView>,
    pub facts: FactsView<'a>,
    pub capabilities: Vec<CapRow>,
    pub exec: Option<ExecSpec>,
    /// This pod's place in a multi-node group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupView>,
    /// A prefill or decode pod: what the router needs to know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pd: Option<pd::PdView>,
    pub findings: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Refusal>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct GroupView {
    pub size: u32,
    pub rank: u32,
    pub leader: Option<String>,
    pub source: String,
}

/// Everything the plan is made of, read before it: it reads no file.
pub(crate) struct Inputs<'a> {
    pub req: &'a Request,
    pub facts: &'a Facts,
    /// The engine the run starts, decided once (None: the router, or another program).
    pub engine: &'a Result<Option<infera_facts::engines::Engine>, Refusal>,
    /// Its args, read once (None without an engine).
    pub args: Option<&'a infera_facts::engine_args::EngineArgs>,
    /// The router's args, read once (the router only).
    pub router: Option<&'a Result<infera_facts::router_args::RouterArgs, infera_facts::router_args::RouterArgsError>>,
    /// The model the args name, read from its config.json.
    pub models: &'a BTreeMap<OsString, ModelFacts>,
    pub overlay: &'a Result<Overlay, Refusal>,
    /// The tree, selected once, with what was read about it; None when there is no
    /// Python, ROCm or overlay to select by (the plan refuses for that first).
    pub selected: Option<&'a Result<Selected, Refusal>>,
    pub env: &'a Env,
    /// The node judged against: this one at root `/`, `--node`'s, or none (an image root).
    pub node: Option<&'a infera_facts::node::NodeFacts>,
    /// The GPUs the run may use: the pod's environment's count, else the node's.
    pub gpus: &'a Result<infera_facts::gpus::Gpus, infera_facts::gpus::GpuError>,
}

/// The tree the run uses with its facts (its files' walk, its modules, its integrity
/// check), the image's copies of the tree's top-level modules, and what the selection said.
#[derive(Debug, Clone)]
pub(crate) struct Selected {
    pub tree: infera_overlay::overlay::Tree,
    pub site: infera_facts::site::SiteIndex,
    pub findings: Vec<Finding>,
}

/// What in a node would fail or slow any engine, judged without an image (`infera-exec
/// node`): the refusal of a node no GPU engine can run on (no GPU listed), and the warnings:
/// partitions, NUMA balancing, the driver. (The /dev/shm of the pod that ran it is that
/// pod's, not a worker's: not judged here.)
pub(crate) fn node_findings(node: &infera_facts::node::NodeFacts) -> (Vec<Finding>, Option<Refusal>) {
    let mut f = Vec::new();
    if !node.driver_loaded {
        f.push(Finding::warn("node-no-driver", "no amdgpu driver is loaded (no /sys/module/amdgpu)"));
    }
    gpu::settings(node, &gpu::processors(&node.gpus.iter().collect::<Vec<_>>()), &mut f);
    (f, gpu::present(node).err().map(Refusal::from))
}

pub(crate) fn plan<'a>(inp: &Inputs<'a>) -> Plan<'a> {
    let mut p = Plan {
        role: inp.req.role.name(),
        family: None,
        tree: None,
        engine: None,
        facts: inp.facts.view(inp.models, inp.node, inp.gpus),
        capabilities: Vec::new(),
        exec: None,
        group: inp.req.group.as_ref().map(|g| GroupView {
            size: g.size,
            rank: g.rank,
            leader: g.leader.clone(),
            source: g.source.clone(),
        }),
        pd: None,
        findings: inp.facts.findings.iter().chain(inp.node.iter().flat_map(|n| &n.findings)).cloned().collect(),
        error: None,
    };
    for (name, ours) in infera_facts::envvars::misspelt(inp.env) {
        p.findings.push(Finding::warn(
            "env-misspelt",
            format!("{name} is not a variable infera-exec reads (it is ignored); did you mean {ours}?"),
        ));
    }
    if let Err(e) = build(inp, &mut p) {
        p.error = Some(e);
    }
    accept(&mut p.findings, inp.req);
    p
}

/// The warnings the pod accepts (`--allow`), marked with why: they stay in the plan.
pub(crate) fn accept(findings: &mut [Finding], req: &Request) {
    for f in findings.iter_mut().filter(|f| f.level == infera_facts::finding::Level::Warn) {
        if let Some(why) = req.allow_why.get(&f.code) {
            f.accepted = Some(why.clone());
        }
    }
}

/// What the stages of a plan share once the tree and the target are known.
struct Stage<'a> {
    inp: &'a Inputs<'a>,
    python: &'a infera_facts::python::Python,
    overlay: &'a Overlay,
    tree: &'a infera_overlay::overlay::Tree,
    run: select::Run<'a>,
    engine: Option<infera_facts::engines::Engine>,
    /// The engine under infera's wrapper module (not a program of the pod's own choosing).
    wrapped: Option<infera_facts::engines::Engine>,
    args: infera_facts::engine_args::Read,
    /// Options the launcher's defaults leave alone: an unknown option in the args may be meant
    /// as them (said as a warning where no recorded list covers the engine's version).
    unreadable: Vec<infera_facts::engines::Opt>,
}

fn build<'a>(inp: &'a Inputs<'a>, p: &mut Plan) -> Result<(), Refusal> {
    let (req, facts) = (inp.req, inp.facts);
    before_the_image(inp, p)?;
    let python = facts.python.as_ref().map_err(Clone::clone)?;
    let rocm = facts.rocm.as_ref().map_err(Clone::clone)?;
    let overlay = inp.overlay.as_ref().map_err(Clone::clone)?;
    let selected =
        inp.selected.ok_or_else(|| infera_core::error::internal("no tree selected"))?.as_ref().map_err(Clone::clone)?;
    p.findings.extend(selected.findings.iter().cloned());
    let (tree, site) = (&selected.tree, &selected.site);
    p.family = Some(tree.family.clone());
    p.tree = Some(tree.dir.clone());
    safety::integrity(tree)?;
    safety::walked(tree)?;
    let run = select::target(req, facts, inp.engine, overlay, tree, &mut p.findings)?;
    let engine = run.engine();
    if let Some(e) = engine {
        let module = run.module().unwrap_or_default().to_string();
        p.engine = Some(EngineView { name: e.name(), version: facts.engine(e).map(|i| i.version.clone()), module });
    }
    let wrapped = engine.filter(|e| run.module() == Some(e.info().module));
    let (args, unreadable) = engine_args(inp, engine, wrapped, p)?;
    // After the args: a misspelt option is the pod's own error, said first.
    if let Some(e) = wrapped {
        select::wrapper_parser(e, tree, facts, python, &mut p.findings)?;
    }
    if let Some(Ok(r)) = inp.router {
        model::tokenizer(req, facts, inp.models, r, &mut p.findings)?;
    }
    let st = Stage { inp, python, overlay, tree, run, engine, wrapped, args, unreadable };
    let mut notes = Vec::new();
    let copies = caps::copies(tree, site, &mut notes);
    // The router imports no capability: which copy one would be is not its concern.
    notes.retain(|n| req.role != crate::choices::Role::Server || n.code != "capability-from-image");
    p.findings.extend(notes);
    capabilities(&st, &copies, p)?;
    let addressed = addresses(&st, p)?;
    caps::usability(&mut p.capabilities, req.privileges.keep_caps.as_deref(), facts, inp.node, rocm, inp.env)?;
    safety::noexec(tree)?;
    if req.role.runs_engine() {
        gpu_presence(facts, inp.gpus, &mut p.findings);
        node::devices(facts)?;
        if let Some(e) = engine {
            gpu::check(facts, inp.node, e, inp.env, &req.allow, &mut p.findings)?;
        }
    }
    safety::shadowing(tree, site, &copies)?;
    let (mut added, prefetch) = match engine {
        Some(e) => engine_defaults(&st, e, p)?,
        None => (Vec::new(), None),
    };
    added.extend(addressed);
    // What the engine's parser exits 2 without, after the launcher's own refusals: for a
    // worker, and for a check given the pod's args (a bare `check` asks what the image and
    // the tree can do, of no particular pod).
    let describes_a_pod =
        req.role == crate::choices::Role::Worker || (req.role == crate::choices::Role::Check && !req.args.is_empty());
    // (a `--config` file that could not be read may give it: nothing refused on a guess)
    // (`--help` is answered before any of them: the parser prints it and exits 0.)
    let help = st.args.flags.iter().any(|f| f.written == "--help" || f.written == "-h");
    if let Some(e) = wrapped.filter(|_| describes_a_pod && st.args.defaults && !help) {
        argv::required(e, &st.args.parsed)?;
        // The rank that serves and registers: what it needs only after the engine's load.
        if req.group.as_ref().is_none_or(|g| g.rank == 0) {
            // An image's variables alone are not the pod's (check --image without --env).
            let pod_env = req.image.image.is_empty() || !req.pod_env.is_empty() || !req.env_files.is_empty();
            transport::check(e, &st.args.parsed, (inp.env, pod_env), &req.allow, &mut p.findings)?;
        }
    }
    exec_spec(&st, &copies, added, p)?;
    if let Some(x) = p.exec.as_mut() {
        x.prefetch = prefetch;
    }
    Ok(())
}

/// What is checked before the image's facts: the args as the kernel can pass them, the
/// router's args, the environment a dry run plans with, and the node's environment (it depends
/// on neither the image nor the tree).
fn before_the_image(inp: &Inputs, p: &mut Plan) -> Result<(), Refusal> {
    let (req, facts) = (inp.req, inp.facts);
    if let Some(i) = req.args.iter().position(|a| a.as_bytes().contains(&0)) {
        return Err(UsageError::ArgNul { index: i + 1 }.into());
    }
    if let Some(Err(e)) = inp.router {
        return Err(e.clone().into());
    }
    if req.dry_run
        && !facts.root.is_host_root()
        && !facts.root.is_image()
        && req.image_env.is_empty()
        && req.pod_env.is_empty()
        && req.env_files.is_empty()
    {
        p.findings.push(infera_facts::finding::Finding::warn(
            "host-environment",
            "--root without --image-env: the environment planned with is this shell's, not the image's (its PATH, \
             ROCM_PATH, ... are not applied, and this shell's variables are kept as if the pod set them); give the \
             image's with --image-env (a `podman image inspect IMAGE` file, or KEY=VALUE)",
        ));
    }
    if req.role.runs_engine() {
        node::check(req.engine, facts, inp.env, &mut p.findings)?;
    }
    Ok(())
}

/// The engine's defaults and rules over the args, then (for a role that runs it) the memory
/// the node must give it and the weight load the storage needs: the args added and the
/// read-ahead, if any.
fn engine_defaults(
    st: &Stage,
    e: infera_facts::engines::Engine,
    p: &mut Plan,
) -> Result<(Vec<OsString>, Option<crate::spec::PrefetchSpec>), Refusal> {
    let (inp, req, facts) = (st.inp, st.inp.req, st.inp.facts);
    let parsed = defaults::with_unreadable(&st.args.parsed, &st.unreadable);
    let ctx = defaults::Ctx {
        req,
        facts,
        gpus: inp.gpus,
        models: inp.models,
        engine: e,
        parsed: &parsed,
        env: inp.env,
        defaults: st.args.defaults,
        vram: inp.node.and_then(|n| gpu::allocated(n, facts).iter().filter_map(|g| g.vram).min()),
    };
    let applied = apply(&ctx, &mut p.findings)?;
    let mut added = applied.added.clone();
    if !req.role.runs_engine() {
        return Ok((added, None));
    }
    let version = facts.engine(e).map(|i| i.version.as_str());
    let run = memory::Run { engine: e, version, parsed: &parsed, applied: &applied };
    memory::check(facts, inp.node, &run, &req.allow, &mut p.findings)?;
    let memory = inp.node.and_then(|n| n.pod.memory.as_ref());
    let l = load::plan(e, version, &parsed, applied.model, memory, req.prefetch, &mut p.findings);
    added.extend(l.added);
    Ok((added, l.prefetch))
}

/// The args as read once for this engine (with what reading them found), checked for the
/// forms the engine's parser, or infera's wrapper, refuses.
fn engine_args(
    inp: &Inputs,
    engine: Option<infera_facts::engines::Engine>,
    wrapped: Option<infera_facts::engines::Engine>,
    p: &mut Plan,
) -> Result<(infera_facts::engine_args::Read, Vec<infera_facts::engines::Opt>), Refusal> {
    let Some(a) = inp.args.filter(|a| Some(a.engine) == engine) else {
        let none = infera_facts::engine_args::Read { defaults: true, ..Default::default() };
        return Ok((none, Vec::new()));
    };
    p.findings.extend(a.findings.iter().cloned());
    let read = a.read.clone()?;
    let version = inp.facts.engine(a.engine).map(|i| i.version.as_str());
    // The wrapper's refusals first: an abbreviation it refuses is not also "read as" one.
    if let Some(e) = wrapped {
        argv::wrapper_dialect(e, e.info().module, &read.flags, a.list, &read.parsed)?;
    }
    argv::abbreviations(a.engine, version, a.list, &read.parsed, &mut p.findings)?;
    let unreadable = argv::unknown_options(a.engine, version, a.list, &read.flags, &mut p.findings)?;
    Ok((read, unreadable))
}

/// The capability table: what the pod requires against what the tree and the image offer.
fn capabilities(st: &Stage, copies: &caps::Copies, p: &mut Plan) -> Result<(), Refusal> {
    let (req, facts) = (st.inp.req, st.inp.facts);
    // A capability kept for one engine's images is offered to the pod's other programs in
    // such an image too (the stack's kvd sidecar requires hipFile in the vLLM image): the
    // engine this run starts, else for a program (not the router) the one engine the image has.
    let image_engine = match (st.engine, facts.engines.as_slice()) {
        (Some(e), _) => Some(e),
        (None, [one]) if req.role == crate::choices::Role::Run => Some(one.engine),
        _ => None,
    };
    match caps::rows(req, st.overlay, st.tree, st.engine, image_engine, &st.args, copies) {
        Ok(rows) => {
            p.capabilities = rows;
            Ok(())
        }
        Err((rows, refusal)) => {
            p.capabilities = rows;
            Err(refusal)
        }
    }
}

/// The address infera's wrapper will publish, made explicit (not on a vLLM rank > 0, which
/// runs vLLM itself, nor on sglang's ranks > 0, which do not register), and what a prefill
/// or decode pod tells the router. Returns the args it adds.
fn addresses(st: &Stage, p: &mut Plan) -> Result<Vec<OsString>, Refusal> {
    let (req, parsed, env) = (st.inp.req, &st.args.parsed, st.inp.env);
    let mut addressed = Vec::new();
    let mut advertised = None;
    if let Some(e) = st.wrapped {
        if req.group.as_ref().is_none_or(|g| g.size < 2 || g.rank == 0) {
            let role = pd::role(e, &st.args, parsed);
            advertised = pd::advertise(e, parsed, role, st.args.defaults, env, &mut addressed, &mut p.findings)?;
        }
    }
    if let Some(e) = st.engine {
        let group = req.group.as_ref();
        p.pd = pd::plan(e, &st.args, parsed, group, advertised.as_deref(), st.inp.facts, env, &mut p.findings)?;
    }
    Ok(addressed)
}

/// The exec section: program, argv, environment, working directory and steps.
fn exec_spec(st: &Stage, copies: &caps::Copies, added: Vec<OsString>, p: &mut Plan) -> Result<(), Refusal> {
    let (req, facts, python) = (st.inp.req, st.inp.facts, st.python);
    let own: Vec<PathBuf> = st
        .tree
        .paths
        .caps
        .iter()
        .filter(|(c, _)| copies.get(*c).is_some_and(|i| i.copy == caps::Copy::Tree))
        .map(|(_, d)| d.clone())
        .collect();
    let mut child = env::child_env(st.tree, &own, st.inp.env, &mut p.findings);
    let (rdma_drivers, replace) = steps::libionic(facts, st.overlay, st.inp.env, &mut p.findings);
    if let Some(v) = rdma_drivers {
        child.put(infera_facts::envvars::RDMAV_DRIVERS, v);
    }
    let (cwd, host_cwd) = workdir(req, facts)?;
    let (program, host_program, host_argv0, mut argv, file) = command(st, p);
    argv.extend(req.args.iter().cloned());
    argv.extend(added.iter().cloned());
    let interpreter = facts.root.host_of(&python.resolved);
    // A rank > 0 waits for the leader's name before anything else (and before its weights).
    let mut steps: Vec<_> = await_leader(req).into_iter().collect();
    steps.extend(replace);
    steps.extend(steps::patches(req, facts, st.overlay, (&python.executable, interpreter.as_ref()), &mut p.findings));
    let mut x = ExecSpec {
        program: program.clone(),
        host_program,
        host_argv0,
        argv,
        env: child.env,
        env_set: child.set,
        added_args: added,
        cwd,
        host_cwd,
        init: req.init.clone(),
        privileges: req.privileges.clone(),
        steps,
        args_digest: None,
        prefetch: None,
    };
    if let (Some(e), Some(_)) = (st.engine, req.group.as_ref().filter(|g| g.size > 1)) {
        let digest = args_digest(e, &req.args, &x.added_args);
        x.env.insert(infera_facts::envvars::INFERA_ARGS_DIGEST.into(), digest.clone().into());
        x.env_set.push(infera_facts::envvars::INFERA_ARGS_DIGEST.to_string());
        x.args_digest = Some(digest);
    }
    p.exec = Some(x);
    if let Some(file) = file {
        program::runnable(&program, st.run.what(), file)?;
    }
    Ok(())
}

/// The program, its host file and argv[0] with --root, its argv up to the user's args, and
/// what the file is. The plan names container paths: with --root (an unpacked image read
/// in place) a real run execs the image's interpreter file from this host, resolved inside
/// the root (a venv's link may be absolute and would point at the host's own python), with
/// the name (a venv's python) as argv[0], where CPython looks for pyvenv.cfg.
type Command<'a> = (PathBuf, Option<PathBuf>, Option<PathBuf>, Vec<OsString>, Option<&'a infera_core::exe::ExecFile>);

fn command<'a>(st: &Stage<'a>, p: &mut Plan) -> Command<'a> {
    let (req, facts, python) = (st.inp.req, st.inp.facts, st.python);
    match &st.run {
        select::Run::Module { module, options, .. } => {
            let program = python.executable.clone();
            let host = facts.root.host_of(&python.resolved);
            let argv0 =
                (host.is_some() && python.executable != python.resolved).then(|| facts.root.host(&python.executable));
            let mut argv: Vec<OsString> = vec![program.clone().into_os_string()];
            argv.extend(options.iter().cloned());
            // A rank > 0 of a group under the wrapper runs the engine's follower, where it has one.
            let follower = st
                .wrapped
                .and_then(|e| e.info().follower)
                .filter(|_| req.group.as_ref().is_some_and(|g| g.size > 1 && g.rank > 0));
            if let Some(follower) = follower {
                argv.extend(["-c".into(), OsString::from(follower)]);
                p.findings.push(Finding::info(
                    "vllm-follower",
                    "rank > 0 of a vLLM group: runs vLLM's own CLI headless in the python process, after \
                     infera.engine.vllm's argument split and environment defaults (`python -c`), not the \
                     wrapper: the wrapper waits for a /health that a headless rank never serves \
                     (infera/engine/vllm/worker.py _wait_ready), so its follower gate is never reached",
                ));
            } else {
                argv.extend(["-m".into(), OsString::from(*module)]);
            }
            (program, host, argv0, argv, facts.interpreter_file.as_ref())
        }
        select::Run::Program { path, host, file } => {
            (path.clone(), host.clone(), None, vec![path.clone().into_os_string()], *file)
        }
    }
}

/// The working directory: the request's, as the image has it (and where it is on this
/// host with --root).
fn workdir(req: &Request, facts: &Facts) -> Result<(Option<PathBuf>, Option<PathBuf>), ProgramError> {
    let Some(dir) = &req.chdir else { return Ok((None, None)) };
    match &facts.workdir {
        Some(Err(reason)) => Err(ProgramError::NoWorkdir { dir: dir.clone(), reason: reason.clone() }),
        Some(Ok(resolved)) => Ok((Some(dir.clone()), facts.root.host_of(resolved))),
        _ => Ok((Some(dir.clone()), None)),
    }
}

/// The step that makes a rank > 0 wait until the leader's name resolves.
/// (The engine's ranks only: a sidecar of the same pod, `python3 -m infera.kvd`, does not
/// need the leader.)
fn await_leader(req: &Request) -> Option<crate::spec::Step> {
    if !req.role.runs_engine() {
        return None;
    }
    let g = req.group.as_ref().filter(|g| g.size > 1 && g.rank > 0 && g.leader_wait > 0)?;
    let leader = g.leader.as_ref()?;
    if leader.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    Some(crate::spec::Step::AwaitLeader { host: leader.clone(), timeout_seconds: g.leader_wait })
}

/// BLAKE3 of the engine args every rank must share: the user's and the launcher's, the flags
/// that differ per rank left out, NUL-separated.
fn args_digest(e: infera_facts::engines::Engine, args: &[OsString], added: &[OsString]) -> String {
    let all: Vec<OsString> = args.iter().chain(added).cloned().collect();
    let mut h = blake3::Hasher::new();
    for a in infera_facts::dialect::strip(e, &all, &ranks::RANK_OPTS) {
        h.update(a.as_bytes());
        h.update(&[0]);
    }
    h.finalize().to_hex()[..16].to_string()
}

/// GPUs allocated by the visible-devices variables but no device nodes: a warning, so
/// CPU-only test machines keep working.
fn gpu_presence(
    facts: &Facts,
    gpus: &Result<infera_facts::gpus::Gpus, infera_facts::gpus::GpuError>,
    findings: &mut Vec<Finding>,
) {
    let (Some(h), Ok(g)) = (facts.host.as_ref(), gpus.as_ref()) else { return };
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

/// The args to append after the user's and what they make the engine run with, or the refusal.
fn apply<'a>(ctx: &defaults::Ctx<'a>, findings: &mut Vec<Finding>) -> Result<defaults::Applied<'a>, Refusal> {
    let rules = crate::rule_table::shipped();
    let gpus = ctx.gpus.as_ref().map_err(Clone::clone)?.count;
    let ints = argv::Ints::read(ctx.engine, ctx.parsed, findings)?;
    let model = model::model_of(ctx, findings)?;
    let mut added = Vec::new();
    // A rank of a multi-node group: its flags and the sizes across the group first.
    let multi = match ctx.req.group.as_ref().filter(|g| g.size > 1) {
        Some(g) => {
            let user = ranks::UserSizes { tp: ints.tp, pp: ints.pp, dp: ints.dp };
            Some(ranks::plan(ctx.engine, ctx.parsed, g, gpus, &user, &mut added, findings)?)
        }
        None => None,
    };
    let mut eff = if ctx.defaults {
        defaults::defaults(ctx, gpus, model, &ints, multi.as_ref(), &mut added, findings)
    } else {
        let mut none = Vec::new();
        let eff = defaults::defaults(ctx, gpus, model, &ints, multi.as_ref(), &mut none, &mut Vec::new());
        // What the engine runs with is the user's (and the file's, unknown) settings only.
        defaults::Effective {
            tp: multi.as_ref().map_or(ints.tp, |m| m.tp),
            kv: ctx.parsed.value(infera_facts::engines::Opt::KvCacheDtype).map(str::to_string),
            ..eff
        }
    };
    let pp = multi.as_ref().and_then(|m| m.pp).or(ints.pp);
    if let Some(m) = multi {
        eff.nnodes = m.nnodes;
    }
    rules::check_rules(ctx, rules, &eff, findings)?;
    Ok(defaults::Applied { added, tp: eff.tp, pp, model })
}
