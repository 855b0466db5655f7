//! The Plan: the exact program, argv, env and findings. A pure function of the Request,
//! the Facts and the overlay's manifests; `--dry-run` prints it, the real run execs it.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cli::{EngineArg, Request};
use crate::dialect::{self, Engine, Opt, Parsed};
use crate::envvars as ev;
use crate::error::{Exit, Refusal};
use crate::facts::{Facts, PythonError, RocmError};
use crate::finding::Finding;
use crate::overlay::{self, Overlay, Tree};
use crate::version::{Spec, Version};
use crate::Env;

#[derive(Debug, Clone, Serialize)]
pub struct EngineView {
    pub name: String,
    pub version: Option<String>,
    pub module: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CapRow {
    pub name: String,
    pub requested: bool,
    /// Why it is requested: `--require`, or the engine flag that implies it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    pub provided: bool,
    /// Whether this node can use it; `null` when not checked.
    pub usable: Option<bool>,
    pub reason: Option<String>,
}

/// What will be exec'd. `env` holds only what the launcher sets; the child gets the
/// launcher's environment with these applied.
#[derive(Debug, Clone, Serialize)]
pub struct ExecSpec {
    /// The interpreter, as a container path.
    #[serde(serialize_with = "ser_path")]
    pub program: PathBuf,
    /// With `--root` other than `/`: the host file the real run execs (also its argv[0]).
    #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
    pub host_program: Option<PathBuf>,
    #[serde(serialize_with = "ser_os_vec")]
    pub argv: Vec<OsString>,
    #[serde(serialize_with = "ser_os_map")]
    pub env: BTreeMap<OsString, OsString>,
    /// The args the launcher appended after the user's (each explained by a finding).
    #[serde(serialize_with = "ser_os_vec")]
    pub added_args: Vec<OsString>,
    /// `--init`: the launcher stays as PID 1 / subreaper and runs this as its child.
    pub init: bool,
    /// `--drop-caps`: the capabilities kept (None: unchanged).
    pub keep_caps: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub role: &'static str,
    pub family: Option<String>,
    pub tree: Option<PathBuf>,
    pub engine: Option<EngineView>,
    pub facts: serde_json::Value,
    pub capabilities: Vec<CapRow>,
    pub exec: Option<ExecSpec>,
    pub findings: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Refusal>,
}

impl Plan {
    pub fn exit(&self) -> Exit {
        self.error.as_ref().map(|e| e.exit).unwrap_or(Exit::Ok)
    }
}

/// A day: longer grace periods are a typo, and would overflow time arithmetic.
pub const MAX_GRACE_SECONDS: f64 = 86_400.0;

pub struct Inputs<'a> {
    pub req: &'a Request,
    pub facts: &'a Facts,
    pub overlay: &'a Result<Overlay, Refusal>,
    pub env: &'a Env,
}

