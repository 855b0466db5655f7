//! What a plan is made from, read once: the image (`--root`, or an archive), its facts, the
//! engine and its args, the model, the nodes (`--node`, or this one), the overlay and the
//! tree it selects.

use std::ffi::OsString;

use crate::error::{self};
use crate::request::{self, Request, Verify};
use crate::{choices, exec, imageenv, plan};
use infera_core::error::Refusal;
use infera_facts::envvars::Env;

/// What is read about one image before a tree is chosen: the environment its containers
/// start with, its root, its facts, the engine and its args (or the router's), the model.
pub(crate) struct Gathered {
    pub(crate) env: Env,
    pub(crate) root: infera_core::rootfs::Root,
    pub(crate) facts: infera_facts::Facts,
    pub(crate) engine: Result<Option<infera_facts::engines::Engine>, Refusal>,
    pub(crate) args: Option<infera_facts::engine_args::EngineArgs>,
    pub(crate) router:
        Option<Result<infera_facts::router_args::RouterArgs, infera_facts::router_args::RouterArgsError>>,
    pub(crate) models: std::collections::BTreeMap<OsString, infera_facts::model::ModelFacts>,
    /// The nodes judged against (`--node`, or this node at root `/`, or none), in order.
    pub(crate) nodes: Vec<Node>,
    /// What reading said that every plan of this image carries (this shell's variables left
    /// out of the pod's environment).
    pub(crate) notes: Vec<infera_facts::finding::Finding>,
}

/// A node a plan is judged against, with the GPUs a run on it may use.
pub(crate) struct Node {
    pub(crate) facts: Option<std::sync::Arc<infera_facts::node::NodeFacts>>,
    pub(crate) gpus: Result<infera_facts::gpus::Gpus, infera_facts::gpus::GpuError>,
}

/// What `--node` gives, each read once: the node types (a part, a profile, or a Kubernetes
/// file's node types), each with the worker's pod (`--shm-size`, `--memory`) in place of any
/// pod a profile names; and the nodes of a Kubernetes file no type holds. None given, none.
pub(crate) struct GivenNodes {
    pub nodes: Vec<std::sync::Arc<infera_facts::node::NodeFacts>>,
    pub unjudged: Vec<infera_facts::node::Unjudged>,
}

/// The largest `--node` file read: a cluster's `kubectl get nodes -o json` (with each node's
/// image list) is a few tens of MB.
const NODE_FILE_LIMIT: u64 = 256 << 20;

pub(crate) fn given_nodes(req: &Request) -> Result<GivenNodes, Refusal> {
    use infera_facts::node::SpecProblem;
    // A regular file only, opened without blocking (a FIFO is said, not waited on); `-`: stdin.
    let read = |p: &std::path::Path| {
        if p == std::path::Path::new("-") {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin(), NODE_FILE_LIMIT), &mut v)?;
            return Ok(v);
        }
        infera_core::rootfs::read_bounded(p, NODE_FILE_LIMIT)
    };
    let mut given = GivenNodes { nodes: Vec::new(), unjudged: Vec::new() };
    for s in &req.node {
        let g = infera_facts::fleet::from_spec(s, read).map_err(|e| {
            let (spec, why) = (e.spec, e.why);
            Refusal::from(match e.kind {
                SpecProblem::Unknown => error::UsageError::NodeUnknown { spec, why },
                SpecProblem::Missing => error::UsageError::NodeProfileMissing { spec, why },
                SpecProblem::Invalid => error::UsageError::NodeProfile { spec, why },
            })
        })?;
        for mut n in g.nodes {
            n.pod = req.worker_pod.clone();
            given.nodes.push(std::sync::Arc::new(n));
        }
        given.unjudged.extend(g.unjudged);
    }
    Ok(given)
}

