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

use crate::choices::Prefetch;
use crate::plan::memory::gib;
use crate::spec::PrefetchSpec;
use infera_core::version::{parse, Version};
use infera_facts::dialect::{Parsed, Setting};
use infera_facts::engines::{Engine, Opt};
use infera_facts::finding::Finding;
use infera_facts::model::{Model, Weights};
use infera_facts::storage::{Filesystem, PodMemory};

/// How the storage under the model is read by the engines' loaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A local disk (or memory): the kernel's own read-ahead keeps up with the loader.
    Local,
    /// A shared filesystem vLLM prefetches on by itself from this version.
    Detected { since: &'static str },
    /// A shared filesystem no engine detects.
    Shared,
    /// A block filesystem (ext4, xfs) on a device reached over a network, or whose cold read
    /// is slow: no engine sees it as shared (they look at the filesystem's type).
    SlowBlock,
}

/// A cold read of the checkpoint whose median takes longer than this is storage a loader
/// waits on: a disk of the machine answers a 4 KiB read in about 100 µs, storage over a
/// network in 0.5 to 2 ms. A fast device misjudged costs little: the read-ahead backs off by
/// itself where its reads are not ahead of the loader (`crate::prefetch`).
pub(crate) const SLOW_MICROS: u64 = 400;
/// Reads in flight this many times as fast as the loader's one at a time is storage a loader
/// waits on, whatever its latency or its pace in order: a virtual disk backed by a host's
/// file or a network volume answers one request in 100–300 µs, but many at once far faster
/// than one after another, and a loader reads in order. A quarter: this machine's virtio disk
/// measures 1.4–2.6x from run to run, and 1.3–1.6 GB/s in order, where the loader alone takes
/// 3.0–7.5 s of load for 4 GiB and `--prefetch on` 2.9–3.9 s (BENCHMARKS.md); a disk
/// misjudged costs nothing measurable (on the root's device the read-ahead starts with the
/// loader, so the engine's imports do not queue behind it).
pub(crate) const IN_FLIGHT_GAIN: f64 = 1.25;
/// A cold read answered faster than this came from memory, not from a device (pages another
/// process keeps mapped are not dropped; a sparse file's holes are zeros): the probe says
/// nothing about the storage, and the loader will find the same pages.
pub(crate) const MEMORY_MICROS: u64 = 30;
/// A read cap on the pod's cgroup below these is storage a loader waits on (a local NVMe
/// drive reads several GB/s and hundreds of thousands of requests a second).
pub(crate) const SLOW_BPS: u64 = 1_000_000_000;
pub(crate) const SLOW_IOPS: u64 = 20_000;