pub fn plan(inp: &Inputs) -> Plan {
    let mut p = Plan {
        role: inp.req.role.name(),
        family: None,
        tree: None,
        engine: None,
        facts: serde_json::to_value(inp.facts.view()).unwrap_or(serde_json::Value::Null),
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
    if let Some((i, _)) = req.args.iter().enumerate().find(|(_, a)| a.as_bytes().contains(&0)) {
        return Err(Refusal::new(Exit::Usage, "arg-nul", format!("argument {} after `--` contains a NUL byte", i + 1))
            .hint("an execve argument cannot hold NUL; fix the pod spec's args"));
    }
    // The capabilities kept by --drop-caps, canonical and sorted (None: unchanged).
    let keep_caps: Option<Vec<String>> = match &req.drop_caps {
        Some(k) => {
            let mut v: Vec<String> = crate::privs::parse_keep(k)?.into_iter().map(|c| c.to_string()).collect();
            v.sort();
            Some(v)
        }
        None => None,
    };
    if let Some(g) = req.init_grace {
        if !(0.0..=MAX_GRACE_SECONDS).contains(&g) {
            return Err(Refusal::new(
                Exit::Usage,
                "init-grace-invalid",
                format!("--init-grace {g}: expected a number of seconds from 0 to {MAX_GRACE_SECONDS}"),
            ));
        }
    }
    let python = facts.python.as_ref().map_err(python_refusal)?;
    let rocm = facts.rocm.as_ref().map_err(rocm_refusal)?;
    let overlay = inp.overlay.as_ref().map_err(Clone::clone)?;

    // Tree selection: the one tree whose ABI matches, or the forced one.
    let detected = format!(
        "python {} at {} ({}); ROCm {} from {}",
        python.version,
        python.executable.display(),
        python.evidence.join(", "),
        rocm.version,
        rocm.source
    );
    let trees_list = || overlay.trees.iter().map(Tree::describe).collect::<Vec<_>>().join(", ");
    let tree: &Tree = match &req.family {
        Some(f) => {
            let t = overlay.trees.iter().find(|t| &t.family == f).ok_or_else(|| {
                Refusal::new(Exit::Unsupported, "family-unknown", format!("--family {f}: the overlay has no such tree; trees: {}", trees_list()))
                    .hint("use one of the trees listed, or drop --family / INFERA_FAMILY to match the image")
            })?;
            let matches = t.manifest.python_minor() == python.minor && t.manifest.rocm_major() == rocm.major;
            p.findings.push(Finding::warn(
                "family-forced",
                if matches {
                    format!("tree {} forced by --family; it also matches this image", t.family)
                } else {
                    format!("tree {} forced by --family although this image has {detected}; its extensions may not load", t.describe())
                },
            ));
            t
        }
        None => overlay
            .trees
            .iter()
            .find(|t| t.manifest.python_minor() == python.minor && t.manifest.rocm_major() == rocm.major)
            .ok_or_else(|| {
                Refusal::new(Exit::Unsupported, "no-tree", format!("no overlay tree for this container ({detected}); trees: {}", trees_list()))
                    .hint("run an engine image whose Python and ROCm match one of these trees, or use an overlay release built for this image")
            })?,
    };
    p.family = Some(tree.family.clone());
    p.tree = Some(tree.dir.clone());
    integrity(tree, inp.env)?;

    // Engine (workers) or router module.
    let (engine, module) = if req.role.runs_engine() {
        let e = choose_engine(req.engine, facts)?;
        let entry = tree.manifest.engines.get(e.name()).ok_or_else(|| {
            let others: Vec<&str> = overlay
                .trees
                .iter()
                .filter(|t| t.manifest.engines.contains_key(e.name()))
                .map(|t| t.family.as_str())
                .collect();
            Refusal::new(
                Exit::Unsupported,
                "engine-not-in-tree",
                format!(
                    "tree {} has no {} engine module; trees offering {}: {}",
                    tree.family,
                    e.name(),
                    e.name(),
                    if others.is_empty() { "none".to_string() } else { others.join(", ") }
                ),
            )
            .hint("run the engine image this tree is built for, or pass --engine for the engine the tree offers")
        })?;
        let installed = facts.engine(e.name());
        if let (Some(spec), Some(inst)) = (&entry.versions, installed) {
            match (Spec::parse(spec), Version::parse(&inst.version)) {
                (Ok(s), Some(v)) if !s.contains(&v) => {
                    return Err(Refusal::new(Exit::Unsupported, "engine-version", format!(
                        "the image has {} {} (`{}`) but tree {} supports {} {spec}",
                        e.name(), inst.version, inst.record.display(), tree.family, e.name()
                    ))
                    .hint("use an overlay release that supports this engine version, or the engine image the overlay was released with"));
                }
                (Ok(_), None) => p.findings.push(Finding::warn(
                    "engine-version-unknown",
                    format!(
                        "cannot read the version `{}` of {} (`{}`); the tree's bound {spec} was not checked",
                        inst.version,
                        e.name(),
                        inst.record.display()
                    ),
                )),
                _ => {}
            }
        }
        p.engine = Some(EngineView {
            name: e.name().into(),
            version: installed.map(|i| i.version.clone()),
            module: entry.module.clone(),
        });
        (Some(e), entry.module.clone())
    } else {
        let s = tree.manifest.server.as_ref().ok_or_else(|| {
            Refusal::new(
                Exit::Unsupported,
                "server-not-in-tree",
                format!("tree {} has no [server] module", tree.family),
            )
        })?;
        (None, s.module.clone())
    };
    if !module_present(tree, &module)? {
        return Err(Refusal::new(
            Exit::Invalid,
            "module-missing",
            format!(
                "tree {}: module `{module}` (the module to run) is not in `{}`",
                tree.family,
                tree.site_packages().display()
            ),
        )
        .hint("the overlay build is incomplete; `infera-exec manifest verify` shows what is missing"));
    }

    let parsed = engine.map(|e| dialect::read(e, &req.args)).unwrap_or_default();
    capabilities(req, overlay, tree, engine, &parsed, p)?;
    usability(keep_caps.as_deref(), facts, rocm, inp.env, p)?;
    noexec(tree)?;
    if req.role.runs_engine() {
        gpu_presence(facts, &mut p.findings);
    }
    shadowing(tree, facts)?;

    let mut added: Vec<OsString> = Vec::new();
    if let Some(e) = engine {
        let ctx = crate::rules::Ctx { req, facts, engine: e, parsed: &parsed, env: inp.env };
        crate::rules::apply(&ctx, &mut added, &mut p.findings)?;
    }

    let env = child_env(tree, inp.env, &mut p.findings);
    // The plan names container paths. With --root (an unpacked image read in place) a real
    // run execs the image's interpreter file from this host: `host_program`, the
    // interpreter resolved inside the root (a venv's link may be absolute and would point
    // at the host's own python).
    let program = python.executable.clone();
    let host_program = (!facts.root.is_host_root()).then(|| facts.root.host(&python.resolved));
    let mut argv: Vec<OsString> = vec![program.clone().into_os_string(), "-m".into(), module.into()];
    argv.extend(req.args.iter().cloned());
    argv.extend(added.iter().cloned());
    p.exec = Some(ExecSpec { program, host_program, argv, env, added_args: added, init: req.init, keep_caps });
    runnable(&facts.root, &python.executable)?;
    Ok(())
}

/// `INFERA_VERIFY=size|digest`: check the selected tree against its record before exec.
fn integrity(tree: &Tree, env: &Env) -> Result<(), Refusal> {
    let digest = match env.get(OsStr::new(ev::INFERA_VERIFY)).map(|v| v.to_string_lossy()).as_deref() {
        None | Some("") | Some("off") | Some("0") => return Ok(()),
        Some("size") => false,
        Some("digest") => true,
        Some(other) => {
            return Err(Refusal::new(
                Exit::Usage,
                "verify-invalid",
                format!("INFERA_VERIFY=`{other}`: expected size, digest or off"),
            ))
        }
    };
    crate::manifest_cmd::verify_tree(&tree.dir, &tree.family, digest).map(|_| ()).map_err(|problems| {
        let list: String = problems.iter().map(|p| format!("\n  trees/{}/{p}", tree.family)).collect();
        Refusal::new(
            Exit::Invalid,
            "integrity",
            format!("tree {} does not match its integrity record:{list}", tree.family),
        )
        .hint("the overlay image is corrupted or was modified; pull or rebuild it")
    })
}

/// Fill `usable` for the provided capabilities; refuse a requested one that cannot work here.
fn usability(
    keep_caps: Option<&[String]>,
    facts: &Facts,
    rocm: &crate::facts::Rocm,
    env: &Env,
    p: &mut Plan,
) -> Result<(), Refusal> {
    // Judge the process the engine will be: after --drop-caps, not before.
    let host = match (&facts.host, keep_caps) {
        (Some(h), Some(keep)) => {
            let mut h = h.clone();
            h.caps.effective.retain(|c| keep.contains(c));
            Some(h)
        }
        (h, _) => h.clone(),
    };
    let mut refusal = None;
    for row in p.capabilities.iter_mut().filter(|r| r.provided) {
        let u = crate::usable::check(&row.name, host.as_ref(), rocm, env);
        row.usable = u.usable;
        row.reason = u.reason.clone();
        if row.requested && u.usable == Some(false) && refusal.is_none() {
            let mut r = Refusal::new(
                Exit::Unsupported,
                "capability-unusable",
                format!(
                    "capability `{}` is provided by the tree but cannot work on this node: {}",
                    row.name,
                    u.reason.unwrap_or_default()
                ),
            );
            if let Some(h) = u.hint {
                r = r.hint(h);
            }
            refusal = Some(r);
        }
    }
    refusal.map_or(Ok(()), Err)
}

/// A tree with shared objects on a `noexec` mount cannot load them.
fn noexec(tree: &Tree) -> Result<(), Refusal> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let Ok(st) = statvfs(&tree.dir) else { return Ok(()) };
    if !st.flags().contains(FsFlags::ST_NOEXEC) {
        return Ok(());
    }
    let lib_has_files = std::fs::read_dir(tree.lib()).map(|mut d| d.next().is_some()).unwrap_or(false);
    let record_has_so = crate::payload::read_record(&tree.dir)
        .ok()
        .flatten()
        .is_some_and(|r| r.files.iter().any(|f| f.path.ends_with(".so") || f.path.contains(".so.")));
    if !(lib_has_files || record_has_so) {
        return Ok(());
    }
    Err(Refusal::new(
        Exit::Invalid,
        "overlay-noexec",
        format!("the tree `{}` holds shared objects but is mounted noexec: they cannot be loaded", tree.dir.display()),
    )
    .hint("mount the overlay without noexec (image volumes on containerd 2.1+ / CRI-O are exec; check the mount options of an initContainer copy)"))
}