/// The nodes a plan of this image is judged against: those given, else this node at root `/`.
fn nodes(
    root: &infera_core::rootfs::Root,
    env: &Env,
    given: &[std::sync::Arc<infera_facts::node::NodeFacts>],
) -> Vec<Node> {
    let found: Vec<Option<std::sync::Arc<infera_facts::node::NodeFacts>>> = if given.is_empty() {
        vec![infera_facts::node::gather(root, None).map(std::sync::Arc::new)]
    } else {
        given.iter().cloned().map(Some).collect()
    };
    let node = |facts: Option<std::sync::Arc<infera_facts::node::NodeFacts>>| Node {
        gpus: infera_facts::gpus::detect(root, env, facts.as_deref()),
        facts,
    };
    found.into_iter().map(node).collect()
}

impl Gathered {
    /// The image (`--root`, or the archive `image` names) and what the request reads of it;
    /// the model's facts are left for [`model_facts`], after any wait for the model.
    pub(crate) fn read(
        req: &Request,
        env: &Env,
        image: Option<&std::ffi::OsStr>,
        given: &[std::sync::Arc<infera_facts::node::NodeFacts>],
    ) -> Result<Gathered, Refusal> {
        let (env, root, note) = prepare(req, env, image)?;
        let facts = infera_facts::Facts::gather(&root, &env, &wanted(req, &env));
        let engine = plan::select::engine(req, &facts).map_err(Refusal::from);
        let args = engine.as_ref().ok().copied().flatten().map(|e| {
            let version = facts.engine(e).map(|i| i.version.as_str());
            infera_facts::engine_args::EngineArgs::read(e, version, &req.args, &root, req.chdir.as_deref())
        });
        let router =
            (req.role == choices::Role::Server).then(|| infera_facts::router_args::RouterArgs::read(&req.args));
        let models = Default::default();
        let nodes = nodes(&root, &env, given);
        Ok(Gathered { env, root, facts, engine, args, router, models, nodes, notes: note.into_iter().collect() })
    }

    /// The facts of the model the run reads (after any wait for it); its storage is probed
    /// where `--prefetch auto` may read ahead for an engine (see `infera_facts::storage::probe`).
    pub(crate) fn read_models(&mut self, req: &Request) {
        let probe = req.role.runs_engine() && req.prefetch == choices::Prefetch::Auto;
        self.models = model_facts(&self.root, &self.env, self.model(), probe);
    }

    /// The model the run reads: the worker's, or the router's tokenizer path.
    pub(crate) fn model(&self) -> Option<&OsString> {
        match &self.router {
            Some(r) => r.as_ref().ok().and_then(|r| r.tokenizer_path()),
            None => self.args.as_ref().and_then(|a| a.model()),
        }
    }

    /// The plan for this image with the tree the request selects (the selection and the
    /// tree's facts are read here, once), given to `then`.
    pub(crate) fn with_plan<R>(
        &self,
        req: &Request,
        choice: &plan::select::TreeChoice,
        node: &Node,
        overlay: &Result<infera_overlay::overlay::Overlay, Refusal>,
        opts: &infera_overlay::overlay::LoadOptions,
        then: impl FnOnce(&plan::Plan) -> R,
    ) -> R {
        let selected = select(req, choice, &self.facts, overlay, opts, &self.root);
        let inputs = plan::Inputs {
            req,
            facts: &self.facts,
            engine: &self.engine,
            args: self.args.as_ref(),
            router: self.router.as_ref(),
            models: &self.models,
            overlay,
            selected: selected.as_ref(),
            env: &self.env,
            node: node.facts.as_deref(),
            gpus: &node.gpus,
        };
        let mut plan = plan::plan(&inputs);
        plan.findings.splice(0..0, self.notes.iter().cloned());
        then(&plan)
    }
}