/// The storage's class and what says so.
pub(crate) fn class(fs: &Filesystem) -> (Class, String) {
    use infera_facts::blockdev::Medium;
    let said = |what: String| format!("{} ({}): {what}", fs.fstype, fs.mount_point.display());
    match fs.fstype.as_str() {
        "nfs" | "nfs4" => return (Class::Detected { since: "0.19" }, said("a network filesystem".into())),
        "lustre" => return (Class::Detected { since: "0.20" }, said("a network filesystem".into())),
        f if infera_facts::mounts::network_fs(f) => return (Class::Shared, said("a shared filesystem".into())),
        _ => {}
    }
    let Some(d) = &fs.device else { return (Class::Local, said("no block device under it".into())) };
    let device = format!("device {}, {}", d.name, d.evidence);
    if let Some(cap) = &fs.io_cap {
        let capped = cap.bps.is_some_and(|b| b < SLOW_BPS) || cap.iops.is_some_and(|i| i < SLOW_IOPS);
        let what = [cap.bps.map(|b| format!("{} MB/s", b / 1_000_000)), cap.iops.map(|i| format!("{i} reads/s"))];
        let what: Vec<String> = what.into_iter().flatten().collect();
        let caps = format!("{device}; this pod's cgroup caps its reads at {} ({})", what.join(" and "), cap.source);
        if capped {
            return (Class::SlowBlock, said(format!("{caps}: storage a loader waits on")));
        }
        if d.medium == Medium::Unknown {
            // The facts do not time a device the cgroup caps: the cap says enough.
            return (Class::Local, said(format!("{caps}: more than a loader waits on")));
        }
    }
    match (d.medium, &fs.probe) {
        (Medium::Network, _) => (Class::SlowBlock, said(format!("{device}: reached over a network"))),
        (Medium::Local, _) => (Class::Local, said(format!("{device}: a disk of this machine"))),
        (Medium::Unknown, Some(p)) => {
            let measured = format!(
                "{device}; {} cold 4 KiB reads of its first file took {} µs (median), and it read at {} MB/s \
                 front to back, at {} MB/s with {} reads at once",
                p.reads, p.median_micros, p.loader_mbps, p.in_flight_mbps, p.in_flight
            );
            if p.median_micros > SLOW_MICROS {
                (
                    Class::SlowBlock,
                    said(format!("{measured}: over {SLOW_MICROS} µs a read, storage reached over a network")),
                )
            } else if p.median_micros < MEMORY_MICROS {
                let why = format!("under {MEMORY_MICROS} µs a read, answered from memory (cached, or a file's holes)");
                (Class::Local, said(format!("{measured}: {why}")))
            } else if p.in_flight_mbps as f64 >= IN_FLIGHT_GAIN * p.loader_mbps as f64 {
                let why = format!(
                    "reads at once {IN_FLIGHT_GAIN}x as fast or more: storage that serves requests in parallel"
                );
                (Class::SlowBlock, said(format!("{measured}: {why}, faster than a loader reads it")))
            } else {
                (Class::Local, said(format!("{measured}: a disk of this machine")))
            }
        }
        (Medium::Unknown, None) => (Class::Local, said(format!("{device}; not measured"))),
    }
}

/// A device whose facts do not say what it is, and whose timed read did not happen.
fn unmeasured(fs: &Filesystem) -> bool {
    use infera_facts::blockdev::Medium;
    fs.device.as_ref().is_some_and(|d| d.medium == Medium::Unknown) && fs.probe.is_none() && fs.io_cap.is_none()
}

/// A checkpoint this share of the pod's budget or less can be read ahead without evicting
/// itself (vLLM's own bound).
const FITS: f64 = 0.9;

fn at_least(v: &Version, s: &str) -> bool {
    parse(s).is_some_and(|b| *v >= b)
}

/// What the plan does for the weight load: the engine's flags to add, and the launcher's
/// own read-ahead.
#[derive(Debug, Default)]
pub(crate) struct Load {
    pub added: Vec<OsString>,
    pub prefetch: Option<PrefetchSpec>,
}

/// The engine's load flags and the launcher's read-ahead, with the findings that say why
/// (or why nothing).
pub(crate) fn plan(
    engine: Engine,
    version: Option<&str>,
    parsed: &Parsed,
    model: Option<&Model>,
    memory: Option<&PodMemory>,
    choice: Prefetch,
    findings: &mut Vec<Finding>,
) -> Load {
    let Some(w) = model.and_then(|m| m.weights.as_ref()) else { return Load::default() };
    let fs = model.and_then(|m| m.filesystem.as_ref());
    let (class, storage) = fs.map_or((None, None), |f| {
        let (c, s) = class(f);
        (Some(c), Some(s))
    });
    let decided = match (fs, memory, class) {
        (Some(fs), Some(mem), Some(Class::Detected { .. } | Class::Shared)) => {
            Some(engine_strategy(engine, version, parsed, w, fs, mem, choice == Prefetch::On, findings))
        }
        _ => None,
    };
    // Where the engine has no read-ahead to choose, the decision is said all the same.
    if let (Some(storage), None) = (&storage, &decided) {
        findings.push(Finding::info(
            "load-strategy",
            format!("model {} on {storage}; {}", gib(w.bytes), undecided(choice, class, fs)),
        ));
    }
    let own = parsed.is_set(engine_opt(engine));
    let run = match choice {
        Prefetch::Off => false,
        Prefetch::On => true,
        Prefetch::Auto => {
            !own && (class == Some(Class::SlowBlock) || decided.as_ref().is_some_and(|d| !d.engine_reads_ahead))
        }
    };
    // Storage that keeps up by itself (or unknown), or the device the engine's own files are
    // read from: reads before the loader's would only slow the engine's start (its imports).
    let with_loader = matches!(class, None | Some(Class::Local)) || fs.is_some_and(|f| f.shares_root);
    let prefetch = run.then(|| read_ahead(w, fs, memory, with_loader)).flatten();
    if let Some(why) = w.skipped.as_ref().filter(|_| run) {
        findings.push(Finding::warn("prefetch-files", format!("the read-ahead of the weights: {why}")));
    }
    match (&prefetch, choice) {
        (Some(p), _) => findings.push(Finding::info("prefetch", prefetch_text(p))),
        (None, Prefetch::On) => {
            findings.push(Finding::info("prefetch", "--prefetch on: the model has no *.safetensors file to read ahead"))
        }
        (None, _) => {}
    }
    Load { added: decided.map(|d| d.added).unwrap_or_default(), prefetch }
}