/// GPUs allocated by the visible-devices variables but no device nodes: a warning, so
/// CPU-only test machines keep working.
fn gpu_presence(facts: &Facts, findings: &mut Vec<Finding>) {
    let (Some(h), Ok(g)) = (facts.host.as_ref(), facts.gpus.as_ref()) else { return };
    let from_env = g.source.contains("VISIBLE_DEVICES") || g.source.starts_with(ev::INFERA_GPUS);
    if from_env && g.count.unwrap_or(0) > 0 && !h.kfd && h.render_nodes == 0 {
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

fn python_refusal(e: &PythonError) -> Refusal {
    let (code, hint) = match e {
        PythonError::EmptyPath => {
            ("python-missing", "set PATH in the pod spec (the image's PATH, e.g. /usr/local/bin:/usr/bin:/bin)")
        }
        PythonError::NotFound { .. } => {
            ("python-missing", "run an engine image that has CPython, or put its bin directory on PATH")
        }
        PythonError::Unresolvable { .. } => {
            ("python-unresolvable", "the image's python3 link is broken or loops; fix the image")
        }
        PythonError::UnknownVersion { .. } => {
            ("python-version-unknown", "use an engine image with a versioned interpreter (python3.X) or a pyvenv.cfg")
        }
    };
    let exit = if matches!(e, PythonError::UnknownVersion { .. }) { Exit::Unsupported } else { Exit::Missing };
    Refusal::new(exit, code, e.to_string()).hint(hint)
}

fn rocm_refusal(e: &RocmError) -> Refusal {
    match e {
        RocmError::Cuda { .. } => Refusal::new(Exit::Unsupported, "cuda-image", e.to_string()).hint(
            "use the ROCm build of the engine image (e.g. vllm/vllm-openai-rocm, rocm/vllm, lmsysorg/sglang ROCm tags)",
        ),
        RocmError::NotFound { .. } => Refusal::new(Exit::Unsupported, "rocm-missing", e.to_string())
            .hint("use a ROCm engine image, or set ROCM_PATH to the image's ROCm install"),
    }
}

fn choose_engine(choice: EngineArg, facts: &Facts) -> Result<Engine, Refusal> {
    let where_ = || {
        let dirs: Vec<String> = facts
            .python
            .as_ref()
            .map(|p| p.site_dirs.iter().map(|d| format!("`{}`", d.display())).collect())
            .unwrap_or_default();
        if dirs.is_empty() {
            "the image's site directories".to_string()
        } else {
            dirs.join(", ")
        }
    };
    match choice {
        EngineArg::Vllm | EngineArg::Sglang => {
            let e = if choice == EngineArg::Vllm { Engine::Vllm } else { Engine::Sglang };
            if facts.engine(e.name()).is_none() {
                return Err(Refusal::new(
                    Exit::Missing,
                    "engine-missing",
                    format!(
                        "--engine {}: {} is not installed in the image (no {}-*.dist-info in {})",
                        e.name(),
                        e.name(),
                        e.name(),
                        where_()
                    ),
                )
                .hint("run the engine image for this engine, or pass the --engine it has"));
            }
            Ok(e)
        }
        EngineArg::Auto => match facts.engines.as_slice() {
            [one] => Engine::from_name(&one.name).ok_or_else(|| {
                Refusal::new(Exit::Unsupported, "engine-unknown", format!("unknown engine {}", one.name))
            }),
            [] => Err(Refusal::new(
                Exit::Missing,
                "engine-missing",
                format!("no engine installed in the image: no vllm or sglang dist-info in {}", where_()),
            )
            .hint("run a vLLM or sglang engine image, or pass --engine vllm|sglang")),
            many => Err(Refusal::new(
                Exit::Usage,
                "engine-ambiguous",
                format!(
                    "the image has several engines ({}); --engine auto cannot choose",
                    many.iter().map(|e| format!("{} {}", e.name, e.version)).collect::<Vec<_>>().join(", ")
                ),
            )
            .hint("pass --engine vllm or --engine sglang (or INFERA_ENGINE)")),
        },
    }
}

/// The capability a set of engine args implies, with the flag that implies it.
pub fn implied_capabilities(engine: Engine, parsed: &Parsed) -> Result<Vec<(String, String)>, Refusal> {
    let mut out = Vec::new();
    if let Some(v) = parsed.get(Opt::KvTransferConfig) {
        let text = v.as_str().ok_or_else(|| {
            Refusal::new(Exit::Refused, "kv-transfer-config-invalid", "--kv-transfer-config is not valid UTF-8")
        })?;
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Refusal::new(
                Exit::Refused,
                "kv-transfer-config-invalid",
                format!("--kv-transfer-config is not JSON ({e}): `{text}`"),
            )
            .hint("give a JSON object, e.g. '{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_producer\"}'")
        })?;
        let mut connectors = Vec::new();
        collect_connectors(&json, &mut connectors);
        if let Some(c) = connectors.iter().find(|c| c.to_ascii_lowercase().contains("mooncake")) {
            out.push(("mooncake".to_string(), format!("--kv-transfer-config kv_connector={c}")));
        }
    }
    if engine == Engine::Sglang {
        let backend = parsed.value(Opt::DisaggregationBackend);
        let mode = parsed.value(Opt::DisaggregationMode);
        // sglang's default transfer backend is mooncake.
        if backend == Some("mooncake") || (backend.is_none() && matches!(mode, Some("prefill") | Some("decode"))) {
            out.push((
                "mooncake".to_string(),
                format!("--disaggregation-transfer-backend {}", backend.unwrap_or("mooncake (sglang's default)")),
            ));
        }
        if parsed.value(Opt::HicacheStorageBackend) == Some("mooncake") {
            out.push(("mooncake".to_string(), "--hicache-storage-backend mooncake".to_string()));
        }
    }
    Ok(out)
}

