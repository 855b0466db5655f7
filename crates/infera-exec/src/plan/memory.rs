//! The memory this node must give the engine, held against what it has, before anything
//! loads: the checkpoint against the GPUs' memory (a load that cannot finish fails with a HIP
//! out-of-memory error; one that leaves no room for the KV cache fails only after the whole
//! load), and /dev/shm against the ranks that share it (vLLM's shared-memory message queues
//! and RCCL's shared-memory transport: a late `Bus error`). Facts only; `--root` other than
//! `/` (no node facts) says nothing. With a node, what cannot be judged for lack of a fact
//! (no checkpoint size, no /dev/shm of the worker's pod, an engine's share it does not know)
//! is a warning, never a silent pass.

use thiserror::Error;

use super::defaults::Applied;
use super::share::Share;
use infera_core::error::Refusal;
use infera_exec_derive::Refuse;
use infera_facts::dialect::Parsed;
use infera_facts::engines::{Engine, Opt};
use infera_facts::finding::Finding;
use infera_facts::Facts;

/// Below this, a group of more than one rank on the node is refused: Docker's and
/// Kubernetes' 64 MiB default is the case it catches.
pub(crate) const SHM_FLOOR: u64 = 256 << 20;
/// What each local rank is given room for: vLLM's message queues and RCCL's buffers come to
/// about 1 GiB at TP 8 with vLLM's defaults.
pub(crate) const SHM_PER_RANK: u64 = 128 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum MemoryError {
    #[error(
        "the weights of {model} are {bytes} ({from}); over TP {tp} × PP {pp} that is {per_gpu} per GPU, more \
         than a GPU's {vram} ({gpu}): the load would fail with a HIP out-of-memory error"
    )]
    #[refuse(
        code = "weights-exceed-vram",
        exit = Refused,
        hint = "spread the weights over more GPUs (at least {need} at this size{layout}: --tensor-parallel-size, or pipeline parallelism across nodes), or use a quantized checkpoint; or set INFERA_ALLOW=weights-exceed-vram to run it anyway"
    )]
    WeightsExceedVram {
        model: String,
        bytes: String,
        from: String,
        tp: u64,
        pp: u64,
        per_gpu: String,
        vram: String,
        gpu: String,
        need: u64,
        /// Why `need` is more than the bytes alone ask for: the layouts the model allows.
        layout: String,
    },
    #[error(
        "the weights of {model} take {per_gpu} per GPU (TP {tp} × PP {pp}, {from}), {share} of the {budget} that \
         {option} {fraction} gives the engine of a GPU's {vram} ({gpu}): no room is left for the KV cache, and \
         {symptom} after the whole load"
    )]
    #[refuse(
        code = "kv-cache-no-room",
        exit = Refused,
        hint = "raise {raise} (at most 0.95), or spread the weights over more GPUs (at least {need} at this size{layout}: --tensor-parallel-size); or set INFERA_ALLOW=kv-cache-no-room to run it anyway"
    )]
    NoKvRoom {
        model: String,
        per_gpu: String,
        tp: u64,
        pp: u64,
        from: String,
        share: String,
        budget: String,
        option: &'static str,
        fraction: String,
        vram: String,
        gpu: String,
        symptom: &'static str,
        /// The option to raise.
        raise: &'static str,
        need: u64,
        layout: String,
    },
    #[error(
        "/dev/shm is {size}{pod} but this pod runs {ranks} GPU ranks that share memory through it (vLLM's \
         message queues, RCCL's transport; about {estimate} at this size): they would die with `Bus error` or \
         RCCL's `Error while creating shared memory segment` after the load"
    )]
    #[refuse(
        code = "shm-too-small",
        exit = Unsupported,
        hint = "mount a memory-backed volume at /dev/shm: `volumes: [{{name: dshm, emptyDir: {{medium: Memory, sizeLimit: 16Gi}}}}]` with a volumeMount at /dev/shm (docker/podman: --shm-size=16g, or --ipc=host)"
    )]
    ShmTooSmall { size: String, pod: String, ranks: u64, estimate: String },
}

pub(crate) fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

/// What the memory checks read of the plan: the engine (and its release), its args as
/// parsed, and what the launcher applied.
pub(crate) struct Run<'a> {
    pub engine: Engine,
    pub version: Option<&'a str>,
    pub parsed: &'a Parsed,
    pub applied: &'a Applied<'a>,
}

