//! Engine args: the defaults the launcher adds (each only when the user did not set it,
//! each explained by a finding) and the known-bad configurations of `manifests/rules.toml`,
//! refused with exit 78 unless an operator allows the rule knowingly.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use thiserror::Error;

use crate::request::Request;
use infera_exec_derive::Refuse;
use infera_facts::dialect::{self, Parsed, Setting};
use infera_facts::engines::{Engine, Opt};
use infera_facts::envvars::{self as ev, Env};

use crate::rules::{OnOff, Trait, When};
use infera_core::error::Refusal;
use infera_facts::finding::Finding;
use infera_facts::model::{Model, ModelFacts};
use infera_facts::Facts;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum ArgsError {
    /// A rule of `manifests/rules.toml` fired.
    #[error("{message}")]
    #[refuse(code = code, exit = Refused, hint = hint)]
    Rule { code: String, message: String, hint: String },
    #[error("the model path `{}` does not exist in this container{waited}", path.display())]
    #[refuse(code = "model-missing", exit = Missing, hint = "mount the model volume (PVC) at that path, or fix --model")]
    ModelMissing { path: PathBuf, waited: String },
    #[error("{engine}'s parser requires {option} and it is in neither the args nor a --config file: it exits 2 with `{says}` as the pod starts")]
    #[refuse(code = "arg-required", exit = Usage, hint = "give it: {option} VALUE (for the model, the directory the pod mounts, e.g. {option} /models/<model>)")]
    Required { engine: &'static str, option: &'static str, says: &'static str },
    #[error("the model path `{}` is not in the volume `--volume {}={}` gives", path.display(), at.display(), dir.display())]
    #[refuse(
        code = "model-missing",
        exit = Missing,
        hint_opt = Some(nearest.as_ref().map_or_else(
            || format!("fix the path, or give the directory that holds it as --volume {}=DIR", at.display()),
            |n| format!("did you mean `{}`? (the volume holds it; paths are case-sensitive)", n.display())
        ))
    )]
    NotInVolume { path: PathBuf, at: PathBuf, dir: PathBuf, nearest: Option<PathBuf> },
    #[error("the model `{reference}` is a relative path, but the engine runs in `{}` (INFERA_EXEC_CHDIR): it would read another directory", dir.display())]
    #[refuse(
        code = "model-path-relative",
        exit = Usage,
        hint = "give the model's absolute path, or set INFERA_EXEC_CHDIR to the directory it is relative to"
    )]
    RelativeModel { reference: String, dir: PathBuf },
    #[error(
        "{flag} `{value}`: invalid int value; the {engine} parser exits with `argument {flag}: invalid int value`"
    )]
    #[refuse(code = "arg-not-an-int", exit = Usage, hint = "give a whole number (Python's int(): `8`, ` 8`, `1_6`)")]
    NotAnInt { flag: String, value: String, engine: &'static str },
    #[error(
        "`{written}` (arg {index}) is ambiguous for {engine} {version}'s parser: it could be {}; the engine exits 2 with `ambiguous option`",
        candidates.join(", ")
    )]
    #[refuse(code = "arg-ambiguous", exit = Usage, hint = format!("write the option you mean in full: {}", candidates.join(" or ")))]
    Ambiguous { written: String, index: usize, engine: &'static str, version: String, candidates: Vec<&'static str> },
    #[error(
        "`{written}` (arg {index}) is not an option of {module}: its parser takes no abbreviations (allow_abbrev=False) and exits 2 with `unrecognized arguments`; you meant {full}"
    )]
    #[refuse(code = "arg-abbreviation-refused", exit = Usage, hint = format!("write {full}"))]
    WrapperAbbrev { written: String, index: usize, module: &'static str, full: String },
    #[error(
        "`{written}` (arg {index}) is not an option of {module}: it parses vLLM's options with a plain argparse parser, which reads no `{form}` form (only `vllm serve` does), and exits 2 with `unrecognized arguments`"
    )]
    #[refuse(code = "arg-form-refused", exit = Usage, hint = "{fix}")]
    WrapperForm { written: String, index: usize, module: &'static str, form: &'static str, fix: String },
    #[error(
        "`{written}` (arg {index}) is not an option of {engine} {version}{whose}: its parser exits 2 with `unrecognized arguments` as the pod starts"
    )]
    #[refuse(code = "arg-unknown", exit = Usage, hint = "{fix}")]
    Unknown { written: String, index: usize, engine: &'static str, version: String, whose: String, fix: String },
    #[error("{flag} {value}: a {what} must be at least 1; the engine would fail only after it starts")]
    #[refuse(code = "parallel-size-invalid", exit = Refused, hint = "give a positive size, or leave it out for the launcher's default")]
    NotPositive { flag: String, value: String, what: &'static str },
    #[error("{flag} {value}: a {what} that large is no count of GPUs or sequences; the engine would fail only after it starts")]
    #[refuse(code = "arg-out-of-range", exit = Refused, hint = "give the size you mean, or leave it out for the launcher's default")]
    TooLarge { flag: String, value: String, what: &'static str },
    #[error("{layout}: more GPUs than a deployment has (at most {MAX_WORLD}: {} a node × {MAX_NODES} nodes); the engine would fail only after it starts", infera_facts::node::MAX_GPUS)]
    #[refuse(code = "arg-out-of-range", exit = Refused, hint = "give the sizes you mean (TP × PP is the GPUs of one replica), or leave them out for the launcher's default")]
    LayoutTooLarge { layout: String },
}

/// The most nodes a group of one model spans (a LeaderWorkerSet group, a Ray cluster): sizes
/// past it, or past [`MAX_WORLD`] GPUs, are no deployment's, and are refused before any
/// arithmetic on them.
pub(crate) const MAX_NODES: u64 = 1024;
/// The most GPUs a layout names: a node's most ([`infera_facts::node::MAX_GPUS`]) on each of
/// [`MAX_NODES`] nodes.
pub(crate) const MAX_WORLD: u64 = infera_facts::node::MAX_GPUS as u64 * MAX_NODES;

pub(crate) struct Ctx<'a> {
    pub req: &'a Request,
    pub facts: &'a Facts,
    /// The GPUs the run may use (the pod's environment, else the node).
    pub gpus: &'a Result<infera_facts::gpus::Gpus, infera_facts::gpus::GpuError>,
    /// The model the args name, read from its config.json.
    pub models: &'a std::collections::BTreeMap<OsString, ModelFacts>,
    pub engine: Engine,
    pub parsed: &'a Parsed,
    pub env: &'a Env,
    /// False when a `--config` file could not be read: a default could override it.
    pub defaults: bool,
    /// A GPU's memory on the node judged against, when known: what a hint's layout must hold.
    pub vram: Option<u64>,
}

/// The args as the defaults see them: an option an unknown arg may be meant as counts as set
/// (to a value the launcher does not know), so no default is added beside it.
pub(crate) fn with_unreadable(parsed: &Parsed, opts: &[Opt]) -> Parsed {
    let mut p = parsed.clone();
    for o in opts {
        p.opts.entry(*o).or_insert(dialect::Occurrence {
            setting: Setting::On,
            spelled: String::new(),
            index: usize::MAX,
            from_config: false,
        });
    }
    p
}

/// What the engine will run with: the user's settings plus the launcher's defaults.
struct Effective<'a> {
    tp: Option<u64>,
    gpus: Option<u32>,
    /// `--nnodes` (1 when unset): TP may span nodes.
    nnodes: u64,
    /// A Ray cluster places ranks across nodes: the local GPU count does not bound TP.
    ray: bool,
    kv: Option<String>,
    load_format: Option<String>,
    max_seqs: Option<u64>,
    model: Option<&'a Model>,
}