fn collect_connectors(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "kv_connector" {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_string());
                    }
                }
                collect_connectors(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_connectors(x, out)),
        _ => {}
    }
}

fn capabilities(
    req: &Request,
    overlay: &Overlay,
    tree: &Tree,
    engine: Option<Engine>,
    parsed: &Parsed,
    p: &mut Plan,
) -> Result<(), Refusal> {
    let mut requested: Vec<(String, String)> =
        req.require.iter().map(|c| (c.clone(), "--require".to_string())).collect();
    if let Some(e) = engine {
        for (c, by) in implied_capabilities(e, parsed)? {
            if !requested.iter().any(|(x, _)| *x == c) {
                requested.push((c, by));
            }
        }
    }
    let ename = engine.map(Engine::name);
    let mut names: Vec<String> = tree.manifest.capabilities.keys().cloned().collect();
    for (c, _) in &requested {
        if !names.contains(c) {
            names.push(c.clone());
        }
    }
    let mut refusal: Option<Refusal> = None;
    for name in names {
        let by = requested.iter().find(|(c, _)| *c == name).map(|(_, b)| b.clone());
        let (provided, reason) = provided(tree, &name, ename)?;
        if by.is_some() && !provided && refusal.is_none() {
            let providers: Vec<String> = overlay
                .trees
                .iter()
                .filter(|t| t.family != tree.family && t.manifest.capabilities.contains_key(&name))
                .map(|t| {
                    let c = &t.manifest.capabilities[&name];
                    if c.engines.is_empty() {
                        t.family.clone()
                    } else {
                        format!("{} (for {})", t.family, c.engines.join(", "))
                    }
                })
                .collect();
            let known: std::collections::BTreeSet<&String> =
                overlay.trees.iter().flat_map(|t| t.manifest.capabilities.keys()).collect();
            let msg = format!(
                "capability `{name}` (requested by {}) cannot be supplied: {}; trees that provide it: {}",
                by.as_deref().unwrap_or("--require"),
                reason.as_deref().unwrap_or("unavailable"),
                if providers.is_empty() { "none".to_string() } else { providers.join(", ") }
            );
            let hint = if known.contains(&name) {
                "run the engine image that matches a tree providing it, or drop the requirement".to_string()
            } else {
                format!("known capabilities: {}", known.into_iter().cloned().collect::<Vec<_>>().join(", "))
            };
            refusal = Some(Refusal::new(Exit::Unsupported, "capability-unavailable", msg).hint(hint));
        }
        p.capabilities.push(CapRow { name, requested: by.is_some(), requested_by: by, provided, usable: None, reason });
    }
    refusal.map_or(Ok(()), Err)
}