/// The environment the plan is made with, and the image's root, checked readable: `--root`,
/// or the archive `image` names. With `--image` (its config's `Env`), or `--env`/`--env-file`
/// given, it is the image's and the pod's, over the launcher's own settings only; else this
/// shell's with `--image-env` over it. The finding names this shell's variables left out.
fn prepare(
    req: &Request,
    env: &Env,
    image: Option<&std::ffi::OsStr>,
) -> Result<(Env, infera_core::rootfs::Root, Option<infera_facts::finding::Finding>), Refusal> {
    let abs = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let volumes = req.volumes.iter().map(|(at, dir)| (at.clone(), abs(dir))).collect();
    let pod = imageenv::resolve_pod(&req.env_files, &req.pod_env, &req.root, image.is_some())?;
    let (mut out, dropped) =
        if image.is_some() || !pod.is_empty() { imageenv::launcher_only(env) } else { (env.clone(), Vec::new()) };
    let root = match image {
        Some(reference) => {
            let (image_env, root) = image_root(reference, &req.image.platform, !req.image.no_verify)?;
            out.extend(image_env);
            root.with_image_volumes(volumes)
        }
        None => {
            out.extend(imageenv::resolve(&req.image_env, &req.root, &req.image_env_said)?);
            infera_core::rootfs::Root::with_volumes(abs(&req.root), volumes)
        }
    };
    root.check()?;
    out.extend(pod);
    Ok((out, root, imageenv::dropped_finding(&dropped)))
}

/// `check --image`: the image read from its archive, and its config's `Env` (what
/// `--image-env` gives for a directory).
fn image_root(
    reference: &std::ffi::OsStr,
    platform: &infera_core::image::Platform,
    verify: bool,
) -> Result<(Vec<(OsString, OsString)>, infera_core::rootfs::Root), Refusal> {
    let started = std::time::Instant::now();
    let shown = reference.to_string_lossy();
    let shown = shown.as_ref();
    let reference_said = shown;
    let (done, read) = (std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicU64::new(0));
    // On stderr (the answer is stdout's) as each layer ends, and as a long one goes on; the
    // layers are read in parallel, so the rate is of all the bytes ended so far.
    let progress = |s: &infera_core::image::Step| {
        use std::sync::atomic::Ordering::Relaxed;
        let (i, n, secs) = (s.layer, s.layers, started.elapsed().as_secs_f64());
        if !s.done {
            // Of a compressed layer only the blob's size is known beforehand: the share read.
            let of = s.blob_size.filter(|b| *b > 0).map_or(String::new(), |b| {
                format!(" ({} % of its {} MiB blob)", s.blob_read.min(b) * 100 / b, b >> 20)
            });
            tracing::info!(
                code = "image-layer",
                "{reference_said}: layer {i} of {n}: {} MiB so far{of} at {secs:.1} s",
                s.bytes >> 20
            );
            return;
        }
        let (k, total) = (done.fetch_add(1, Relaxed) + 1, read.fetch_add(s.bytes, Relaxed) + s.bytes);
        let rate = total as f64 / secs.max(1e-3) / 1e6;
        tracing::info!(
            code = "image-layer",
            "{reference_said}: layer {i} of {n} read ({} MiB); {k} of {n} layers, {} MiB in {secs:.1} s ({rate:.0} MB/s)",
            s.bytes >> 20,
            total >> 20
        );
    };
    let img =
        infera_core::image::read_with_progress(reference, platform, &infera_facts::image_keep, verify, &progress)?;
    let (kept, dropped) = imageenv::config_env(img.config.env.as_deref().unwrap_or_default());
    if !dropped.is_empty() {
        tracing::warn!(
            code = "image-env-dropped",
            "{shown}: the image config's Env entries that no process can be given (not KEY=VALUE, or with a NUL or a line break) are left out: {}",
            dropped.join(", ")
        );
    }
    Ok((kept, infera_core::rootfs::Root::of_image(img.tree, img.identity)))
}

/// What the request wants read about the image besides what every run needs.
fn wanted<'a>(req: &'a Request, env: &Env) -> infera_facts::Wanted<'a> {
    infera_facts::Wanted {
        interpreter: req.interpreter(),
        program: match &req.target {
            request::Target::Program { program } => Some(program.as_os_str()),
            _ => None,
        },
        chdir: req.chdir.as_deref(),
        engine: req.engine,
        network: req.group.as_ref().is_some_and(|g| g.size > 1)
            || [infera_facts::envvars::GLOO_SOCKET_IFNAME, infera_facts::envvars::NCCL_SOCKET_IFNAME]
                .iter()
                .any(|k| infera_facts::envvars::get(env, k).is_some()),
        infiniband: infera_facts::envvars::get(env, infera_facts::envvars::MC_GID_INDEX).is_some()
            || req.args.iter().any(|a| ib_device_flag(a.as_encoded_bytes())),
        gpu_code: req.role.runs_engine(),
    }
}