/// What the engine will run with, as far as the node's checks need it.
pub(crate) struct Applied<'a> {
    /// The args to append (in order) after the user's.
    pub added: Vec<OsString>,
    /// Tensor and pipeline parallel sizes (None: the engine's default, 1).
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub model: Option<&'a Model>,
}

/// The args to append after the user's and what they make the engine run with, or the refusal.
pub(crate) fn apply<'a>(ctx: &Ctx<'a>, findings: &mut Vec<Finding>) -> Result<Applied<'a>, Refusal> {
    let rules = crate::rules::shipped();
    let gpus = ctx.gpus.as_ref().map_err(Clone::clone)?.count;
    let ints = Ints::read(ctx, findings)?;
    let model = model_of(ctx, findings)?;
    let mut added = Vec::new();
    // A rank of a multi-node group: its flags and the sizes across the group first.
    let multi = match ctx.req.group.as_ref().filter(|g| g.size > 1) {
        Some(g) => {
            let user = super::ranks::UserSizes { tp: ints.tp, pp: ints.pp, dp: ints.dp };
            Some(super::ranks::plan(ctx.engine, ctx.parsed, g, gpus, &user, &mut added, findings)?)
        }
        None => None,
    };
    let mut eff = if ctx.defaults {
        defaults(ctx, gpus, model, &ints, multi.as_ref(), &mut added, findings)
    } else {
        let mut none = Vec::new();
        let eff = defaults(ctx, gpus, model, &ints, multi.as_ref(), &mut none, &mut Vec::new());
        // What the engine runs with is the user's (and the file's, unknown) settings only.
        Effective {
            tp: multi.as_ref().map_or(ints.tp, |m| m.tp),
            kv: ctx.parsed.value(Opt::KvCacheDtype).map(str::to_string),
            ..eff
        }
    };
    let pp = multi.as_ref().and_then(|m| m.pp).or(ints.pp);
    if let Some(m) = multi {
        eff.nnodes = m.nnodes;
    }
    check_rules(ctx, rules, &eff, findings)?;
    Ok(Applied { added, tp: eff.tp, pp, model })
}

/// Append the defaults the user did not set; what the engine will then run with.
/// `multi`: the group's planner chose the parallel layout already.
fn defaults<'a>(
    ctx: &Ctx,
    gpus: Option<u32>,
    model: Option<&'a Model>,
    ints: &Ints,
    multi: Option<&super::ranks::Sizes>,
    added: &mut Vec<OsString>,
    findings: &mut Vec<Finding>,
) -> Effective<'a> {
    let (e, p) = (ctx.engine, ctx.parsed);
    let tp = match multi {
        Some(m) => m.tp,
        None => tp_default(ctx, gpus, model, ints.tp, added, findings),
    };
    // Multimodal encoders replicated per rank (vLLM, TP > 1).
    if let Some(m) = model.filter(|m| m.multimodal) {
        if e.has(Opt::MmEncoderTpMode) && tp.unwrap_or(1) > 1 && !p.is_set(Opt::MmEncoderTpMode) {
            add(e, Opt::MmEncoderTpMode, "data", added);
            findings.push(Finding::info(
                "mm-encoder-tp-mode",
                format!("added --mm-encoder-tp-mode data: {} is multimodal and TP is {}; the vision encoder runs data-parallel instead of sharded", m.reference, tp.unwrap_or(1)),
            ));
        }
    }
    let kv = kv_default(ctx, model, added, findings);
    config_made_explicit(ctx, added, findings);
    Effective {
        tp,
        gpus,
        nnodes: ints.nnodes.unwrap_or(1),
        ray: p.value(Opt::DistributedExecutorBackend) == Some("ray"),
        kv,
        load_format: p.value(Opt::LoadFormat).map(str::to_string),
        max_seqs: ints.max_seqs,
        model,
    }
}

