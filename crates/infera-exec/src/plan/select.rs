//! Which tree, which engine, which module: the tree whose ABI matches the image (or the
//! forced one), the engine installed in the image, and the module of the tree that runs it.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use thiserror::Error;

use crate::choices::Role;
use crate::request::{Request, Target};

use super::program::ProgramError;
use infera_core::error::Refusal;
use infera_core::exe::ExecFile;
use infera_core::version::Spec;
use infera_exec_derive::Refuse;
use infera_facts::engines::Engine;
use infera_facts::finding::Finding;
use infera_facts::python::Python;
use infera_facts::rocm::Rocm;
use infera_facts::{Facts, Program};
use infera_overlay::overlay::{Overlay, Presence, Tree};

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum SelectError {
    #[error("no overlay tree for this container ({detected}); trees: {trees}")]
    #[refuse(
        code = "no-tree",
        exit = Unsupported,
        hint = "run an engine image whose Python and ROCm match one of these trees, or use an overlay release built for this image"
    )]
    NoTree { detected: String, trees: String },
    #[error("--family {family}: the overlay has no such tree; trees: {trees}")]
    #[refuse(
        code = "family-unknown",
        exit = Usage,
        hint_opt = Some(infera_facts::suggest::did_you_mean(family, families.iter().map(String::as_str)).unwrap_or_else(
            || "use one of the trees listed, or drop --family / INFERA_FAMILY to match the image".to_string()
        ))
    )]
    FamilyUnknown { family: String, trees: String, families: Vec<String> },
    #[error("tree {tree} is not built for this container ({detected})")]
    #[refuse(
        code = "family-mismatch",
        exit = Unsupported,
        hint = "the image runs with the tree built for its Python and ROCm; this column of the matrix does not apply to it"
    )]
    FamilyMismatch { tree: String, detected: String },
    #[error("tree {family} has no {engine} engine module; trees offering {engine}: {}", if others.is_empty() { "none".to_string() } else { others.join(", ") })]
    #[refuse(
        code = "engine-not-in-tree",
        exit = Unsupported,
        hint = "run the engine image this tree is built for, or pass --engine for the engine the tree offers"
    )]
    EngineNotInTree { family: String, engine: &'static str, others: Vec<String> },
    #[error("--engine {engine}: {engine} is not installed in the image (no {engine}-*.dist-info in {dirs})")]
    #[refuse(code = "engine-missing", exit = Missing, hint = "run the engine image for this engine, or pass the --engine it has")]
    EngineMissing { engine: &'static str, dirs: String },
    #[error("no engine installed in the image: no {} dist-info in {dirs}", engines.join(" or "))]
    #[refuse(
        code = "engine-missing",
        exit = Missing,
        hint = format!("run a vLLM or sglang engine image, or pass --engine {}", engines.join("|"))
    )]
    NoEngine { engines: Vec<&'static str>, dirs: String },
    #[error("the image has several engines ({list}); --engine auto cannot choose")]
    #[refuse(
        code = "engine-ambiguous",
        exit = Usage,
        hint = format!("pass {} (or INFERA_ENGINE)", Engine::names().iter().map(|n| format!("--engine {n}")).collect::<Vec<_>>().join(" or "))
    )]
    EngineAmbiguous { list: String },
    #[error("the image has {engine} {version} (`{}`) but tree {family} supports {engine} {spec}", record.display())]
    #[refuse(
        code = "engine-version",
        exit = Unsupported,
        hint = "use an image the overlay supports (its support matrix: `infera-exec --version`) or an overlay release that supports this engine version; or set INFERA_ALLOW=engine-version to run it anyway"
    )]
    EngineVersion { engine: &'static str, version: String, record: PathBuf, family: String, spec: String },
    #[error("the image has {found} (`{}`), on which {module} fails: {why}", record.display())]
    #[refuse(
        code = "engine-version",
        exit = Unsupported,
        hint = format!("use an image with {works} (`infera-exec --version` lists the images this release judged), or an overlay release built for {found}; --allow engine-version cannot help: it fails before the engine starts")
    )]
    EngineVersionFails {
        /// `vllm 0.34.1`.
        found: String,
        record: PathBuf,
        /// `tree rocm7-py312's infera.engine.vllm`.
        module: String,
        /// What happens, and that `--allow` was given where it was.
        why: String,
        /// `vllm >=0.9, <0.29 (the newest release recorded in it: 0.28.0)`.
        works: String,
    },
    #[error(
        "{} cannot build {} {version}'s argument parser on this image's CPython {}.{}: `{at}` passes \
         `deprecated=True` to argparse, which takes it from CPython 3.13 on, and the wrapper builds the parser on a \
         plain ArgumentParser (only {}'s own FlexibleArgumentParser drops it): it exits with TypeError before \
         {} starts (so do the recorded releases {} to {})",
        engine.info().module, engine.name(), python.0, python.1, engine.name(), engine.name(), failing.0, failing.1
    )]
    #[refuse(
        code = "wrapper-parser-fails",
        exit = Unsupported,
        hint = format!("use an image with {instead} (or with CPython 3.13+); or run {}'s own CLI as the program, without infera's wrapper", engine.name())
    )]
    WrapperParser {
        engine: Engine,
        version: String,
        python: (u32, u32),
        at: String,
        /// The first and last recorded releases whose parser it cannot build.
        failing: (&'static str, &'static str),
        /// The releases to use instead: from the first that builds, within the tree's range.
        instead: String,
    },
    #[error("tree {family} has no [server] module")]
    #[refuse(code = "server-not-in-tree", exit = Unsupported)]
    ServerNotInTree { family: String },
    #[error("tree {family}: module `{module}` (the module to run) is not in `{}`", site.display())]
    #[refuse(
        code = "module-missing",
        exit = Invalid,
        hint = "the overlay build is incomplete; `infera-exec manifest verify` shows what is missing"
    )]
    ModuleMissing { family: String, module: String, site: PathBuf },
}