/// The engine's own strategy on a shared filesystem: the flags to add, and whether the
/// engine will then read ahead by itself.
struct Decided {
    added: Vec<OsString>,
    engine_reads_ahead: bool,
}

/// What is said of the load where the engine has no read-ahead of its own to choose.
fn undecided(choice: Prefetch, class: Option<Class>, fs: Option<&Filesystem>) -> &'static str {
    match (choice, class) {
        (Prefetch::Off, _) => "--prefetch off: the loader reads alone",
        (Prefetch::On, _) => "--prefetch on: the launcher reads ahead of the engine's loader, whatever the storage",
        (_, Some(Class::SlowBlock)) => {
            "the launcher reads ahead of the engine's loader (no engine sees a block device as shared)"
        }
        _ if fs.is_some_and(unmeasured) => {
            "its first weights file is under 64 MiB or could not be read, so it was not timed: taken as a disk \
             of this machine, nothing added"
        }
        _ => "the kernel's own read-ahead keeps up with the loader: nothing added",
    }
}

/// The read-ahead the launcher runs, said.
fn prefetch_text(p: &PrefetchSpec) -> String {
    format!(
        "the launcher reads the {} file{} ({}) ahead of the engine's loader: at most {} ahead, up to {} \
         read{} at once as the storage keeps up, backing off where it is not ahead of the loader{}",
        p.files.len(),
        if p.files.len() == 1 { "" } else { "s" },
        gib(p.bytes),
        gib(p.lead_bytes),
        p.ranges,
        if p.ranges == 1 { "" } else { "s" },
        if p.after_open { ", each file once the engine has opened it (FUSE drops the cache on open)" } else { "" },
    ) + if p.with_loader {
        "; from the loader's first open of a weight file (before, the engine reads its own files, from the \
         same device or from storage that keeps up by itself)"
    } else {
        ""
    }
}

fn engine_opt(engine: Engine) -> Opt {
    match engine {
        Engine::Vllm => Opt::SafetensorsLoadStrategy,
        Engine::Sglang => Opt::PrefetchCheckpoints,
    }
}

#[allow(clippy::too_many_arguments)]
fn engine_strategy(
    engine: Engine,
    version: Option<&str>,
    parsed: &Parsed,
    w: &Weights,
    fs: &Filesystem,
    mem: &PodMemory,
    ours_instead: bool,
    findings: &mut Vec<Finding>,
) -> Decided {
    let opt = engine_opt(engine);
    let flag = engine.flag(opt);
    let facts = format!(
        "model {} on {} ({}); pod budget {}",
        gib(w.bytes),
        fs.fstype,
        fs.mount_point.display(),
        budget_text(mem)
    );
    let mut say = |what: String| findings.push(Finding::info("load-strategy", format!("{facts}; {what}")));
    let nothing = |reads| Decided { added: Vec::new(), engine_reads_ahead: reads };
    if let Some(v) = parsed.get(opt) {
        say(format!("{flag} is the pod's own: kept"));
        return nothing(matches!(v, Setting::On) || v.as_str() == Some("prefetch"));
    }
    if ours_instead {
        say("--prefetch on: the launcher reads ahead instead of the engine".to_string());
        return nothing(false);
    }
    let Some(v) = version.and_then(parse) else {
        say(format!("the {} version is unknown: nothing added", engine.name()));
        return nothing(false);
    };
    let (value, reads, why) = choose(engine, &v, w.bytes, fs, mem);
    let added = value.and_then(|val| infera_facts::dialect::render(engine, opt, val)).unwrap_or_default();
    let shown = added.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    say(if added.is_empty() { why } else { format!("{why} → added {shown}") });
    Decided { added, engine_reads_ahead: reads }
}