/// Is `name` provided by `tree` to `engine`? A path escaping the tree is an error (65).
fn provided(tree: &Tree, name: &str, engine: Option<&str>) -> Result<(bool, Option<String>), Refusal> {
    let Some(cap) = tree.manifest.capabilities.get(name) else {
        return Ok((false, Some(format!("tree {} does not declare it", tree.family))));
    };
    if !tree.manifest.offers(name, engine) {
        return Ok((
            false,
            Some(format!(
                "tree {} offers it to {} only, not to {}",
                tree.family,
                cap.engines.join(", "),
                engine.unwrap_or("the router")
            )),
        ));
    }
    for m in &cap.modules {
        if !module_present(tree, m)? {
            return Ok((false, Some(format!("module `{m}` is missing from `{}`", tree.site_packages().display()))));
        }
    }
    for l in &cap.libraries {
        let path = tree.lib().join(l);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok((false, Some(format!("library `{l}` is missing from `{}`", tree.lib().display()))));
        }
        overlay::inside(&tree.dir, &path).map_err(Refusal::from)?;
    }
    Ok((true, None))
}

/// Is the module in the tree's site-packages? A path resolving outside the tree is 65.
fn module_present(tree: &Tree, module: &str) -> Result<bool, Refusal> {
    match overlay::find_module(&tree.site_packages(), module) {
        Some(path) => overlay::inside(&tree.dir, &path).map(|()| true).map_err(Refusal::from),
        None => Ok(false),
    }
}

