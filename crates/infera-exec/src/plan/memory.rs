//! The memory this node must give the engine, held against what it has, before anything
//! loads: the checkpoint against the GPUs' memory (a load that cannot finish fails with a HIP
//! out-of-memory error; one that leaves no room for the KV cache fails only after the whole
//! load), and /dev/shm against the ranks that share it (vLLM's shared-memory message queues
//! and RCCL's shared-memory transport: a late `Bus error`). Facts only; `--root` other than
//! `/` (no node facts) says nothing.

use thiserror::Error;

use super::args::Applied;
use crate::error::Refusal;
use infera_exec_derive::Refuse;
use infera_facts::dialect::Parsed;
use infera_facts::engines::{Engine, Opt};
use infera_facts::finding::Finding;
use infera_facts::Facts;

/// Below this, a group of more than one rank on the node is refused: Docker's and
/// Kubernetes' 64 MiB default is the case it catches.
pub const SHM_FLOOR: u64 = 256 << 20;
/// What each local rank is given room for: vLLM's message queues and RCCL's buffers come to
/// about 1 GiB at TP 8 with vLLM's defaults.
pub const SHM_PER_RANK: u64 = 128 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum MemoryError {
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
         {option} {fraction} gives the engine of a GPU's {vram}: no room is left for the KV cache, and {symptom} \
         after the whole load"
    )]
    #[refuse(
        code = "kv-cache-no-room",
        exit = Refused,
        hint = "raise {option} (at most 0.95), or spread the weights over more GPUs (--tensor-parallel-size); or set INFERA_ALLOW=kv-cache-no-room to run it anyway"
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
        symptom: &'static str,
    },
    #[error(
        "/dev/shm is {size} but this pod runs {ranks} GPU ranks that share memory through it (vLLM's message \
         queues, RCCL's transport; about {estimate} at this size): they would die with `Bus error` or RCCL's \
         `Error while creating shared memory segment` after the load"
    )]
    #[refuse(
        code = "shm-too-small",
        exit = Unsupported,
        hint = "mount a memory-backed volume at /dev/shm: `volumes: [{{name: dshm, emptyDir: {{medium: Memory, sizeLimit: 16Gi}}}}]` with a volumeMount at /dev/shm (docker/podman: --shm-size=16g, or --ipc=host)"
    )]
    ShmTooSmall { size: String, ranks: u64, estimate: String },
}

pub fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

pub fn check(
    facts: &Facts,
    on: Option<&infera_facts::node::NodeFacts>,
    engine: Engine,
    parsed: &Parsed,
    applied: &Applied,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), Refusal> {
    let Some(h) = on else { return Ok(()) };
    let gpus = super::gpu::allocated(h, facts);
    let (tp, pp) = (applied.tp.unwrap_or(1).max(1), applied.pp.unwrap_or(1).max(1));
    let local = if gpus.is_empty() { tp * pp } else { (tp * pp).min(gpus.len() as u64) };
    if let Err(e) = shm(h, local, findings) {
        return Err((*e).into());
    }
    let vram = gpus.iter().filter_map(|g| g.vram).min();
    weights(engine, parsed, applied, (tp, pp), vram, allow, findings)
}

/// /dev/shm for `local` GPU ranks: refused under the floor, a warning under the estimate.
fn shm(node: &infera_facts::node::NodeFacts, local: u64, findings: &mut Vec<Finding>) -> Result<(), Box<MemoryError>> {
    let (Some(shm), true) = (node.shm, local > 1) else { return Ok(()) };
    let estimate = SHM_PER_RANK * local;
    if shm.size < SHM_FLOOR {
        let e = MemoryError::ShmTooSmall { size: gib_or_mib(shm.size), ranks: local, estimate: gib(estimate) };
        return Err(Box::new(e));
    }
    if shm.size < estimate {
        findings.push(Finding::warn(
            "shm-small",
            format!(
                "/dev/shm is {} for {local} GPU ranks (about {} wanted): a large batch may die with `Bus error`; \
                 give /dev/shm a memory-backed volume of that size or more",
                gib_or_mib(shm.size),
                gib(estimate)
            ),
        ));
    }
    Ok(())
}