/// Built for this image: the same CPython minor and HIP ABI major (or no native code), and
/// the image's ROCm release inside the tree's bound when it has one and the image records it.
fn matches(t: &Tree, python: &Python, rocm: &Rocm) -> bool {
    t.python == python.minor && t.hip.is_none_or(|h| h == rocm.hip.major) && release_in_bound(t, rocm) != Some(false)
}

/// Is the image's ROCm release inside the tree's `[abi] rocm_release`? None: no bound, or
/// no release recorded (or not comparable).
fn release_in_bound(t: &Tree, rocm: &Rocm) -> Option<bool> {
    let spec = Spec::parse(t.manifest.abi.rocm_release.as_deref()?).ok()?;
    let v = infera_core::version::parse(&rocm.release.as_ref()?.version)?;
    Some(spec.contains(&v))
}

/// Which tree a plan is made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TreeChoice {
    /// The tree the image's ABI selects (no `--family`).
    Matching,
    /// `--family NAME`: forced, as a run forces it.
    Forced(String),
    /// A tree of `check --family all`: judged against the image (one built for another ABI
    /// does not apply to it).
    Judged(String),
}

impl TreeChoice {
    /// A run's choice: the tree `--family` forces, else the one the image's ABI selects.
    pub(crate) fn of(family: Option<&str>) -> TreeChoice {
        family.map_or(TreeChoice::Matching, |f| TreeChoice::Forced(f.to_string()))
    }

    /// The family named, if any.
    pub(crate) fn family(&self) -> Option<&str> {
        match self {
            TreeChoice::Matching => None,
            TreeChoice::Forced(f) | TreeChoice::Judged(f) => Some(f),
        }
    }
}