pub(crate) fn check(
    facts: &Facts,
    on: Option<&infera_facts::node::NodeFacts>,
    run: &Run,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), Refusal> {
    let Some(h) = on else { return Ok(()) };
    let gpus = super::gpu::allocated(h, facts);
    let (tp, pp) = (run.applied.tp.unwrap_or(1).max(1), run.applied.pp.unwrap_or(1).max(1));
    let ranks = tp.saturating_mul(pp);
    let local = if gpus.is_empty() { ranks } else { ranks.min(gpus.len() as u64) };
    if let Err(e) = shm(h, local, findings) {
        return Err((*e).into());
    }
    let vram = gpus.iter().filter_map(|g| g.vram).min();
    weights(run, (tp, pp), vram.map(|v| (v, h.described())), allow, findings)
}

/// /dev/shm of the pod for `local` GPU ranks: refused under the floor, a warning under the
/// estimate; not known (a profile's or a part's node without `--shm-size`), a warning.
fn shm(node: &infera_facts::node::NodeFacts, local: u64, findings: &mut Vec<Finding>) -> Result<(), Box<MemoryError>> {
    if local <= 1 {
        return Ok(());
    }
    let Some(shm) = node.pod.shm else {
        let why = if node.live {
            "/dev/shm could not be read".to_string()
        } else {
            format!(
                "{} describes the node, not the worker's pod (a profile's /dev/shm is the pod's that read the node)",
                node.described()
            )
        };
        findings.push(Finding::warn(
            "shm-unjudged",
            format!(
                "/dev/shm is not judged for the pod's {local} GPU ranks: {why}; give the worker's with --shm-size \
                 (its /dev/shm emptyDir's sizeLimit, or docker's --shm-size), e.g. --shm-size 16Gi"
            ),
        ));
        return Ok(());
    };
    let estimate = SHM_PER_RANK.saturating_mul(local);
    // Whose /dev/shm, where it is not the pod's the launcher runs in (`--shm-size`).
    let pod = if node.live || node.pod.source.is_empty() { String::new() } else { format!(" ({})", node.pod.source) };
    if shm.size < SHM_FLOOR {
        let e = MemoryError::ShmTooSmall { size: gib_or_mib(shm.size), pod, ranks: local, estimate: gib(estimate) };
        return Err(Box::new(e));
    }
    if shm.size < estimate {
        findings.push(Finding::warn(
            "shm-small",
            format!(
                "/dev/shm is {}{pod} for {local} GPU ranks (about {} wanted): a large batch may die with `Bus \
                 error`; give /dev/shm a memory-backed volume of that size or more",
                gib_or_mib(shm.size),
                gib(estimate)
            ),
        ));
    }
    Ok(())
}

pub(crate) fn gib_or_mib(b: u64) -> String {
    if b < 1 << 30 {
        format!("{} MiB", b >> 20)
    } else {
        gib(b)
    }
}

/// The checkpoint per GPU against a GPU's memory and the engine's share of it. `vram`: the
/// smallest GPU's memory, and the node it is of.
fn weights(
    run: &Run,
    (tp, pp): (u64, u64),
    vram: Option<(u64, String)>,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), Refusal> {
    let Some(m) = run.applied.model else { return Ok(()) };
    // (No GPU memory to hold them to: said below, whatever is known of the weights.)
    let Some(w) = &m.weights else {
        if vram.is_some() {
            findings.push(Finding::warn("weights-unknown", unknown_weights(m)));
            return Ok(());
        }
        let msg = format!(
            "the weights of {} are not held to the GPUs' memory: the KFD topology gives no GPU memory (none \
             allocated, or an APU sharing system memory)",
            m.reference
        );
        findings.push(Finding::info("weights-unchecked", msg));
        return Ok(());
    };
    let (vram, gpu) = match (vram, not_a_bound(run.parsed, m)) {
        (Some(v), None) => v,
        (v, why) => {
            let why = why.or(v.is_none().then(|| {
                "the KFD topology gives no GPU memory (none allocated, or an APU sharing system memory)".to_string()
            }));
            let msg =
                format!("the weights of {} are not held to the GPUs' memory: {}", m.reference, why.unwrap_or_default());
            findings.push(Finding::info("weights-unchecked", msg));
            return Ok(());
        }
    };
    let per_gpu = w.bytes / tp.saturating_mul(pp);
    let (model, from) = (m.reference.clone(), w.source.clone());
    let share = super::share::share_of(run.engine, run.version, run.parsed, vram, tp.saturating_mul(pp));
    let room = match &share {
        Share::Known { fraction, .. } => (vram as f64 * fraction.clamp(0.0, 1.0)) as u64,
        Share::Unknown(_) => vram,
    };
    let (need, layout) = super::layout::need(w.bytes, room, m.attention_heads);
    if per_gpu > vram {
        let (bytes, per_gpu, vram) = (gib(w.bytes), gib(per_gpu), gib(vram));
        let e = MemoryError::WeightsExceedVram { model, bytes, from, tp, pp, per_gpu, vram, gpu, need, layout };
        return infera_facts::finding::unless_allowed(allow, "weights-exceed-vram", e, findings);
    }
    let load = PerGpu { model, from, per_gpu, tp, pp, vram, gpu, need, layout };
    kv_room(run.engine, load, share, allow, findings)
}