/// Tensor parallel size = the visible GPUs, unless the user chose a layout: the largest size
/// the GPUs allow that the model's heads accept (the engine refuses a TP that does not
/// divide num_attention_heads). Returns the TP the engine will run with.
fn tp_default(
    ctx: &Ctx,
    gpus: Option<u32>,
    model: Option<&Model>,
    user_tp: Option<u64>,
    added: &mut Vec<OsString>,
    findings: &mut Vec<Finding>,
) -> Option<u64> {
    let (e, p) = (ctx.engine, ctx.parsed);
    let layout = [Opt::TensorParallelSize, Opt::DataParallelSize, Opt::PipelineParallelSize, Opt::Nnodes]
        .into_iter()
        .find(|o| p.is_set(*o));
    match (layout, gpus) {
        (None, Some(n)) if n > 0 => {
            let heads = model.and_then(|m| m.attention_heads);
            let size = default_tp(n.into(), heads);
            add(e, Opt::TensorParallelSize, &size.to_string(), added);
            let src = ctx.gpus.as_ref().map(|g| g.source.to_string()).unwrap_or_default();
            let flag = e.flag(Opt::TensorParallelSize);
            let why = match heads {
                Some(h) if size == u64::from(n) => {
                    format!("the GPUs visible to this container ({src}), which the model's {h} attention heads divide")
                }
                Some(h) => format!(
                    "{n} GPUs are visible ({src}) but the model's {h} attention heads divide into at most {size} of them; \
                     {} stay idle (set {flag} or --pipeline-parallel-size to use them otherwise)",
                    u64::from(n) - size
                ),
                None => format!("the GPUs visible to this container ({src})"),
            };
            findings.push(Finding::info("tp-default", format!("added {flag} {size}: {why}")));
            Some(size)
        }
        (None, None) => {
            findings.push(Finding::warn(
                "tp-default-unknown-gpus",
                format!(
                    "no {} added: the GPUs this container may use are unknown here (no visible-devices variable, KFD topology or render nodes); in a pod they are its amd.com/gpu devices — set INFERA_GPUS=N to plan with N",
                    e.flag(Opt::TensorParallelSize)
                ),
            ));
            user_tp
        }
        (Some(o), _) if o != Opt::TensorParallelSize => {
            findings.push(Finding::info(
                "tp-default-skipped",
                format!("no tensor parallel size added: {} chooses the parallel layout", e.flag(o)),
            ));
            user_tp
        }
        _ => user_tp,
    }
}

/// KV cache dtype: auto for MLA models, fp8_e4m3 otherwise (unless INFERA_DEFAULT_KV_FP8=0).
/// Returns the dtype the engine will run with.
fn kv_default(
    ctx: &Ctx,
    model: Option<&Model>,
    added: &mut Vec<OsString>,
    findings: &mut Vec<Finding>,
) -> Option<String> {
    let (e, p) = (ctx.engine, ctx.parsed);
    if p.is_set(Opt::KvCacheDtype) {
        return p.value(Opt::KvCacheDtype).map(str::to_string);
    }
    let setting = ev::get(ctx.env, ev::INFERA_DEFAULT_KV_FP8).map(|v| v.to_string_lossy());
    let fp8_off = setting.as_deref() == Some("0");
    // Infera's wrapper turns its default off on `0` only; other "no"s keep it, said here.
    if let Some(v) =
        setting.filter(|v| ["false", "no", "off", "n", "f"].contains(&v.trim().to_ascii_lowercase().as_str()))
    {
        findings.push(Finding::warn(
            "default-kv-fp8-spelling",
            format!(
                "{}=`{v}` keeps the fp8 KV default: only `0` turns it off (as infera's wrapper reads it)",
                ev::INFERA_DEFAULT_KV_FP8
            ),
        ));
    }
    match model {
        Some(m) if m.mla => {
            add(e, Opt::KvCacheDtype, "auto", added);
            // A fix applied is information (the start line says it); a warning is for a
            // risk left in place.
            findings.push(Finding::info(
                "kv-cache-dtype-mla",
                format!(
                    "added --kv-cache-dtype auto: {} is an MLA model ({}); fp8 KV with MLA crashes on ROCm",
                    m.reference,
                    m.evidence.join("; ")
                ),
            ));
            Some("auto".into())
        }
        Some(_) if !fp8_off => {
            add(e, Opt::KvCacheDtype, "fp8_e4m3", added);
            findings.push(Finding::info(
                "kv-cache-dtype-default",
                "added --kv-cache-dtype fp8_e4m3 (infera's default; INFERA_DEFAULT_KV_FP8=0 turns it off)",
            ));
            Some("fp8_e4m3".into())
        }
        Some(_) => {
            findings
                .push(Finding::info("kv-cache-dtype-default", "no --kv-cache-dtype added: INFERA_DEFAULT_KV_FP8=0"));
            None
        }
        None => {
            findings.push(Finding::info(
                "kv-cache-dtype-default",
                "no --kv-cache-dtype added: the model's config.json could not be read (infera's wrapper adds its own default, fp8_e4m3, unless INFERA_DEFAULT_KV_FP8=0)",
            ));
            None
        }
    }
}