/// The tree chosen, if any: the named one, else the one built for this image's ABI,
/// preferring one with native code.
fn family<'o>(choice: &TreeChoice, python: &Python, rocm: &Rocm, overlay: &'o Overlay) -> Option<&'o Tree> {
    match choice.family() {
        Some(f) => overlay.trees.iter().find(|t| t.family == f),
        None => overlay.trees.iter().filter(|t| matches(t, python, rocm)).min_by_key(|t| t.hip.is_none()),
    }
}

/// The tree, selected once: the one whose ABI matches, or the forced one (with a warning),
/// and what was said about the choice.
pub(crate) fn tree<'o>(
    choice: &TreeChoice,
    python: &Python,
    rocm: &Rocm,
    overlay: &'o Overlay,
) -> Result<Selection<'o>, SelectError> {
    let mut findings = Vec::new();
    let tree = choose(choice, python, rocm, overlay, &mut findings)?;
    Ok(Selection { tree, findings })
}

pub(crate) struct Selection<'o> {
    pub tree: &'o Tree,
    pub findings: Vec<Finding>,
}

fn choose<'o>(
    choice: &TreeChoice,
    python: &Python,
    rocm: &Rocm,
    overlay: &'o Overlay,
    findings: &mut Vec<Finding>,
) -> Result<&'o Tree, SelectError> {
    let detected = format!(
        "python {} at {} ({}); {}",
        python.version,
        python.executable.display(),
        python.evidence.join(", "),
        rocm.describe()
    );
    let trees = || overlay.trees.iter().map(Tree::describe).collect::<Vec<_>>().join(", ");
    let Some(t) = family(choice, python, rocm, overlay) else {
        return Err(match choice.family() {
            Some(f) => SelectError::FamilyUnknown {
                family: f.to_string(),
                trees: trees(),
                families: overlay.trees.iter().map(|t| t.family.clone()).collect(),
            },
            None => SelectError::NoTree { detected, trees: trees() },
        });
    };
    if t.hip.is_none() && choice.family().is_none() {
        // The Infera payload without a native tree for this HIP ABI: aggregated serving
        // needs none of it; a capability that does is refused where it is required.
        let key = format!("rocm{}-py{}{}", rocm.hip.major, python.minor.0, python.minor.1);
        let natives: Vec<&str> = overlay.trees.iter().filter(|x| x.hip.is_some()).map(|x| x.family.as_str()).collect();
        findings.push(Finding::warn(
            "native-missing",
            format!(
                "no native payload for {key} (native trees: {}); PD (Mooncake) and kvd GPU-direct L3 (hipFile) will be unavailable",
                if natives.is_empty() { "none".to_string() } else { natives.join(", ") }
            ),
        ));
    }
    if let (Some(spec), None) = (&t.manifest.abi.rocm_release, release_in_bound(t, rocm)) {
        findings.push(Finding::warn(
            "rocm-release-unchecked",
            format!(
                "tree {} is built for ROCm {spec} but the image's ROCm release is not recorded; not checked",
                t.family
            ),
        ));
    }
    named(choice, t, matches(t, python, rocm), detected, findings)?;
    Ok(t)
}

/// A tree `--family` named: judged (a column of `check`'s matrix), one built for another
/// ABI is refused; forced, it is said with a warning.
fn named(
    choice: &TreeChoice,
    t: &Tree,
    fits: bool,
    detected: String,
    findings: &mut Vec<Finding>,
) -> Result<(), SelectError> {
    if matches!(choice, TreeChoice::Judged(_)) && !fits {
        return Err(SelectError::FamilyMismatch { tree: t.describe(), detected });
    }
    if matches!(choice, TreeChoice::Forced(_)) {
        let said = if fits {
            format!("tree {} forced by --family; it also matches this image", t.family)
        } else {
            format!(
                "tree {} forced by --family although this image has {detected}; its extensions may not load",
                t.describe()
            )
        };
        findings.push(Finding::warn("family-forced", said));
    }
    Ok(())
}