/// /dev/shm judged for a rank on each of `ranks` GPUs, as a finding (`infera-exec node`).
pub fn shm_for(node: &infera_facts::node::NodeFacts, ranks: u64, findings: &mut Vec<Finding>) {
    if let Err(e) = shm(node, ranks, findings) {
        findings.push(Finding::warn("shm-too-small", e.to_string()));
    }
}

pub fn gib_or_mib(b: u64) -> String {
    if b < 1 << 30 {
        format!("{} MiB", b >> 20)
    } else {
        gib(b)
    }
}

/// The checkpoint per GPU against a GPU's memory and the engine's share of it.
fn weights(
    engine: Engine,
    parsed: &Parsed,
    applied: &Applied,
    (tp, pp): (u64, u64),
    vram: Option<u64>,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), Refusal> {
    let Some(m) = applied.model else { return Ok(()) };
    let Some(w) = &m.weights else { return Ok(()) };
    let vram = match (vram, not_a_bound(parsed, m)) {
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
    let per_gpu = w.bytes / (tp * pp);
    let (model, from) = (m.reference.clone(), w.source.clone());
    if per_gpu > vram {
        let (bytes, per_gpu, (need, layout)) =
            (gib(w.bytes), gib(per_gpu), super::layout::need(w.bytes, vram, m.attention_heads));
        let gpu = "KFD topology".to_string();
        let vram = gib(vram);
        let e = MemoryError::WeightsExceedVram { model, bytes, from, tp, pp, per_gpu, vram, gpu, need, layout };
        return infera_facts::finding::unless_allowed(allow, "weights-exceed-vram", e, findings);
    }
    let Some((option, fraction)) = share_option(engine, parsed) else { return Ok(()) };
    let budget = (vram as f64 * fraction) as u64;
    let share = per_gpu as f64 / budget.max(1) as f64;
    if per_gpu >= budget {
        let e = MemoryError::NoKvRoom {
            model,
            per_gpu: gib(per_gpu),
            tp,
            pp,
            from,
            share: format!("{:.0}%", share * 100.0),
            budget: gib(budget),
            option,
            fraction: format!("{fraction}"),
            vram: gib(vram),
            symptom: match engine {
                Engine::Vllm => "vLLM fails with `No available memory for the cache blocks`",
                Engine::Sglang => "sglang fails with `Not enough memory. Please try to increase --mem-fraction-static`",
            },
        };
        return infera_facts::finding::unless_allowed(allow, "kv-cache-no-room", e, findings);
    }
    if share > 0.9 {
        let msg = format!(
            "the weights of {model} take {} per GPU, {:.0}% of the {} {option} {fraction} gives the engine: the KV \
             cache gets the rest, which holds few sequences",
            gib(per_gpu),
            share * 100.0,
            gib(budget)
        );
        findings.push(Finding::warn("kv-cache-small", msg));
    }
    Ok(())
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

/// The engine's share of a GPU's memory and the option that sets it: vLLM's default 0.9;
/// None for sglang without `--mem-fraction-static` (it sizes its share from the GPU).
fn share_option(engine: Engine, parsed: &Parsed) -> Option<(&'static str, f64)> {
    match (engine, parsed.value(Opt::MemFraction).map(str::parse::<f64>)) {
        (Engine::Vllm, Some(Ok(f))) => Some(("--gpu-memory-utilization", f)),
        (Engine::Vllm, None) => Some(("--gpu-memory-utilization", 0.9)),
        (Engine::Sglang, Some(Ok(f))) => Some(("--mem-fraction-static", f)),
        _ => None,
    }
}