/// Options the wrapper reads from its command line only: what the `--config` file sets is
/// written out there, so that the file is what runs (the KV dtype only while the wrapper's
/// fp8 default is on: INFERA_DEFAULT_KV_FP8=0 turns it off).
fn config_made_explicit(ctx: &Ctx, added: &mut Vec<OsString>, findings: &mut Vec<Finding>) {
    let (e, p) = (ctx.engine, ctx.parsed);
    let fp8_default = ev::get(ctx.env, ev::INFERA_DEFAULT_KV_FP8).is_none_or(|v| v != "0");
    for &(o, why) in e.info().wrapper_reads_only_its_command_line {
        let needed = o != Opt::KvCacheDtype || fp8_default;
        if let (true, true, Some(v)) = (needed, p.from_config(o), p.value(o)) {
            let flag = e.flag(o);
            add(e, o, v, added);
            findings.push(Finding::info(
                "config-made-explicit",
                format!(
                    "added {flag} {v} from the --config file: {} reads only its command line for {flag} ({why})",
                    e.info().module
                ),
            ));
        }
    }
}

/// Abbreviated options: ambiguous ones refused as the engine's parser refuses them; the
/// others said, with whether the engine's full option list confirmed them.
pub(crate) fn abbreviations(
    e: Engine,
    version: Option<&str>,
    list: Option<&infera_facts::engines::OptionList>,
    parsed: &Parsed,
    findings: &mut Vec<Finding>,
) -> Result<(), ArgsError> {
    if let Some((i, written, c)) = parsed.ambiguous.first() {
        return Err(ArgsError::Ambiguous {
            written: written.clone(),
            index: i + 1,
            engine: e.name(),
            version: version.unwrap_or("?").to_string(),
            candidates: c.clone(),
        });
    }
    for (i, written, full, checked) in &parsed.abbreviations {
        if *checked {
            let l = list.map_or_else(|| "?".to_string(), |l| l.label());
            findings.push(Finding::info(
                "arg-abbreviation",
                format!("`{written}` (arg {}) read as {full}, as {} {l}'s parser reads it", i + 1, e.name()),
            ));
        } else {
            findings.push(Finding::warn(
                "arg-abbreviation-unchecked",
                format!(
                    "`{written}` (arg {}) read as {full} from the launcher's own options: {} {}'s full option list is not recorded (recorded: {}), so whether its parser finds it ambiguous is not checked; write options in full",
                    i + 1,
                    e.name(),
                    version.unwrap_or("?"),
                    recorded_releases(e)
                ),
            ));
        }
    }
    Ok(())
}

/// The directory a pod would mount for a model path: its first component (`/models`).
fn volume_of(path: &std::path::Path) -> PathBuf {
    path.components().take(2).collect()
}

/// How the model wait went, for a model still missing: with --wait-model a real run refuses
/// only once the wait is over.
pub(crate) fn waited(req: &Request) -> String {
    match &req.wait_model {
        None => String::new(),
        Some(w) if req.dry_run => format!(" (a real run waits up to {} s for it: {})", w.seconds, w.said),
        Some(w) => format!(" after waiting {} s for it ({})", w.seconds, w.said),
    }
}

/// What the engine's parser exits 2 without, given neither in the args nor their `--config`.
pub(crate) fn required(e: Engine, parsed: &Parsed) -> Result<(), ArgsError> {
    for (opt, says) in e.info().requires {
        if parsed.get(*opt).is_none() {
            let option = (e.info().spell)(*opt).and_then(|s| s.names().next()).unwrap_or_default();
            return Err(ArgsError::Required { engine: e.name(), option, says });
        }
    }
    Ok(())
}

/// The router's tokenizer path, when it is one: missing at the image's root it is refused
/// as a worker's model is (the router would try to download a path); under `--root` (a
/// volume in the pod) it is a warning.
pub(crate) fn tokenizer(
    req: &Request,
    facts: &Facts,
    models: &BTreeMap<OsString, ModelFacts>,
    router: &infera_facts::router_args::RouterArgs,
    findings: &mut Vec<Finding>,
) -> Result<(), ArgsError> {
    let Some(Some(ModelFacts::Missing { path, nearest, .. })) = router.tokenizer_path().map(|p| models.get(p)) else {
        return Ok(());
    };
    missing(req, facts, path, nearest.as_deref(), [" (--router-tokenizer-path)", "", ""], findings)
}

/// A model path that is not there: refused at the image's root (the pod's own files) and
/// under a `--volume` given (the user's volume is the truth about its paths), a warning
/// elsewhere under `--root`, where it is most likely one of the pod's volumes. `words`: what
/// follows the path, what follows "(a volume in the pod?)", what ends the warning.
fn missing(
    req: &Request,
    facts: &Facts,
    path: &std::path::Path,
    nearest: Option<&std::path::Path>,
    [named, skipped, purpose]: [&str; 3],
    findings: &mut Vec<Finding>,
) -> Result<(), ArgsError> {
    if facts.root.is_host_root() {
        return Err(ArgsError::ModelMissing { path: path.to_path_buf(), waited: waited(req) });
    }
    if let Some((at, dir)) = req.volumes.iter().find(|(at, _)| path.starts_with(at)) {
        let (path, at, dir) = (path.to_path_buf(), at.clone(), dir.clone());
        return Err(ArgsError::NotInVolume { path, at, dir, nearest: nearest.map(std::path::Path::to_path_buf) });
    }
    let msg = format!(
        "`{}`{named} is not in the image root (a volume in the pod?){}{skipped}; give its files with --volume {}=DIR{purpose}",
        path.display(),
        waited(req),
        volume_of(path).display()
    );
    findings.push(Finding::warn("model-unreadable", msg));
    Ok(())
}