/// A GPU's share of the weights on the node, and the hint's layout: what the KV cache's room
/// is judged with.
struct PerGpu {
    model: String,
    from: String,
    per_gpu: u64,
    tp: u64,
    pp: u64,
    vram: u64,
    gpu: String,
    need: u64,
    layout: String,
}

/// The room the weights leave the KV cache in the engine's share of a GPU: none is refused, a
/// little said; an unknown share said unjudged.
fn kv_room(
    engine: Engine,
    l: PerGpu,
    share: Share,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), Refusal> {
    let (option, fraction, said, raise) = match share {
        Share::Known { option, fraction, said, raise } => (option, fraction, said, raise),
        Share::Unknown(why) => {
            let msg = format!(
                "the room {}'s weights ({} per GPU) leave the KV cache is not judged: {why}",
                l.model,
                gib(l.per_gpu)
            );
            findings.push(Finding::warn("kv-room-unjudged", msg));
            return Ok(());
        }
    };
    let budget = (l.vram as f64 * fraction) as u64;
    let share = l.per_gpu as f64 / budget.max(1) as f64;
    if l.per_gpu >= budget {
        let e = MemoryError::NoKvRoom {
            per_gpu: gib(l.per_gpu),
            tp: l.tp,
            pp: l.pp,
            share: format!("{:.0}%", share * 100.0),
            budget: gib(budget),
            option,
            fraction: said,
            vram: gib(l.vram),
            symptom: match engine {
                Engine::Vllm => "vLLM fails with `No available memory for the cache blocks`",
                Engine::Sglang => "sglang fails with `Not enough memory. Please try to increase --mem-fraction-static`",
            },
            raise,
            model: l.model,
            from: l.from,
            gpu: l.gpu,
            need: l.need,
            layout: l.layout,
        };
        return infera_facts::finding::unless_allowed(allow, "kv-cache-no-room", e, findings);
    }
    if share > 0.9 {
        let msg = format!(
            "the weights of {} take {} per GPU, {:.0}% of the {} {option} {said} gives the engine: the KV cache gets \
             the rest, which holds few sequences",
            l.model,
            gib(l.per_gpu),
            share * 100.0,
            gib(budget),
        );
        findings.push(Finding::warn("kv-cache-small", msg));
    }
    Ok(())
}

/// Why the weights are not known: what was looked for, where, and what is enough.
fn unknown_weights(m: &infera_facts::model::Model) -> String {
    let dir = m.config.parent().unwrap_or(std::path::Path::new("/"));
    format!(
        "the weights of {} are not judged against the node's GPUs: `{}` has config.json but no \
         model.safetensors.index.json and no *.safetensors files to size the checkpoint by; the index alone (its \
         metadata.total_size, ~100 KB) is enough: give it with the config (--volume)",
        m.reference,
        dir.display()
    )
}

/// Why the checkpoint's size is no bound on what loads: quantized or cast as it loads.
fn not_a_bound(parsed: &Parsed, m: &infera_facts::model::Model) -> Option<String> {
    if let (Some(q), None) = (parsed.value(Opt::Quantization), &m.quantization) {
        return Some(format!("--quantization {q} quantizes them as they load"));
    }
    let stored = m.dtype.as_deref()?;
    let d = parsed.value(Opt::Dtype).filter(|d| *d != "auto" && *d != stored)?;
    Some(format!("--dtype {d} casts them from {stored} as they load"))
}
