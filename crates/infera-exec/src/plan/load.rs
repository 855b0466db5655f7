//! The weight load the storage needs: the engine's own load strategy chosen from the
//! filesystem under the model, the checkpoint's size and the pod's memory, where the engine
//! would not choose it itself (or would choose it from the node's memory instead of the
//! pod's). A user's own choice always wins; every decision is a finding with its numbers.
//!
//! The engines' facts (their sdists and wheels): vLLM `--safetensors-load-strategy prefetch`
//! from 0.18.0 (#36012); it prefetches by itself on `nfs`/`nfs4` from 0.19.0 (#37673) and
//! `lustre` from 0.20.0 (#39422) when the checkpoint is at most 90 % of the available memory,
//! which before 0.26.0 is the host's `MemAvailable`, not the pod's limit; other shared
//! filesystems (ceph, virtiofs, FUSE, SMB, 9p, GPFS, BeeGFS, Weka) never. sglang
//! `--weight-loader-prefetch-checkpoints` from 0.5.11, no filesystem detection.

use std::ffi::OsString;

use crate::dialect::Parsed;
use crate::engines::{Engine, Opt};
use crate::facts::model::Model;
use crate::facts::storage::PodMemory;
use crate::finding::Finding;
use crate::plan::memory::gib;
use crate::version::{parse, Version};

/// How a filesystem is read by the engines' loaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A local block device or memory: read-ahead does the work.
    Local,
    /// Shared, and vLLM prefetches by itself on it from this version.
    Detected { since: &'static str },
    /// Shared, and no engine detects it.
    Shared,
}

pub fn class(fstype: &str) -> Class {
    match fstype {
        "nfs" | "nfs4" => Class::Detected { since: "0.19" },
        "lustre" => Class::Detected { since: "0.20" },
        "ceph" | "virtiofs" | "cifs" | "smb3" | "9p" | "gpfs" | "beegfs" | "wekafs" | "fuse" => Class::Shared,
        f if f.starts_with("fuse.") => Class::Shared,
        _ => Class::Local,
    }
}

/// A checkpoint this share of the pod's budget or less can be read ahead without evicting
/// itself (vLLM's own bound).
const FITS: f64 = 0.9;

fn at_least(v: &Version, s: &str) -> bool {
    parse(s).is_some_and(|b| *v >= b)
}

/// The flags to add for the load, with the findings that say why (or why nothing).
pub fn strategy(
    engine: Engine,
    version: Option<&str>,
    parsed: &Parsed,
    model: Option<&Model>,
    memory: Option<&PodMemory>,
    findings: &mut Vec<Finding>,
) -> Vec<OsString> {
    let (Some(m), Some(mem)) = (model, memory) else { return Vec::new() };
    let (Some(w), Some(fs)) = (&m.weights, &m.filesystem) else { return Vec::new() };
    let class = class(&fs.fstype);
    if class == Class::Local {
        return Vec::new();
    }
    let opt = match engine {
        Engine::Vllm => Opt::SafetensorsLoadStrategy,
        Engine::Sglang => Opt::PrefetchCheckpoints,
    };
    let flag = engine.flag(opt);
    let facts = format!(
        "model {} on {} ({}); pod budget {}",
        gib(w.bytes),
        fs.fstype,
        fs.mount_point.display(),
        budget_text(mem)
    );
    let say = |what: String, findings: &mut Vec<Finding>| {
        findings.push(Finding::info("load-strategy", format!("{facts}; {what}")))
    };
    if parsed.get(opt).is_some() {
        say(format!("{flag} is the pod's own: kept"), findings);
        return Vec::new();
    }
    let Some(v) = version.and_then(parse) else {
        say(format!("the {} version is unknown: nothing added", engine.name()), findings);
        return Vec::new();
    };
    let fits = |budget: Option<u64>| budget.is_some_and(|b| w.bytes as f64 <= FITS * b as f64);
    let (value, why) = match (engine, class) {
        (Engine::Vllm, _) if !at_least(&v, "0.18") => (None, "vLLM before 0.18 has no prefetch".to_string()),
        (Engine::Vllm, Class::Detected { since }) if at_least(&v, since) => {
            if at_least(&v, "0.26") || fits(mem.budget()) || !fits(mem.host_available) {
                (
                    None,
                    format!(
                        "vLLM {v} decides the read-ahead on {} itself, and its decision holds for this pod",
                        fs.fstype
                    ),
                )
            } else {
                let why = format!(
                    "vLLM {v} would read ahead on {} judging the node's available memory ({}), not the pod's: the \
                     cache would evict itself",
                    fs.fstype,
                    mem.host_available.map(gib).unwrap_or_default()
                );
                (Some("lazy"), why)
            }
        }
        (_, _) if !fits(mem.budget()) => {
            (None, "larger than 90 % of the pod's budget: a read-ahead would evict itself; nothing added".into())
        }
        (Engine::Vllm, _) => (Some("prefetch"), format!("vLLM {v} does not read ahead on {} by itself", fs.fstype)),
        (Engine::Sglang, _) if !at_least(&v, "0.5.11") => (None, "sglang before 0.5.11 has no prefetch".to_string()),
        (Engine::Sglang, _) => (Some("on"), format!("sglang {v} does not read ahead by itself")),
    };
    let added = value.and_then(|val| crate::dialect::render(engine, opt, val)).unwrap_or_default();
    let shown = added.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    say(if added.is_empty() { why } else { format!("{why} → added {shown}") }, findings);
    added
}