/// Long options the engine's parser does not have (argparse exits 2 on them before anything
/// loads), judged with the option list recorded for the image's release: refused, with the
/// option meant (a close name, or this engine's spelling of the other engine's option).
/// Where no list is proven for the release, an option that no recorded release has is
/// refused too when the release lies between recorded ones, or when it is a typo of a
/// recorded option or the other engine's spelling (wrong on every release); any other is a
/// warning judged with the nearest list: a newer release may have added it.
/// `--help`/`-h`, argparse's own: said (the wrapper prints its help and exits 0), not judged.
fn help(e: Engine, raw: &[u8], i: usize, findings: &mut Vec<Finding>) -> bool {
    if raw != b"--help" && raw != b"-h" {
        return false;
    }
    findings.push(Finding::warn(
        "engine-help",
        format!(
            "`{}` (arg {}): {}'s parser prints its help and exits 0: the engine does not start",
            String::from_utf8_lossy(raw),
            i + 1,
            e.info().module
        ),
    ));
    true
}

pub(crate) fn unknown_options(
    e: Engine,
    version: Option<&str>,
    exact: Option<&infera_facts::engines::OptionList>,
    args: &[OsString],
    findings: &mut Vec<Finding>,
) -> Result<Vec<Opt>, ArgsError> {
    let Some(list) = exact.or_else(|| infera_facts::engines::nearest_option_list(e, version)) else {
        return Ok(Vec::new());
    };
    let span = infera_facts::engines::span(e, version);
    let mut unreadable = Vec::new();
    // Past a few unknown options the args are not this list's engine version: the rest are
    // named once, without a guess each (a guess is a similarity search over every option).
    const ONE_BY_ONE: usize = 8;
    let (mut shown, mut more) = (0usize, Vec::new());
    for (i, a) in args.iter().enumerate().take_while(|(_, a)| a.as_bytes() != b"--") {
        let raw = a.as_bytes();
        if help(e, raw, i, findings) || !raw.starts_with(b"--") || raw.len() < 3 {
            continue;
        }
        let name = dialect::normalise(e, raw.split(|b| *b == b'=').next().unwrap_or_default());
        // vLLM's `--json-option.key` forms are judged by their head (the wrapper refuses them
        // on its own grounds). An option the launcher has a spelling of is held to the list
        // too: the release's parser is what refuses it.
        let head = name.split('.').next().unwrap_or_default();
        if is_prefix_of_one(list.names(), head) {
            continue; // the option, or a prefix the abbreviation checks judge
        }
        let other = other_engines(e, head);
        // With the release's own list the parser's answer is known; else: no release has it,
        // and it is another engine's, or a typo of one some release has.
        let refused = exact.is_some() || {
            let every = infera_facts::engines::every_release_names(e);
            !is_prefix_of_one(every, head)
                && (span == infera_facts::engines::Span::Within || other.is_some() || typo(every, head))
        };
        if !refused && shown == ONE_BY_ONE {
            more.push(head.to_string());
            continue;
        }
        // Only an option said one by one gets a guess (a similarity search over the list).
        let (whose, fix, opt) = other.unwrap_or_else(|| closest(e, head, list.names()));
        if refused {
            let proof = match exact {
                Some(l) => format!(" (its parser's options, recorded from {} {})", e.name(), l.label()),
                None => format!(" (no recorded release of {} has it: {})", e.name(), recorded_releases(e)),
            };
            return Err(ArgsError::Unknown {
                written: head.to_string(),
                index: i + 1,
                engine: e.name(),
                version: version.unwrap_or("?").to_string(),
                whose: format!("{whose}{proof}"),
                fix,
            });
        }
        shown += 1;
        findings.push(unchecked(e, version, list, head, i, &whose, &fix, opt));
        unreadable.extend(opt);
    }
    if !more.is_empty() {
        findings.push(Finding::warn(
            "arg-unknown-unchecked",
            format!(
                "{} more options that {} {} does not have: {}{}; with this many the args are read as another \
                 version's, and none of the engine defaults (TP, KV cache dtype, …) is added",
                more.len(),
                e.name(),
                list.label(),
                more.iter().take(ONE_BY_ONE).cloned().collect::<Vec<_>>().join(" "),
                if more.len() > ONE_BY_ONE { format!(" and {} more", more.len() - ONE_BY_ONE) } else { String::new() }
            ),
        ));
        unreadable.extend(Opt::ALL);
    }
    Ok(unreadable)
}

/// `head` is an option of the sorted list, or a prefix of one (an abbreviation).
fn is_prefix_of_one(names: &[&str], head: &str) -> bool {
    let from = names.partition_point(|n| *n < head);
    names.get(from).is_some_and(|n| n.starts_with(head))
}

/// A misspelling of an option some recorded release has (`every`): at most two edits from it.
fn typo(every: &[&str], head: &str) -> bool {
    head.len() > 8 && every.iter().any(|n| strsim::damerau_levenshtein(head, n) <= 2)
}

/// The recorded releases of an engine, said as runs: `0.9.0 to 0.9.2, 0.10.0, …`.
fn recorded_releases(e: Engine) -> String {
    let lists = (e.info().options)();
    match (lists.first(), lists.last()) {
        (Some(f), Some(l)) => format!(
            "{} lists from {} to {}",
            lists.len(),
            f.releases.first().unwrap_or(&"?"),
            l.releases.last().unwrap_or(&"?")
        ),
        _ => "none recorded".to_string(),
    }
}