/// An option naming InfiniBand devices in any engine's spelling (`--disaggregation-ib-device`),
/// read before the engine is known: its devices are then among the facts read.
fn ib_device_flag(arg: &[u8]) -> bool {
    use infera_facts::engines::{Engine, Opt};
    Engine::all()
        .filter_map(|e| e.spelling(Opt::DisaggregationIbDevice))
        .any(|sp| sp.names().any(|n| arg.starts_with(n.as_bytes())))
}

/// A model volume the download Job is still filling: a real run in the pod waits for it (the
/// worker for its model, the router for its tokenizer path).
pub(crate) fn wait_for_model(req: &Request, root: &infera_core::rootfs::Root, model: Option<&OsString>) -> Option<i32> {
    let w = req.wait_model.as_ref().filter(|_| !req.dry_run && root.is_host_root())?;
    exec::await_models(std::slice::from_ref(model?), w)
}

/// The facts of the model the args name (its config.json: a local directory, or a repo
/// in the Hugging Face cache).
fn model_facts(
    root: &infera_core::rootfs::Root,
    env: &Env,
    model: Option<&OsString>,
    probe: bool,
) -> std::collections::BTreeMap<OsString, infera_facts::model::ModelFacts> {
    let s = |k: &str| infera_facts::envvars::get(env, k).and_then(|v| v.to_str());
    let hf = infera_facts::model::HfEnv {
        hub_cache: s(infera_facts::envvars::HF_HUB_CACHE),
        hf_home: s(infera_facts::envvars::HF_HOME),
        home: s(infera_facts::envvars::HOME),
    };
    model.map(|m| (m.clone(), infera_facts::model::detect(root, m, &hf, probe))).into_iter().collect()
}

/// The overlay's manifests and layout (the selected tree's files are read once it is known).
pub(crate) fn load_overlay(
    req: &Request,
) -> (Result<infera_overlay::overlay::Overlay, Refusal>, infera_overlay::overlay::LoadOptions) {
    let modules = match &req.target {
        request::Target::Module { module, .. } => vec![module.clone()],
        _ => Vec::new(),
    };
    let opts = infera_overlay::overlay::LoadOptions { check_writable: true, modules, lazy: true };
    let dir = req
        .overlay
        .clone()
        .unwrap_or_else(|| infera_overlay::overlay::discover(std::env::current_exe().ok().as_deref()));
    (infera_overlay::overlay::load(&dir, &opts).map_err(Refusal::from), opts)
}

/// The tree the run uses, selected once, and what only that tree needs read: its files'
/// walk, its facts and integrity check, the image's copies of its top-level modules.
fn select(
    req: &Request,
    choice: &plan::select::TreeChoice,
    facts: &infera_facts::Facts,
    overlay: &Result<infera_overlay::overlay::Overlay, Refusal>,
    opts: &infera_overlay::overlay::LoadOptions,
    root: &infera_core::rootfs::Root,
) -> Option<Result<plan::Selected, Refusal>> {
    let (Ok(python), Ok(rocm), Ok(ov)) = (&facts.python, &facts.rocm, overlay) else { return None };
    Some(plan::select::tree(choice, python, rocm, ov).map_err(Refusal::from).map(|s| {
        let mut tree = infera_overlay::overlay::selected(s.tree, opts);
        if req.verify != Verify::Off {
            tree.facts.integrity = Some(infera_overlay::payload::integrity(&tree, req.verify == Verify::Digest));
        }
        let probe: std::collections::BTreeSet<String> =
            tree.facts.top_modules.keys().chain(tree.facts.cap_modules.values().flatten()).cloned().collect();
        let site = facts.site_of(root, &probe);
        plan::Selected { tree, site, findings: s.findings }
    }))
}