/// The engine the run starts, decided once: for a worker or a check, the one asked for (it
/// must be installed) or the one the image has; none for the router or another program.
pub(crate) fn engine(req: &Request, facts: &Facts) -> Result<Option<Engine>, SelectError> {
    match req.role {
        Role::Worker | Role::Check => installed(req.engine, facts).map(Some),
        Role::Server | Role::Run => Ok(None),
    }
}

/// The one asked for (it must be installed), or the one installed.
fn installed(choice: Option<Engine>, facts: &Facts) -> Result<Engine, SelectError> {
    let dirs = || {
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
        Some(e) if facts.engine(e).is_none() => Err(SelectError::EngineMissing { engine: e.name(), dirs: dirs() }),
        Some(e) => Ok(e),
        None => match facts.engines.as_slice() {
            [one] => Ok(one.engine),
            [] => Err(SelectError::NoEngine { engines: Engine::names(), dirs: dirs() }),
            many => Err(SelectError::EngineAmbiguous {
                list: many.iter().map(|e| format!("{} {}", e.engine.name(), e.version)).collect::<Vec<_>>().join(", "),
            }),
        },
    }
}

/// The tree's module for `engine`, with the installed version checked against its bound.
pub(crate) fn engine_module<'t>(
    tree: &'t Tree,
    overlay: &Overlay,
    engine: Engine,
    facts: &Facts,
    allow_version: bool,
    findings: &mut Vec<Finding>,
) -> Result<&'t str, SelectError> {
    let entry = tree.manifest.engines.get(engine.name()).ok_or_else(|| SelectError::EngineNotInTree {
        family: tree.family.clone(),
        engine: engine.name(),
        others: overlay
            .trees
            .iter()
            .filter(|t| t.manifest.engines.contains_key(engine.name()))
            .map(|t| t.family.clone())
            .collect(),
    })?;
    if let (Some(spec), Some(inst)) = (&entry.versions, facts.engine(engine)) {
        match (Spec::parse(spec), infera_core::version::parse(&inst.version)) {
            (Ok(s), Some(v)) if !s.contains(&v) => {
                if let Some(e) = fails_on(tree, entry, engine, inst, (&s, &v), allow_version) {
                    return Err(e);
                }
                let e = SelectError::EngineVersion {
                    engine: engine.name(),
                    version: inst.version.clone(),
                    record: inst.record.clone(),
                    family: tree.family.clone(),
                    spec: spec.clone(),
                };
                if !allow_version {
                    return Err(e);
                }
                findings.push(Finding::warn(
                    crate::request::ENGINE_VERSION,
                    format!("allowed by INFERA_ALLOW/--allow: {e}; the tree was not built against this version"),
                ));
            }
            (Ok(_), None) => {
                findings.push(Finding::warn("engine-version-unknown", unknown_version(engine, inst, spec)))
            }
            _ => {}
        }
    }
    Ok(&entry.module)
}

/// The refusal of an engine version the tree's module is known to fail on (its manifest's
/// `fails`): no `--allow` can run it.
fn fails_on(
    tree: &Tree,
    entry: &infera_overlay::manifest::EngineEntry,
    engine: Engine,
    inst: &infera_facts::site::EngineInstall,
    (spec, v): (&Spec, &infera_core::version::Version),
    allow_version: bool,
) -> Option<SelectError> {
    let f = entry.fails.iter().find(|f| Spec::parse(&f.versions).is_ok_and(|x| x.contains(v)))?;
    let allowed = if allow_version { " (--allow engine-version was given: it cannot run it)" } else { "" };
    let newest =
        newest_in(engine, spec).map_or(String::new(), |n| format!(" (the newest release recorded in it: {n})"));
    Some(SelectError::EngineVersionFails {
        found: format!("{} {}", engine.name(), inst.version),
        record: inst.record.clone(),
        module: format!("tree {}'s {}", tree.family, entry.module),
        why: format!("{}{allowed}", f.why),
        works: format!("{} {}{newest}", engine.name(), entry.versions.as_deref().unwrap_or_default()),
    })
}