/// The warning for an option the nearest recorded list lacks, on a release no list proves.
#[allow(clippy::too_many_arguments)]
fn unchecked(
    e: Engine,
    version: Option<&str>,
    list: &infera_facts::engines::OptionList,
    head: &str,
    i: usize,
    whose: &str,
    fix: &str,
    opt: Option<Opt>,
) -> Finding {
    let version = version.unwrap_or("?");
    Finding::warn(
        "arg-unknown-unchecked",
        format!(
            "`{head}` (arg {}) is not an option of {} {} (the recorded list nearest to the image's {version}){whose}; \
             if {version} does not have it either, its parser exits 2 as the pod starts ({fix}; lists are recorded \
             with `scripts/check-engine-parsers --options`){}",
            i + 1,
            e.name(),
            list.label(),
            opt.map(|o| format!("; no default is added for {}", e.flag(o))).unwrap_or_default()
        ),
    )
}

/// What an unknown option was meant to be: whose spelling it is, the fix, and the launcher's
/// option it names when it names one.
type Meant = (String, String, Option<Opt>);

/// The unknown option as another engine's: its spelling of one of ours, or an option some
/// release of it has.
fn other_engines(e: Engine, name: &str) -> Option<Meant> {
    for other in Engine::all().filter(|o| *o != e) {
        let opt = other.spelling_of(name).map(|(o, _)| o);
        if let Some(ours) = opt.and_then(|o| e.spelling(o)).and_then(|sp| sp.names().find(|n| n.starts_with("--"))) {
            return Some((
                format!(" (it is {}'s spelling)", other.name()),
                format!("write {ours}, {}'s spelling of {}'s {name}", e.name(), other.name()),
                opt,
            ));
        }
        if infera_facts::engines::any_release_has(other, name) {
            // A similar name of this engine would be a guess at a different option.
            let fix = format!("remove it, or find {}'s option for it in its own `--help` in the image", e.name());
            return Some((format!(" (it is an option of {})", other.name()), fix, None));
        }
    }
    None
}

/// The unknown option as a misspelling of one of `names` (a similarity search over them).
fn closest(e: Engine, name: &str, names: &[&str]) -> Meant {
    match infera_facts::suggest::closest(name, names.iter().copied()) {
        Some(n) => (String::new(), format!("did you mean {n}?"), e.spelling_of(n).map(|(o, _)| o)),
        None => {
            (String::new(), format!("remove it, or check the option in {}'s own `--help` in the image", e.name()), None)
        }
    }
}

/// What the wrapper module's parser refuses on the command line where the bare engine's would
/// not: an abbreviation (infera.engine.vllm: allow_abbrev=False), and for vLLM
/// `--under_scores` and dotted `--json-option.key` (FlexibleArgumentParser forms). A
/// `--config` file is read by the engine itself, so its keys keep the engine's dialect.
pub(crate) fn wrapper_dialect(
    e: Engine,
    module: &'static str,
    args: &[std::ffi::OsString],
    list: Option<&infera_facts::engines::OptionList>,
    parsed: &Parsed,
) -> Result<(), ArgsError> {
    if e.info().wrapper_abbrev {
        return Ok(());
    }
    let is_config = |i: usize| args.get(i).is_some_and(|a| a == "--config");
    if let Some((i, written, full, _)) = parsed.abbreviations.iter().find(|a| !is_config(a.0)) {
        return Err(ArgsError::WrapperAbbrev { written: written.clone(), index: i + 1, module, full: full.clone() });
    }
    let known = |name: &str| {
        list.is_some_and(|l| l.names().binary_search(&name).is_ok())
            || infera_facts::engines::Opt::ALL
                .iter()
                .any(|o| e.spelling(*o).is_some_and(|sp| sp.names().any(|n| n == name)))
    };
    for (i, a) in args.iter().enumerate() {
        let a = a.to_string_lossy();
        if a == "--" {
            break;
        }
        let Some(name) = a.split('=').next().filter(|n| n.starts_with("--")) else { continue };
        // What vLLM's FlexibleArgumentParser would have read it as.
        let dashed = |s: &str| format!("--{}", s[2..].replace('_', "-"));
        let (meant, dotted) = match name.split_once('.') {
            Some((head, _)) => (dashed(head), true),
            None if name.contains('_') => (dashed(name), false),
            None => continue,
        };
        if known(&meant) {
            return Err(ArgsError::WrapperForm {
                written: name.to_string(),
                index: i + 1,
                module,
                form: if dotted { "--option.key" } else { "--under_score" },
                fix: if dotted {
                    format!(
                        "give {meant} one JSON object with every key, e.g. {meant} '{{\"kv_role\": \"kv_producer\"}}'"
                    )
                } else {
                    format!("write {meant}")
                },
            });
        }
    }
    Ok(())
}

/// The largest tensor parallel size ≤ `gpus` that divides `heads` (all the GPUs when the
/// head count is unknown).
pub(crate) fn default_tp(gpus: u64, heads: Option<u64>) -> u64 {
    match heads {
        Some(h) if h > 0 => (1..=gpus).rev().find(|t| h % t == 0).unwrap_or(1),
        _ => gpus,
    }
}

/// The first rule that fires and is not allowed refuses the run.
fn check_rules(
    ctx: &Ctx,
    rules: &[crate::rules::Rule],
    eff: &Effective,
    findings: &mut Vec<Finding>,
) -> Result<(), ArgsError> {
    let (e, p) = (ctx.engine, ctx.parsed);
    for rule in rules {
        if !rule.engines.is_empty() && !rule.engines.iter().any(|x| *x == e.name()) {
            continue;
        }
        let Some(evidence) = fires(&rule.when, eff, e, p) else { continue };
        let vars = vars(eff, e);
        let msg = format!("{} [{}]", fill(rule.message, &vars), evidence.join("; "));
        if ctx.req.allow.iter().any(|a| a == rule.code) {
            findings.push(Finding::warn(rule.code, format!("allowed by INFERA_ALLOW/--allow: {msg}")));
            continue;
        }
        let fix = weights_fix(ctx, eff, &rule.when).unwrap_or_else(|| fill(rule.fix, &vars));
        let hint = format!("{fix}; or set INFERA_ALLOW={} to run it anyway", rule.code);
        return Err(ArgsError::Rule { code: rule.code.to_string(), message: msg, hint });
    }
    Ok(())
}