/// The engine's option value for a checkpoint of `bytes` on `fs` (None: nothing added),
/// whether the engine will then read ahead by itself, and why.
fn choose(
    engine: Engine,
    v: &Version,
    bytes: u64,
    fs: &Filesystem,
    mem: &PodMemory,
) -> (Option<&'static str>, bool, String) {
    let fits = |budget: Option<u64>| budget.is_some_and(|b| bytes as f64 <= FITS * b as f64);
    match (engine, class(fs).0) {
        (Engine::Vllm, _) if !at_least(v, "0.18") => (None, false, "vLLM before 0.18 has no prefetch".to_string()),
        (Engine::Vllm, Class::Detected { since }) if at_least(v, since) => {
            // Before 0.26 vLLM judges the node's MemAvailable, from 0.26 the pod's limit.
            let judged = if at_least(v, "0.26") { mem.budget() } else { mem.host_available };
            if at_least(v, "0.26") || fits(mem.budget()) || !fits(mem.host_available) {
                let what = if fits(judged) { "reads ahead" } else { "does not read ahead" };
                (
                    None,
                    fits(judged),
                    format!(
                        "vLLM {v} decides the read-ahead on {} itself ({what}), and its decision holds for this pod",
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
                (Some("lazy"), false, why)
            }
        }
        (_, _) if is_fuse(&fs.fstype) => (
            None,
            false,
            format!(
                "on {} the engine's read-ahead opens each file apart from its loader, and FUSE drops a file's cache \
                 when it is opened: most of what it reads is lost; nothing added",
                fs.fstype
            ),
        ),
        (_, _) if !fits(mem.budget()) => (
            None,
            false,
            "larger than 90 % of the pod's budget: the engine's read-ahead would evict itself; nothing added".into(),
        ),
        (Engine::Vllm, _) => {
            (Some("prefetch"), true, format!("vLLM {v} does not read ahead on {} by itself", fs.fstype))
        }
        (Engine::Sglang, _) if !at_least(v, "0.5.11") => {
            (None, false, "sglang before 0.5.11 has no prefetch".to_string())
        }
        (Engine::Sglang, _) => (Some("on"), true, format!("sglang {v} does not read ahead by itself")),
    }
}

/// The launcher's read-ahead of `w`: at most half the pod's budget ahead of the loader (the
/// rest is the engine's: what it has read stays cached while it has the file mapped), and at
/// most `MAX_READS` reads at once — how many it uses is what the storage answers (it starts
/// with one and adds readers while they add throughput: `crate::prefetch`).
fn read_ahead(
    w: &Weights,
    fs: Option<&Filesystem>,
    memory: Option<&PodMemory>,
    with_loader: bool,
) -> Option<PrefetchSpec> {
    if w.files.is_empty() {
        return None;
    }
    let budget = memory.and_then(PodMemory::budget).unwrap_or(DEFAULT_BUDGET);
    Some(PrefetchSpec {
        files: w.files.clone(),
        bytes: w.bytes,
        lead_bytes: (budget / 2).clamp(MIN_LEAD, w.bytes.max(MIN_LEAD)),
        ranges: MAX_READS,
        after_open: fs.is_some_and(|f| is_fuse(&f.fstype)),
        with_loader,
    })
}

/// The most reads at once: a network link is full well before (a round trip of a few ms and
/// a few hundred MB/s need a handful in flight).
const MAX_READS: u32 = 16;

fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype.starts_with("fuse.")
}

/// Without a known budget (a dry run under `--root`): what a small pod has.
const DEFAULT_BUDGET: u64 = 4 << 30;
const MIN_LEAD: u64 = 64 << 20;

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

    const GIB: u64 = 1 << 30;

    /// A checkpoint of `bytes` in four files, on `fstype` (`FS@DEVICE`: a block device that is
    /// `network`, `local`, `capped` by the pod's cgroup, or whose probe took that many µs, and
    /// read at those rates one read at a time and 8 at once).
    fn model(bytes: u64, fstype: &str) -> Model {
        let mut m = match infera_facts::model::from_config("/models/m", "/models/m/config.json".as_ref(), b"{}") {
            infera_facts::model::ModelFacts::Known(m) => m,
            other => panic!("{other:?}"),
        };
        let files = (1..=4).map(|i| format!("/models/m/{i}.safetensors").into());
        m.weights = Some(Weights { bytes, source: "index".into(), files: files.collect(), skipped: None });
        // `ext4@network`, `ext4@local`, `ext4@unknown` (not probed), `ext4@capped`/`ext4@fastcap`
        // (the cgroup's read cap), `ext4@300` (a probe's 300 µs), `ext4@250/400/1100`.
        let (fstype, device) = fstype.split_once('@').map_or((fstype, None), |(f, d)| (f, Some(d)));
        let mut fs = Filesystem {
            fstype: fstype.into(),
            mount_point: "/models".into(),
            majmin: "259:1".into(),
            device: None,
            io_cap: None,
            probe: None,
            shares_root: false,
        };
        if let Some(d) = device {
            use infera_facts::blockdev::{BlockDevice, Medium};
            let medium = match d {
                "network" => Medium::Network,
                "local" => Medium::Local,
                "unknown" => Medium::Unknown,
                "capped" | "fastcap" => {
                    let source = "blkio.throttle.read_bps_device".into();
                    let (bps, iops) = if d == "capped" { (300_000_000, 800) } else { (4_000_000_000, 100_000) };
                    fs.io_cap = Some(infera_facts::storage::IoCap { bps: Some(bps), iops: Some(iops), source });
                    Medium::Unknown
                }
                probe => {
                    // MICROS, or MICROS/LOADER/IN_FLIGHT (MB/s): what the probe measured.
                    let n: Vec<u64> = probe.split('/').map(|n| n.parse().unwrap()).collect();
                    let (loader_mbps, in_flight_mbps) = if n.len() == 3 { (n[1], n[2]) } else { (500, 600) };
                    fs.probe = Some(infera_facts::storage::Probe {
                        reads: 8,
                        median_micros: n[0],
                        loader_mbps,
                        in_flight_mbps,
                        in_flight: 8,
                    });
                    Medium::Unknown
                }
            };
            fs.device = Some(BlockDevice { name: "vdb".into(), medium, evidence: format!("({d})") });
        }
        m.filesystem = Some(fs);
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

    fn load(e: Engine, version: &str, m: &Model, mem: &PodMemory, args: &[&str], choice: Prefetch) -> Load {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let parsed = infera_facts::dialect::read(e, &args);
        plan(e, Some(version), &parsed, Some(m), Some(mem), choice, &mut Vec::new())
    }

    /// The engine flags added, and `+ours` when the launcher reads ahead itself.
    fn decide(e: Engine, version: &str, size_gib: u64, fs: &str, mem: &PodMemory, args: &[&str]) -> String {
        let l = load(e, version, &model(size_gib * GIB, fs), mem, args, Prefetch::Auto);
        let mut out: Vec<String> = l.added.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        out.extend(l.prefetch.map(|_| "+ours".to_string()));
        out.join(" ")
    }

    /// The read-ahead starts at the exec where the weights are on storage a loader waits on
    /// and apart from the image's root; from the loader's first open where the engine's own
    /// files (interpreter, imports) are read from the same device, or where the storage keeps
    /// up by itself (`on` on a local disk): reads beside the imports only slow the start.
    #[test]
    fn the_read_ahead_starts_with_the_loader_beside_the_engines_own_files() {
        let big_pod = pod(Some(1024), 2048);
        let cases = [
            ("ext4@network", false, Prefetch::Auto, false),
            ("ext4@network", true, Prefetch::Auto, true),
            ("ext4@260/420/1100", true, Prefetch::Auto, true),
            ("ext4@capped", false, Prefetch::On, false),
            ("ext4@local", false, Prefetch::On, true),
            ("ext4", false, Prefetch::On, true),
            ("fuse.juicefs", false, Prefetch::Auto, false),
        ];
        for (fs, shares_root, choice, with_loader) in cases {
            let mut m = model(100 * GIB, fs);
            m.filesystem.as_mut().unwrap().shares_root = shares_root;
            let mut findings = Vec::new();
            let parsed = infera_facts::dialect::read(Engine::Vllm, &[]);
            let l = plan(Engine::Vllm, Some("0.28.0"), &parsed, Some(&m), Some(&big_pod), choice, &mut findings);
            let p = l.prefetch.unwrap_or_else(|| panic!("{fs} {choice:?}: no read-ahead"));
            assert_eq!(p.with_loader, with_loader, "{fs}, the root's filesystem: {shares_root}, {choice:?}");
            let said = findings.iter().find(|f| f.code == "prefetch").unwrap();
            assert_eq!(said.message.contains("from the loader's first open of a weight file"), with_loader, "{said:?}");
        }
    }

    /// Engine versions × filesystems × sizes against the pod's memory, with `--prefetch auto`.
    #[test]
    fn the_rule_table() {
        let (big_pod, small_pod) = (pod(Some(1024), 2048), pod(Some(64), 2048));
        let v = Engine::Vllm;
        let cases = [
            // local disks: never
            (v, "0.25.1", 100, "ext4", &big_pod, ""),
            (v, "0.25.1", 100, "xfs@local", &big_pod, ""),
            (v, "0.25.1", 100, "overlay", &big_pod, ""),
            // a block device over a network, or one a cold read finds slow: the launcher's
            (v, "0.25.1", 100, "ext4@network", &big_pod, "+ours"),
            (v, "0.28.0", 100, "xfs@network", &small_pod, "+ours"),
            (Engine::Sglang, "0.5.23", 100, "ext4@network", &big_pod, "+ours"),
            (v, "0.28.0", 100, "ext4@1500", &big_pod, "+ours"),
            (v, "0.28.0", 100, "ext4@100", &big_pod, ""),
            (v, "0.28.0", 100, "ext4@260/420/1100", &big_pod, "+ours"),
            (v, "0.28.0", 100, "ext4@40/1400/2200", &big_pod, "+ours"),
            (v, "0.28.0", 100, "ext4@90/3000/3500", &big_pod, ""),
            (v, "0.28.0", 100, "ext4@3/560/2200", &big_pod, ""),
            // no prefetch before 0.18: the launcher's
            (v, "0.17.1", 100, "ceph", &big_pod, "+ours"),
            // shared, undetected, fits: the engine's prefetch
            (v, "0.18.0", 100, "cifs", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.25.1", 100, "virtiofs", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.28.0", 100, "ceph", &big_pod, "--safetensors-load-strategy prefetch"),
            // NFS before vLLM detects it (0.19): prefetch; from 0.19 its own
            (v, "0.18.0", 100, "nfs4", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.19.0", 100, "nfs4", &big_pod, ""),
            (v, "0.19.1", 100, "lustre", &big_pod, "--safetensors-load-strategy prefetch"),
            (v, "0.20.0", 100, "lustre", &big_pod, ""),
            // larger than the pod: the launcher's bounded read-ahead; lazy where vLLM judges the host (< 0.26)
            (v, "0.25.1", 100, "virtiofs", &small_pod, "+ours"),
            (v, "0.25.1", 100, "nfs4", &small_pod, "--safetensors-load-strategy lazy +ours"),
            (v, "0.26.0", 100, "nfs4", &small_pod, "+ours"),
            // larger than the host too: vLLM's own guard holds (it does not read ahead)
            (v, "0.25.1", 3000, "nfs4", &small_pod, "+ours"),
            // no limit: the node's available memory is the budget
            (v, "0.25.1", 100, "9p", &pod(None, 2048), "--safetensors-load-strategy prefetch"),
            // FUSE: the engine's read-ahead is lost on the loader's open; the launcher's
            (v, "0.25.1", 100, "fuse.gcsfuse", &pod(None, 2048), "+ours"),
            // the pod's own choice wins, and nothing is added beside it
            (v, "0.25.1", 100, "fuse.juicefs", &big_pod, ""),
            // sglang: its flag from 0.5.11 where it fits; the launcher's before, or when it does not fit
            (Engine::Sglang, "0.5.10", 100, "nfs4", &big_pod, "+ours"),
            (Engine::Sglang, "0.5.11", 100, "nfs4", &big_pod, "--weight-loader-prefetch-checkpoints"),
            (Engine::Sglang, "0.5.23", 100, "fuse.juicefs", &small_pod, "+ours"),
            (Engine::Sglang, "0.5.23", 100, "fuse.juicefs", &big_pod, "+ours"),
            (Engine::Sglang, "0.5.23", 100, "ext4", &big_pod, ""),
            // the pod's cgroup caps the device's reads: the launcher's
            (v, "0.28.0", 100, "ext4@capped", &small_pod, "+ours"),
        ];
        for (i, (e, ver, size, fs, mem, want)) in cases.into_iter().enumerate() {
            let args: &[&str] = if i == 26 { &["--safetensors-load-strategy", "lazy"] } else { &[] };
            assert_eq!(decide(e, ver, size, fs, mem, args), want, "case {i}: {} {ver} {size} GiB on {fs}", e.name());
        }
    }

    #[test]
    fn each_decision_says_its_numbers() {
        let parsed = infera_facts::dialect::read(Engine::Vllm, &[]);
        let mut f = Vec::new();
        let m = model(412 * GIB, "virtiofs");
        plan(Engine::Vllm, Some("0.25.1"), &parsed, Some(&m), Some(&pod(Some(1536), 2048)), Prefetch::Auto, &mut f);
        assert_eq!(
            f[0].message,
            "model 412.0 GiB on virtiofs (/models); pod budget 1535.0 GiB (limit 1536.0 GiB − 1.0 GiB used, \
             memory.max); vLLM 0.25.1 does not read ahead on virtiofs by itself → added \
             --safetensors-load-strategy prefetch"
        );
        let m = model(412 * GIB, "fuse.juicefs");
        let mut f = Vec::new();
        plan(Engine::Vllm, Some("0.17.1"), &parsed, Some(&m), Some(&pod(Some(64), 2048)), Prefetch::Auto, &mut f);
        assert_eq!(
            f[1].message,
            "the launcher reads the 4 files (412.0 GiB) ahead of the engine's loader: at most 31.5 GiB ahead, up to \
             16 reads at once as the storage keeps up, backing off where it is not ahead of the loader, each file \
             once the engine has opened it (FUSE drops the cache on open)"
        );
        // A local disk and a slow one: each decision said, with what says so.
        for (fs, said) in [
            ("ext4@local", "device vdb, (local): a disk of this machine; the kernel's own read-ahead keeps up"),
            ("ext4@1500", "8 cold 4 KiB reads of its first file took 1500 µs (median), and it read at 500 MB/s front to back, at 600 MB/s with 8 reads at once: over 400 µs a read, storage reached over a network; the launcher reads ahead"),
            ("ext4@260/420/1100", "took 260 µs (median), and it read at 420 MB/s front to back, at 1100 MB/s with 8 reads at once: reads at once 1.25x as fast or more: storage that serves requests in parallel, faster than a loader reads it; the launcher reads ahead"),
            // this machine's virtio disk on a slow turn: still a quarter faster with reads at once
            ("ext4@80/449/618", "with 8 reads at once: reads at once 1.25x as fast or more: storage that serves requests in parallel, faster than a loader reads it; the launcher reads ahead"),
            ("ext4@80/500/600", "at 600 MB/s with 8 reads at once: a disk of this machine; the kernel's own read-ahead keeps up"),
            // this machine's virtio disk on a fast turn: in order faster than the loader, which reads in order
            ("ext4@40/1400/2200", "at 2200 MB/s with 8 reads at once: reads at once 1.25x as fast or more: storage that serves requests in parallel, faster than a loader reads it; the launcher reads ahead"),
            ("ext4@90/3000/3500", "at 3500 MB/s with 8 reads at once: a disk of this machine; the kernel's own read-ahead keeps up"),
            ("ext4@3/560/2200", "took 3 µs (median), and it read at 560 MB/s front to back, at 2200 MB/s with 8 reads at once: under 30 µs a read, answered from memory (cached, or a file's holes); the kernel's own read-ahead keeps up"),
            ("ext4@capped", "this pod's cgroup caps its reads at 300 MB/s and 800 reads/s (blkio.throttle.read_bps_device): storage a loader waits on; the launcher reads ahead"),
            ("ext4", "no block device under it; the kernel's own read-ahead keeps up with the loader: nothing added"),
            ("ext4@fastcap", "caps its reads at 4000 MB/s and 100000 reads/s (blkio.throttle.read_bps_device): more than a loader waits on; the kernel's own read-ahead keeps up with the loader: nothing added"),
            ("ext4@unknown", "not measured; its first weights file is under 64 MiB or could not be read, so it was not timed: taken as a disk of this machine, nothing added"),
        ] {
            let mut f = Vec::new();
            let m = model(412 * GIB, fs);
            plan(Engine::Vllm, Some("0.28.0"), &parsed, Some(&m), Some(&pod(Some(64), 2048)), Prefetch::Auto, &mut f);
            assert!(f[0].code == "load-strategy" && f[0].message.contains(said), "{fs}: {}", f[0].message);
        }
        // `off` and `on` are not measured (only `auto` reads the storage to decide): said as the choice.
        for (choice, said) in [
            (Prefetch::Off, "not measured; --prefetch off: the loader reads alone"),
            (
                Prefetch::On,
                "not measured; --prefetch on: the launcher reads ahead of the engine's loader, whatever the storage",
            ),
        ] {
            let mut f = Vec::new();
            let m = model(412 * GIB, "ext4@unknown");
            plan(Engine::Vllm, Some("0.28.0"), &parsed, Some(&m), Some(&pod(Some(64), 2048)), choice, &mut f);
            assert!(f[0].code == "load-strategy" && f[0].message.ends_with(said), "{choice:?}: {}", f[0].message);
        }
    }

    /// `on` reads ahead anywhere (instead of the engine's own), `off` never; the lead is half
    /// the pod's budget; at most 16 reads at once; FUSE after the open.
    #[test]
    fn on_and_off_and_the_read_ahead_s_shape() {
        let (e, big) = (Engine::Vllm, pod(Some(1024), 2048));
        let on = load(e, "0.25.1", &model(100 * GIB, "virtiofs"), &pod(Some(64), 2048), &[], Prefetch::On);
        assert!(on.added.is_empty(), "the launcher's instead of the engine's: {:?}", on.added);
        let p = on.prefetch.unwrap();
        assert_eq!(
            (p.files.len(), p.bytes, p.lead_bytes, p.ranges, p.after_open),
            (4, 100 * GIB, 63 * GIB / 2, 16, false)
        );
        let local = load(e, "0.25.1", &model(8 * GIB, "ext4"), &big, &[], Prefetch::On).prefetch.unwrap();
        assert_eq!((local.ranges, local.lead_bytes), (16, 8 * GIB), "the lead is at most the checkpoint");
        let fuse = load(e, "0.17.1", &model(8 * GIB, "fuse.juicefs"), &big, &[], Prefetch::Auto);
        assert!(fuse.prefetch.unwrap().after_open);
        let off = load(e, "0.17.1", &model(8 * GIB, "fuse.juicefs"), &big, &[], Prefetch::Off);
        assert!(off.prefetch.is_none());
        let off = load(e, "0.25.1", &model(100 * GIB, "virtiofs"), &big, &[], Prefetch::Off);
        assert_eq!(off.added, ["--safetensors-load-strategy", "prefetch"], "off is the launcher's only");
    }
}