/// The newest release of the engine whose options are recorded (every release of the
/// trees' ranges is) within `spec`.
fn newest_in(engine: Engine, spec: &Spec) -> Option<&'static str> {
    (engine.info().options)()
        .iter()
        .flat_map(|l| l.releases.iter().copied())
        .filter_map(|r| Some((infera_core::version::parse(r)?, r)))
        .filter(|(v, _)| spec.contains(v))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, r)| r)
}

fn unknown_version(engine: Engine, inst: &infera_facts::site::EngineInstall, spec: &str) -> String {
    let (name, v, at) = (engine.name(), &inst.version, inst.record.display());
    match infera_core::version::untagged(v) {
        Some(commit) => format!(
            "{name} {v} (`{at}`) is setuptools-scm's version for a build from a checkout without release tags{}: \
             its release cannot be read, so the tree's bound {spec} was not checked (and options the newest \
             recorded option list does not know are warnings); check the image's {name} commit against the \
             support matrix (`infera-exec --version`)",
            if commit.is_empty() { String::new() } else { format!(" (commit {commit})") }
        ),
        None => format!("cannot read the version `{v}` of {name} (`{at}`); the tree's bound {spec} was not checked"),
    }
}

/// infera's wrapper builds the engine's parser on a plain argparse parser: refused where the
/// image's engine passes argparse what the image's CPython cannot take (the recorded lists
/// say which releases do; the image's own files say whether this one does).
pub(crate) fn wrapper_parser(
    engine: Engine,
    tree: &Tree,
    facts: &Facts,
    python: &Python,
    findings: &mut Vec<Finding>,
) -> Result<(), SelectError> {
    let Some(inst) = facts.engine(engine).filter(|_| python.minor < (3, 13)) else { return Ok(()) };
    if let (None, Some(why)) = (&inst.argparse_deprecated, &inst.argparse_unread) {
        // Unreadable is not harmless: the rule could not look.
        findings.push(Finding::warn(
            "wrapper-parser-unread",
            format!(
                "{why}: whether {} passes argparse `deprecated=`, which infera's wrapper cannot build on CPython {}.{} \
                 (it raises TypeError before {} starts), is not judged",
                engine.name(),
                python.minor.0,
                python.minor.1,
                engine.name()
            ),
        ));
    }
    let Some(at) = inst.argparse_deprecated.as_ref() else { return Ok(()) };
    let lists = (engine.info().options)();
    let deprecated =
        |l: &&infera_facts::engines::OptionList| l.wrapper_fails.is_some_and(|w| w.contains("deprecated="));
    let failing: Vec<&'static str> = lists.iter().filter(deprecated).flat_map(|l| l.releases.iter().copied()).collect();
    let last = lists.iter().rposition(|l| deprecated(&l));
    let fixed = last.and_then(|i| lists.get(i + 1)).and_then(|l| l.releases.first()).copied();
    Err(SelectError::WrapperParser {
        engine,
        version: inst.version.clone(),
        python: python.minor,
        at: at.clone(),
        failing: (failing.first().copied().unwrap_or("?"), failing.last().copied().unwrap_or("?")),
        instead: format!(
            "{} {} or later within {}",
            engine.name(),
            fixed.unwrap_or("a release without it"),
            tree_runs(tree, engine)
        ),
    })
}

/// The releases of an engine the tree's module runs, as its manifest says (`tree
/// rocm7-py312's range >=0.17,<0.29`).
fn tree_runs(tree: &Tree, engine: Engine) -> String {
    match tree.manifest.engines.get(engine.name()).and_then(|e| e.versions.as_deref()).filter(|v| !v.is_empty()) {
        Some(range) => format!("tree {}'s range {range}", tree.family),
        None => format!("what tree {} runs", tree.family),
    }
}

pub(crate) fn server_module(tree: &Tree) -> Result<&str, SelectError> {
    tree.manifest
        .server
        .as_ref()
        .map(|s| s.module.as_str())
        .ok_or_else(|| SelectError::ServerNotInTree { family: tree.family.clone() })
}