fn add(e: Engine, o: Opt, v: &str, added: &mut Vec<OsString>) {
    if let Some(a) = dialect::render(e, o, v) {
        added.extend(a);
    }
}

/// The integer options the rules reason about, read as the engine's parser reads them.
struct Ints {
    tp: Option<u64>,
    pp: Option<u64>,
    dp: Option<u64>,
    nnodes: Option<u64>,
    max_seqs: Option<u64>,
}

impl Ints {
    fn read(ctx: &Ctx, findings: &mut Vec<Finding>) -> Result<Ints, ArgsError> {
        let (e, p) = (ctx.engine, ctx.parsed);
        let mut get = |o: Opt, what: &'static str| -> Result<Option<u64>, ArgsError> {
            let Some(Setting::Value(v)) = p.get(o) else { return Ok(None) };
            let flag = e.flag(o);
            let text = v.to_string_lossy();
            let n = match v.to_str().ok_or(dialect::NotAnInt).and_then(dialect::py_int) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    findings.push(Finding::warn(
                        "arg-unread",
                        format!("{flag} `{text}`: not read as a number here (non-ASCII digits); the rules that need it are not checked"),
                    ));
                    return Ok(None);
                }
                Err(dialect::NotAnInt) => {
                    return Err(ArgsError::NotAnInt { flag, value: text.into_owned(), engine: e.name() });
                }
            };
            // Echoed as written: py_int saturates what does not fit 64 bits.
            let value = text.trim().to_string();
            match u64::try_from(n) {
                Ok(_) if n == i64::MAX => Err(ArgsError::TooLarge { flag, value, what }),
                Ok(v) if v > 0 => Ok(Some(v)),
                _ => Err(ArgsError::NotPositive { flag, value, what }),
            }
        };
        let tp = get(Opt::TensorParallelSize, "tensor parallel size")?;
        let dp = get(Opt::DataParallelSize, "data parallel size")?;
        let pp = get(Opt::PipelineParallelSize, "pipeline parallel size")?;
        let nnodes = get(Opt::Nnodes, "node count")?;
        let max_seqs = get(Opt::MaxSeqs, "number of concurrent sequences")?;
        // Sizes a deployment can have: products of them are taken below, and by the rules.
        let sizes = [(Opt::TensorParallelSize, tp), (Opt::PipelineParallelSize, pp), (Opt::DataParallelSize, dp)];
        let world = sizes.iter().filter_map(|(_, v)| *v).try_fold(1u64, u64::checked_mul);
        if world.is_none_or(|w| w > MAX_WORLD) || nnodes.is_some_and(|n| n > MAX_NODES) {
            let said: Vec<String> = sizes
                .iter()
                .chain([(Opt::Nnodes, nnodes)].iter())
                .filter_map(|(o, v)| v.map(|v| format!("{} {v}", e.flag(*o))))
                .collect();
            return Err(ArgsError::LayoutTooLarge { layout: said.join(" × ") });
        }
        Ok(Ints { tp, pp, dp, nnodes, max_seqs })
    }
}

fn model_of<'a>(ctx: &Ctx<'a>, findings: &mut Vec<Finding>) -> Result<Option<&'a Model>, Refusal> {
    let Some(Setting::Value(reference)) = ctx.parsed.get(Opt::Model) else {
        findings.push(Finding::info("model-unknown", "no model in the args: model rules skipped"));
        return Ok(None);
    };
    match ctx.models.get(reference) {
        Some(ModelFacts::Known(m)) => {
            if let Some(v) = &m.model_type_unusable {
                findings.push(Finding::warn(
                    "model-type-unusable",
                    format!(
                        "model_type = {v} in `{}` is not a name: the rules that depend on the model's type (MLA) are not checked",
                        m.config.display()
                    ),
                ));
            }
            if let Some(v) = &m.heads_unusable {
                findings.push(Finding::warn(
                    "model-heads-unusable",
                    format!(
                        "num_attention_heads = {v} in `{}` is not a positive count: the rule on how tensor parallelism divides the heads is not checked",
                        m.config.display()
                    ),
                ));
            }
            Ok(Some(m))
        }
        Some(ModelFacts::Missing { path, nearest, .. }) => {
            let words = ["", ": model rules skipped", " to run them"];
            missing(ctx.req, ctx.facts, path, nearest.as_deref(), words, findings)?;
            Ok(None)
        }
        Some(ModelFacts::Relative { reference }) => match &ctx.req.chdir {
            Some(dir) => Err(ArgsError::RelativeModel { reference: reference.clone(), dir: dir.clone() }.into()),
            None => {
                findings.push(Finding::warn(
                    "model-unreadable",
                    format!("`{reference}` is relative to the launcher's working directory: model rules skipped"),
                ));
                Ok(None)
            }
        },
        Some(ModelFacts::Unreadable { reason, .. }) => {
            findings.push(Finding::warn(
                "model-unreadable",
                format!("{reason}: model rules skipped, nothing refused on a guess"),
            ));
            Ok(None)
        }
        None => Ok(None),
    }
}