fn shadowing(tree: &Tree, facts: &Facts) -> Result<(), Refusal> {
    let clashes: Vec<String> = tree
        .modules
        .iter()
        .filter(|m| !tree.manifest.allow_shadow.contains(m))
        .filter_map(|m| facts.site.modules.get(m).map(|base| format!("`{m}` (base: `{}`)", base.join(m).display())))
        .collect();
    if clashes.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        Exit::Invalid,
        "shadows-base",
        format!(
            "tree {} would shadow the image's own packages: {}; the tree's site-packages comes first on PYTHONPATH",
            tree.family,
            clashes.join(", ")
        ),
    )
    .hint("remove the package from the tree, or list it in the manifest's `allow_shadow` if the tree's copy must win"))
}

/// The child's environment changes: tree dirs prepended, defaults that never override.
fn child_env(tree: &Tree, env: &Env, findings: &mut Vec<Finding>) -> BTreeMap<OsString, OsString> {
    let mut out: BTreeMap<OsString, OsString> = BTreeMap::new();
    let get = |k: &str| env.get(OsStr::new(k)).filter(|v| !v.is_empty());
    let prepend = |dir: PathBuf, old: Option<&OsString>| -> OsString {
        let mut v = dir.into_os_string();
        if let Some(old) = old {
            v.push(":");
            v.push(old);
        }
        v
    };
    if tree.site_packages().is_dir() {
        out.insert(ev::PYTHONPATH.into(), prepend(tree.site_packages(), get(ev::PYTHONPATH)));
    }
    if tree.lib().is_dir() {
        out.insert(ev::LD_LIBRARY_PATH.into(), prepend(tree.lib(), get(ev::LD_LIBRARY_PATH)));
    }
    if tree.bin().is_dir() {
        let default = OsString::from(ev::DEFAULT_PATH);
        out.insert(ev::PATH.into(), prepend(tree.bin(), Some(get(ev::PATH).unwrap_or(&default))));
    }
    // The payload is read-only: no .pyc may be written into it.
    if get(ev::PYTHONDONTWRITEBYTECODE).is_none() && get(ev::PYTHONPYCACHEPREFIX).is_none() {
        out.insert(ev::PYTHONDONTWRITEBYTECODE.into(), "1".into());
    }
    out.insert(ev::INFERA_TREE.into(), tree.dir.clone().into_os_string());
    out.insert(ev::INFERA_TREE_FAMILY.into(), tree.family.clone().into());
    let tree_dir = tree.dir.to_string_lossy();
    for (k, v) in &tree.manifest.env {
        if env.contains_key(OsStr::new(k)) {
            findings
                .push(Finding::info("env-kept", format!("{k} kept as the pod set it (the tree's default is `{v}`)")));
        } else {
            out.insert(k.into(), v.replace("{tree}", &tree_dir).into());
        }
    }
    out
}