/// The module to run must be in the tree (65 when absent; a path escaping the tree is 65 too).
pub(crate) fn module_present(tree: &Tree, module: &str) -> Result<(), Refusal> {
    match tree.module(module) {
        Presence::Present => Ok(()),
        Presence::Escapes(e) => Err(e.clone().into()),
        Presence::Missing => Err(SelectError::ModuleMissing {
            family: tree.family.clone(),
            module: module.to_string(),
            site: tree.site(),
        }
        .into()),
    }
}

/// What the run execs: a module by the image's interpreter, or a program.
pub(crate) enum Run<'a> {
    Module {
        engine: Option<Engine>,
        module: &'a str,
        options: &'a [OsString],
    },
    /// The container path, the host file with --root, and what the file is.
    Program {
        path: PathBuf,
        host: Option<PathBuf>,
        file: Option<&'a ExecFile>,
    },
}

impl Run<'_> {
    pub(crate) fn engine(&self) -> Option<Engine> {
        match self {
            Run::Module { engine, .. } => *engine,
            Run::Program { .. } => None,
        }
    }
    pub(crate) fn module(&self) -> Option<&str> {
        match self {
            Run::Module { module, .. } => Some(module),
            Run::Program { .. } => None,
        }
    }
    /// For messages: what the exec'd file is.
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Run::Module { .. } => "interpreter",
            Run::Program { .. } => "program",
        }
    }
}

/// The engine, module or program of the request, checked against the tree. `engine`: the
/// one decided for the run (or why none could be).
pub(crate) fn target<'a>(
    req: &'a Request,
    facts: &'a Facts,
    engine: &Result<Option<Engine>, Refusal>,
    overlay: &Overlay,
    tree: &'a Tree,
    findings: &mut Vec<Finding>,
) -> Result<Run<'a>, Refusal> {
    let none: &[OsString] = &[];
    let (written, options) = match &req.target {
        Target::RoleModule => (None, none),
        Target::Module { module, options, .. } => (Some(module.as_str()), options.as_slice()),
        Target::Program { program } => return program_target(program, facts, tree),
    };
    let (engine, module) = match req.role {
        Role::Worker | Role::Check => {
            let e = engine.clone()?.ok_or_else(|| infera_core::error::internal("a worker without an engine"))?;
            let allow = req.allow.iter().any(|a| a == crate::request::ENGINE_VERSION);
            let module = engine_module(tree, overlay, e, facts, allow, findings)?;
            (Some(e), written.unwrap_or(module))
        }
        Role::Server => (None, written.map_or_else(|| server_module(tree), Ok)?),
        Role::Run => {
            let module = written.unwrap_or_default();
            // A module of the tree's own packages (infera.kvd, infera.tools.preflight) must be
            // in it; any other is the image's business.
            let top = module.split('.').next().unwrap_or_default();
            if !tree.facts.top_modules.contains_key(top) {
                return Ok(Run::Module { engine: None, module, options });
            }
            (None, module)
        }
    };
    module_present(tree, module)?;
    Ok(Run::Module { engine, module, options })
}

/// A program of the command form: on the image's PATH, else in the tree's bin/.
fn program_target<'a>(program: &OsStr, facts: &'a Facts, tree: &'a Tree) -> Result<Run<'a>, Refusal> {
    match &facts.program {
        Some(Program::Found { path, resolved, file }) => {
            Ok(Run::Program { path: path.clone(), host: facts.root.host_of(resolved), file: Some(file) })
        }
        _ => {
            let name = program.to_string_lossy();
            if let Some((path, file)) = tree.facts.bin.get(name.as_ref()) {
                return Ok(Run::Program { path: path.clone(), host: None, file: Some(file) });
            }
            let path = match &facts.program {
                Some(Program::NotFound { path, .. }) => path.clone(),
                _ => String::new(),
            };
            Err(ProgramError::NotOnPath { name: name.into_owned(), path, bin: tree.bin() }.into())
        }
    }
}