/// Evidence for each condition when all hold; None when any does not (or cannot be known).
fn fires(w: &When, eff: &Effective, e: Engine, p: &Parsed) -> Option<Vec<String>> {
    let src = |o: Opt| match p.opts.get(&o) {
        Some(occ) if occ.from_config => "set in the --config file",
        Some(_) => "set in the args",
        None => "infera's default",
    };
    let mut ev = Vec::new();
    if let Some(traits) = &w.model {
        let m = eff.model?;
        let has = |t: &Trait| match t {
            Trait::Mla => m.mla,
            Trait::Hybrid => m.hybrid,
            Trait::Multimodal => m.multimodal,
        };
        if !traits.iter().all(has) {
            return None;
        }
        ev.push(format!("{}: {}", m.config.display(), m.evidence.join(", ")));
    }
    if let Some(list) = &w.kv_cache_dtype {
        let kv = eff.kv.as_ref().filter(|kv| list.contains(&kv.as_str()))?;
        ev.push(format!("--kv-cache-dtype {kv} ({})", src(Opt::KvCacheDtype)));
    }
    if let Some(list) = &w.load_format {
        let lf = eff.load_format.as_ref().filter(|lf| list.contains(&lf.as_str()))?;
        ev.push(format!("--load-format {lf}"));
    }
    if let Some(n) = w.max_seqs_over {
        let flag = e.flag(Opt::MaxSeqs);
        match eff.max_seqs {
            Some(s) if s > n => ev.push(format!("{flag} {s}")),
            Some(_) => return None,
            None => ev.push(format!("{flag} unset (the engine's default is more than {n})")),
        }
    }
    for (cond, opt) in [(w.prefix_caching, Opt::PrefixCaching), (w.chunked_prefill, Opt::ChunkedPrefill)] {
        if let Some(want) = cond {
            ev.push(switch(p, opt, want)?);
        }
    }
    if let Some(want) = w.tp_over_gpus {
        ev.push(tp_over_gpus(eff, e, want, src(Opt::TensorParallelSize))?);
    }
    if let Some(want) = w.tp_divides_heads {
        let (tp, heads) = (eff.tp?, eff.model?.attention_heads?);
        if tp == 0 || (heads % tp == 0) != want {
            return None;
        }
        ev.push(format!("num_attention_heads {heads}, tensor parallel size {tp}"));
    }
    Some(ev)
}

/// A boolean option set as the rule wants it, with where it was set.
fn switch(p: &Parsed, opt: Opt, want: OnOff) -> Option<String> {
    let occ = p.opts.get(&opt)?;
    let is = if occ.setting == Setting::Off { OnOff::Off } else { OnOff::On };
    if is != want {
        return None;
    }
    Some(if occ.from_config {
        format!("{} (in the --config file, arg {})", occ.spelled, occ.index + 1)
    } else {
        format!("{} (arg {})", occ.spelled, occ.index + 1)
    })
}

/// TP against the GPUs of the nodes it spans (a Ray cluster places ranks itself: no bound).
fn tp_over_gpus(eff: &Effective, e: Engine, want: bool, src: &str) -> Option<String> {
    let (tp, g) = (eff.tp?, eff.gpus?);
    if eff.ray {
        return None;
    }
    let capacity = u64::from(g).saturating_mul(eff.nnodes);
    if (tp > capacity) != want {
        return None;
    }
    let nodes = if eff.nnodes > 1 { format!(" on each of {} nodes", eff.nnodes) } else { String::new() };
    Some(format!("{} {tp} ({src}), {g} GPUs visible{nodes}", e.flag(Opt::TensorParallelSize)))
}

fn vars(eff: &Effective, e: Engine) -> BTreeMap<&'static str, String> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    BTreeMap::from([
        ("tp", opt(eff.tp.map(|x| x.to_string()))),
        ("gpus", opt(eff.gpus.map(|x| x.to_string()))),
        ("heads", opt(eff.model.and_then(|m| m.attention_heads).map(|x| x.to_string()))),
        ("kv_cache_dtype", opt(eff.kv.clone())),
        ("load_format", opt(eff.load_format.clone())),
        ("max_seqs", eff.max_seqs.map(|x| x.to_string()).unwrap_or_else(|| "the engine's default number of".into())),
        ("model", opt(eff.model.map(|m| m.reference.clone()))),
        ("engine", e.name().to_string()),
    ])
}

/// A rule on a tensor parallel size over the visible GPUs, where the weights do not fit those
/// GPUs either: lowering the size to them would only be refused as `weights-exceed-vram`, so
/// the fix names the GPUs the weights need, as a size the model's heads allow.
fn weights_fix(ctx: &Ctx, eff: &Effective, when: &crate::rules::When) -> Option<String> {
    let (vram, gpus, m) = (ctx.vram?, eff.gpus?, eff.model?);
    let bytes = m.weights.as_ref()?.bytes;
    if when.tp_over_gpus != Some(true) || bytes / u64::from(gpus.max(1)) <= vram {
        return None;
    }
    let version = ctx.facts.engine(ctx.engine).map(|i| i.version.as_str());
    let room = super::share::room(ctx.engine, version, ctx.parsed, vram, eff.tp.unwrap_or(1));
    let (need, layout) = super::layout::need(bytes, room, m.attention_heads);
    Some(format!(
        "its weights do not fit {gpus} GPUs of {:.1} GiB either: give the pod at least {need}{layout} (resources.limits \
         amd.com/gpu), or spread it over nodes (--pipeline-parallel-size with --nnodes)",
        vram as f64 / (1u64 << 30) as f64
    ))
}

fn fill(template: &str, vars: &BTreeMap<&'static str, String>) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}