fn budget_text(m: &PodMemory) -> String {
    match (m.budget(), m.limit) {
        (Some(b), Some(l)) => {
            format!("{} (limit {} − {} used, {})", gib(b), gib(l), gib(m.usage.unwrap_or(0)), m.source)
        }
        (Some(b), None) => format!("{} (no limit: the node's MemAvailable)", gib(b)),
        (None, _) => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::model::Weights;
    use crate::facts::storage::Filesystem;

    const GIB: u64 = 1 << 30;

    fn model(bytes: u64, fstype: &str) -> Model {
        let mut m = match crate::facts::model::from_config("/models/m", "/models/m/config.json".as_ref(), b"{}") {
            crate::facts::model::ModelFacts::Known(m) => m,
            other => panic!("{other:?}"),
        };
        m.weights = Some(Weights { bytes, source: "index".into() });
        m.filesystem = Some(Filesystem { fstype: fstype.into(), mount_point: "/models".into() });
        *m
    }

    /// A pod limited to `limit` GiB (1 GiB used) on a node with `host` GiB available.
    fn pod(limit: Option<u64>, host: u64) -> PodMemory {
        PodMemory {
            limit: limit.map(|l| l * GIB),
            usage: Some(GIB),
            host_available: Some(host * GIB),
            source: "memory.max".into(),
        }
    }

    fn decide(e: Engine, version: &str, size_gib: u64, fs: &str, mem: &PodMemory, args: &[&str]) -> String {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let parsed = crate::dialect::read(e, &args);
        let mut f = Vec::new();
        let added = strategy(e, Some(version), &parsed, Some(&model(size_gib * GIB, fs)), Some(mem), &mut f);
        added.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    /// Engine versions × filesystems × sizes against the pod's memory.
    #[test]
    fn the_rule_table() {
        let (big_pod, small_pod) = (pod(Some(1024), 2048), pod(Some(64), 2048));
        let v = Engine::Vllm;
        let cases = [
            // local filesystems: never
            (v, "0.25.1", 100, "ext4", &big_pod, ""),
            (v, "0.25.1", 100, "xfs", &big_pod, ""),
            (v, "0.25.1", 100, "overlay", &big_pod, ""),
            // no prefetch before 0.18
            (v, "0.17.1", 100, "fuse.juicefs", &big_pod, ""),
            // shared, undetected, fits: prefetch
            (v, "0.18.0", 100, "fuse.juicefs", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.25.1", 100, "virtiofs", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.28.0", 100, "ceph", &big_pod, "--safetensors-load-strategy prefetch"),
            // NFS before vLLM detects it (0.19): prefetch; from 0.19 its own
            (v, "0.18.0", 100, "nfs4", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.19.0", 100, "nfs4", &big_pod, ""),
            (v, "0.19.1", 100, "lustre", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.20.0", 100, "lustre", &big_pod, ""),
            // larger than the pod: nothing where undetected, lazy where vLLM judges the host (< 0.26)
            (v, "0.25.1", 100, "virtiofs", &small_pod, ""),
            (v, "0.25.1", 100, "nfs4", &small_pod, "--safetensors-load-strategy lazy"),
            (v, "0.26.0", 100, "nfs4", &small_pod, ""),
            // larger than the host too: vLLM's own guard holds
            (v, "0.25.1", 3000, "nfs4", &small_pod, ""),
            // no limit: the node's available memory is the budget
            (v, "0.25.1", 100, "fuse.gcsfuse", &pod(None, 2048), "--safetensors-load-strategy prefetch"),
            // the pod's own choice wins
            (v, "0.25.1", 100, "fuse.juicefs", &big_pod, ""),
            // sglang: from 0.5.11, any shared filesystem that fits
            (Engine::Sglang, "0.5.10", 100, "nfs4", &big_pod, ""),
            (Engine::Sglang, "0.5.11", 100, "nfs4", &big_pod, "--weight-loader-prefetch-checkpoints"),
            (Engine::Sglang, "0.5.23", 100, "fuse.juicefs", &small_pod, ""),
            (Engine::Sglang, "0.5.23", 100, "ext4", &big_pod, ""),
        ];
        for (i, (e, ver, size, fs, mem, want)) in cases.into_iter().enumerate() {
            let args: &[&str] = if i == 16 { &["--safetensors-load-strategy", "lazy"] } else { &[] };
            assert_eq!(decide(e, ver, size, fs, mem, args), want, "case {i}: {} {ver} {size} GiB on {fs}", e.name());
        }
    }

    #[test]
    fn each_decision_says_its_numbers() {
        let parsed = crate::dialect::read(Engine::Vllm, &[]);
        let mut f = Vec::new();
        let m = model(412 * GIB, "fuse.juicefs");
        strategy(Engine::Vllm, Some("0.25.1"), &parsed, Some(&m), Some(&pod(Some(1536), 2048)), &mut f);
        assert_eq!(
            f[0].message,
            "model 412.0 GiB on fuse.juicefs (/models); pod budget 1535.0 GiB (limit 1536.0 GiB − 1.0 GiB used, \
             memory.max); vLLM 0.25.1 does not read ahead on fuse.juicefs by itself → added \
             --safetensors-load-strategy prefetch"
        );
    }
}