/// The exec target must exist (127) and be executable (126), as the container sees it.
fn runnable(root: &crate::rootfs::Root, program: &Path) -> Result<(), Refusal> {
    match root.metadata(program) {
        Err(e) => Err(Refusal::new(
            Exit::NotFound,
            "exec-not-found",
            format!("the interpreter `{}` cannot be found: {}", program.display(), crate::rootfs::io_reason(&e)),
        )
        .hint("the image's python3 link points at nothing; fix the image or PATH")),
        Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => Err(Refusal::new(
            Exit::CannotExec,
            "exec-not-executable",
            format!(
                "the interpreter `{}` is not an executable file (mode {:o})",
                program.display(),
                m.permissions().mode() & 0o7777
            ),
        )
        .hint("the image's interpreter lost its execute bit, or the filesystem is mounted noexec")),
        Ok(_) => Ok(()),
    }
}

// JSON forms of OS strings: a string when UTF-8, else {"hex": "..."} so nothing is lost.
fn os_json(s: &OsStr) -> serde_json::Value {
    match s.to_str() {
        Some(t) => serde_json::Value::String(t.to_string()),
        None => {
            serde_json::json!({ "hex": s.as_bytes().iter().map(|b| format!("{b:02x}")).collect::<String>() })
        }
    }
}

fn ser_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    os_json(p.as_os_str()).serialize(s)
}

fn ser_opt_path<S: serde::Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    p.as_ref().map(|p| os_json(p.as_os_str())).serialize(s)
}

fn ser_os_vec<S: serde::Serializer>(v: &[OsString], s: S) -> Result<S::Ok, S::Error> {
    v.iter().map(|x| os_json(x)).collect::<Vec<_>>().serialize(s)
}

fn ser_os_map<S: serde::Serializer>(m: &BTreeMap<OsString, OsString>, s: S) -> Result<S::Ok, S::Error> {
    let mut out = serde_json::Map::new();
    for (k, v) in m {
        out.insert(k.to_string_lossy().into_owned(), os_json(v));
    }
    out.serialize(s)
}
