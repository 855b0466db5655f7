//! The defaults the launcher adds to the engine args, each only when the user did not set
//! it and each explained by a finding, and what the engine then runs with.

use std::ffi::OsString;

use crate::request::Request;
use infera_facts::dialect::{self, Parsed, Setting};
use infera_facts::engines::{Engine, Opt};
use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;
use infera_facts::model::{Model, ModelFacts};
use infera_facts::Facts;

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
pub(crate) struct Effective<'a> {
    pub(crate) tp: Option<u64>,
    pub(crate) gpus: Option<u32>,
    /// `--nnodes` (1 when unset): TP may span nodes.
    pub(crate) nnodes: u64,
    /// A Ray cluster places ranks across nodes: the local GPU count does not bound TP.
    pub(crate) ray: bool,
    pub(crate) kv: Option<String>,
    pub(crate) load_format: Option<String>,
    pub(crate) max_seqs: Option<u64>,
    pub(crate) model: Option<&'a Model>,
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

/// Append the defaults the user did not set; what the engine will then run with.
/// `multi`: the group's planner chose the parallel layout already.
pub(crate) fn defaults<'a>(
    ctx: &Ctx,
    gpus: Option<u32>,
    model: Option<&'a Model>,
    ints: &super::argv::Ints,
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

/// The largest tensor parallel size ≤ `gpus` that divides `heads` (all the GPUs when the
/// head count is unknown).
pub(crate) fn default_tp(gpus: u64, heads: Option<u64>) -> u64 {
    match heads {
        Some(h) if h > 0 => (1..=gpus).rev().find(|t| h % t == 0).unwrap_or(1),
        _ => gpus,
    }
}

fn add(e: Engine, o: Opt, v: &str, added: &mut Vec<OsString>) {
    if let Some(a) = dialect::render(e, o, v) {
        added.extend(a);
    }
}
