//! The node's GPUs against the image's GPU code and the node's GPU settings: what fails at
//! the first kernel (`HIP error: invalid device function`), after the whole model load, or
//! hangs, said before anything loads. Reads facts only (`facts::gpu_code`, the KFD
//! topology in `facts::devices`); without them (a `--root` other than `/`) nothing is said.

use std::collections::BTreeSet;

use thiserror::Error;

use infera_core::error::Refusal;
use infera_exec_derive::Refuse;
use infera_facts::devices::{gfx_name, Gpu};
use infera_facts::engines::Engine;
use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;
use infera_facts::gpu_code::GpuLib;
use infera_facts::node::NodeFacts;
use infera_facts::Facts;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum GpuError {
    #[error(
        "{package}'s `{path}` has GPU code for {has}{sampled} but this node's GPUs are {node}: \
         the engine would fail at its first kernel with `HIP error: invalid device function`"
    )]
    #[refuse(
        code = "gpu-code-missing",
        exit = Unsupported,
        hint = "use an image built for the node's GPUs (AMD's rocm/vllm tags name them, e.g. `_gfx950-` for MI355X, `_gfx942-` for MI300X), or schedule the pod on a node whose GPUs it has code for (a nodeSelector on the GPU family label)"
    )]
    Missing { package: &'static str, path: String, has: String, sampled: String, node: String },
    #[error(
        "HSA_OVERRIDE_GFX_VERSION={value} makes HIP treat this node's {node} GPUs as {claims}, though the image has \
         code for {node} ({package}'s `{path}`): its kernels would run built for another GPU (wrong code: a hang or \
         wrong results)"
    )]
    #[refuse(
        code = "gfx-override",
        exit = Refused,
        hint = "unset HSA_OVERRIDE_GFX_VERSION (it exists for GPUs an image has no code for); or set INFERA_ALLOW=gfx-override to run it anyway"
    )]
    Override { value: String, claims: String, node: String, package: &'static str, path: String },
    #[error(
        "{node} lists no GPU (its KFD topology, /sys/class/kfd/kfd/topology/nodes, has none{driver}): no GPU engine \
         can run on it"
    )]
    #[refuse(
        code = "node-no-gpus",
        exit = Unsupported,
        hint = "on the node: check that the amdgpu driver loaded (`dmesg | grep amdgpu`, /sys/module/amdgpu) and that the GPU operator's device plugin lists its GPUs (`kubectl describe node`: amd.com/gpu); keep workers off it until then"
    )]
    NoGpus { node: String, driver: &'static str },
}

/// A node a GPU engine can run on lists a GPU. (At root `/` a machine without GPUs is still
/// planned for, with `gpus-not-present` where the pod expects some: the tests' own machines
/// have none.)
pub(crate) fn present(n: &NodeFacts) -> Result<(), GpuError> {
    if !n.gpus.is_empty() {
        return Ok(());
    }
    let node = if n.live { "this node".to_string() } else { format!("the node of {}", n.described()) };
    let driver = if n.driver_loaded { "" } else { "; no amdgpu driver is loaded" };
    Err(GpuError::NoGpus { node, driver })
}

/// The generic processors and the GPUs whose code objects they run on (LLVM AMDGPUUsage,
/// "Generic processors"). gfx90a is in none.
const GENERIC: &[(&str, &[&str])] = &[
    ("gfx9-generic", &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"]),
    ("gfx9-4-generic", &["gfx940", "gfx941", "gfx942", "gfx950"]),
    ("gfx10-1-generic", &["gfx1010", "gfx1011", "gfx1012", "gfx1013"]),
    ("gfx10-3-generic", &["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"]),
    ("gfx11-generic", &["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"]),
    ("gfx12-generic", &["gfx1200", "gfx1201"]),
];

/// Code built for `processor` runs on `gpu`: the same processor, or a generic one covering
/// it. (The xnack/sramecc modes a target id may fix are not compared: the node's modes are
/// not read, and a target without them runs in either.)
pub(crate) fn runs_on(processor: &str, gpu: &str) -> bool {
    processor == gpu || GENERIC.iter().any(|(g, covers)| *g == processor && covers.contains(&gpu))
}

/// The node's GPUs this run may use: on the node itself, those whose render node the
/// container was given (sysfs lists every GPU of the node); a profile's, all of them.
pub(crate) fn allocated<'a>(node: &'a NodeFacts, facts: &Facts) -> Vec<&'a Gpu> {
    let present = facts.host.as_ref().filter(|_| node.live).map(|h| h.devices.render_minors()).unwrap_or_default();
    node.gpus.iter().filter(|g| present.is_empty() || g.render_minor.is_some_and(|m| present.contains(&m))).collect()
}

/// The allocated GPUs' processors.
pub(crate) fn processors(gpus: &[&Gpu]) -> BTreeSet<String> {
    gpus.iter().filter_map(|g| g.gfx.clone()).collect()
}

/// `9.4.2` → `gfx942` (HSA_OVERRIDE_GFX_VERSION's form: major.minor.stepping, decimal).
fn override_gfx(v: &str) -> Option<String> {
    let mut it = v.trim().split('.').map(|x| x.parse::<u64>().ok());
    let (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return None;
    };
    gfx_name(a * 10000 + b * 100 + c)
}

/// The libraries this run uses: torch's, the engine's own, and the optional kernels.
fn libs_of(facts: &Facts, engine: Engine) -> impl Iterator<Item = &GpuLib> {
    facts.gpu_code.iter().filter(move |l| l.package == engine.name() || !matches!(l.package, "vllm" | "sglang"))
}

pub(crate) fn check(
    facts: &Facts,
    on: Option<&NodeFacts>,
    engine: Engine,
    env: &Env,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), Refusal> {
    let Some(n) = on else { return Ok(()) };
    if !n.live {
        present(n)?;
    }
    let node = processors(&allocated(n, facts));
    let from = n.described();
    if node.is_empty() {
        return Ok(());
    }
    let target = match overridden(facts, engine, env, &node, allow, findings)? {
        Some(claims) => [claims].into(),
        None => node.clone(),
    };
    let aiter_forced = [ev::VLLM_ROCM_USE_AITER, ev::SGLANG_USE_AITER]
        .iter()
        .any(|v| ev::get(env, v).is_some_and(|x| x == "1" || x.eq_ignore_ascii_case("true")));
    for lib in libs_of(facts, engine) {
        library(lib, lib.required || (lib.package == "aiter" && aiter_forced), (&target, &from), findings)?;
    }
    settings(n, &node, findings);
    if let (Some(driver), Ok(Some(r))) = (&n.driver, facts.rocm.as_ref().map(|r| r.release.as_ref())) {
        driver_window(driver, (r.major, r.minor), &r.version, findings);
    }
    Ok(())
}

/// The kernel driver builds AMD documents with the ROCm user-space releases tested on them
/// (ROCm promises ±2 releases between the driver and the user space). Only the rows with a
/// source are here; another driver version is not judged.
/// A driver version prefix, the ROCm releases (major, minor) tested with it, the source.
type DriverRow = (&'static str, &'static [(u32, u32)], &'static str);

const DRIVERS: &[DriverRow] = &[
    (
        "30.30.",
        &[(6, 3), (6, 4), (7, 0), (7, 1), (7, 2)],
        "AMD GPU Driver (amdgpu) 30.30 compatibility matrix, ROCm/amdgpu-docs",
    ),
    (
        "6.16.",
        &[(6, 4), (7, 0), (7, 1), (7, 2)],
        "ROCm 7.1's amdgpu-dkms (6.16.6 with ROCm 7.1.1, ROCm/legacy-rocm-build#5624), ±2 releases",
    ),
    (
        "6.7.",
        &[(6, 0), (6, 1), (6, 2), (6, 3)],
        "ROCm 6.2's amdgpu-dkms (ROCm/legacy-rocm-build#3701); KMD 6.2.x in ROCm 6.3's user and kernel-space support matrix",
    ),
];

fn driver_window(driver: &str, image: (u32, u32), version: &str, findings: &mut Vec<Finding>) {
    let Some((_, tested, source)) = DRIVERS.iter().find(|(prefix, _, _)| driver.starts_with(prefix)) else { return };
    if !tested.contains(&image) {
        let list: Vec<String> = tested.iter().map(|(a, b)| format!("{a}.{b}")).collect();
        findings.push(Finding::warn(
            "driver-window",
            format!(
                "the node's amdgpu driver {driver} is tested with ROCm {} user space ({source}), not with this \
                 image's ROCm {version}: expect failures AMD does not test for; use an image of a ROCm in that window, \
                 or a node with a matching driver",
                list.join(", ")
            ),
        ));
    }
}

fn shown(gpus: &BTreeSet<String>) -> String {
    gpus.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn has(lib: &GpuLib, gpu: &str) -> bool {
    lib.targets.as_ref().is_ok_and(|c| c.processors.iter().any(|p| runs_on(p, gpu)))
}

/// HSA_OVERRIDE_GFX_VERSION naming another GPU than the node's: refused where the image has
/// code for the real one (the override is then a mistake), else the GPU code is held to it.
fn overridden(
    facts: &Facts,
    engine: Engine,
    env: &Env,
    node: &BTreeSet<String>,
    allow: &[String],
    findings: &mut Vec<Finding>,
) -> Result<Option<String>, Refusal> {
    let Some(value) = ev::get(env, ev::HSA_OVERRIDE_GFX_VERSION).map(|v| v.to_string_lossy().into_owned()) else {
        return Ok(None);
    };
    let Some(claims) = override_gfx(&value).filter(|c| !node.contains(c)) else { return Ok(None) };
    match libs_of(facts, engine).find(|l| l.required && node.iter().all(|g| has(l, g))) {
        Some(l) => {
            let (package, path) = (l.package, l.path.display().to_string());
            let e = GpuError::Override { value, claims: claims.clone(), node: shown(node), package, path };
            infera_facts::finding::unless_allowed(allow, "gfx-override", e, findings)?;
        }
        None => findings.push(Finding::warn(
            "gfx-override",
            format!("HSA_OVERRIDE_GFX_VERSION={value}: this node's {} GPUs run code built for {claims}", shown(node)),
        )),
    }
    Ok(Some(claims))
}

/// One library against the GPUs: refused when `needed` and it has no code for them.
/// `from`: what says the node's GPUs are these (its KFD topology, or `--node`'s profile).
fn library(
    lib: &GpuLib,
    needed: bool,
    (target, from): (&BTreeSet<String>, &str),
    findings: &mut Vec<Finding>,
) -> Result<(), GpuError> {
    let (package, path) = (lib.package, lib.path.display().to_string());
    let code = match &lib.targets {
        Ok(c) => c,
        Err(e) => {
            findings.push(Finding::warn("gpu-code-unreadable", format!("{package}'s `{path}`: {e}")));
            return Ok(());
        }
    };
    let sampled = if code.sampled { format!(" (in the first {} bundles read)", code.bundles) } else { String::new() };
    let list = shown(&code.processors);
    if target.iter().any(|g| !has(lib, g)) {
        if needed {
            let node = format!("{} ({from})", shown(target));
            return Err(GpuError::Missing { package, path, has: list, sampled, node });
        }
        findings.push(Finding::warn(
            "gpu-code-optional-missing",
            format!(
                "{package}'s `{path}` has GPU code for {list}, not for {}: the engine runs without it (its slower \
                 kernels), or fails where it is forced on",
                shown(target)
            ),
        ));
    } else if let Some(g) = target.iter().find(|g| code.partial.iter().any(|p| runs_on(p, g))) {
        findings.push(Finding::warn(
            "gpu-code-partial",
            format!(
                "{package}'s `{path}`: only some of its {} bundles{sampled} have code for {g}: a kernel of the others \
                 would fail with `invalid device function`",
                code.bundles
            ),
        ));
    }
    Ok(())
}

/// Node settings that shrink or hang GPUs, as warnings (the pod cannot change them).
pub(crate) fn settings(d: &NodeFacts, node: &BTreeSet<String>, findings: &mut Vec<Finding>) {
    let split: Vec<String> = d
        .gpus
        .iter()
        .filter_map(|g| {
            let c = g.compute_partition.as_deref().filter(|c| !c.eq_ignore_ascii_case("SPX"));
            let m = g.memory_partition.as_deref().filter(|m| !m.eq_ignore_ascii_case("NPS1"));
            (c.is_some() || m.is_some()).then(|| [c, m].into_iter().flatten().collect::<Vec<_>>().join("/"))
        })
        .collect();
    if let Some(mode) = split.first() {
        findings.push(Finding::warn(
            "gpu-partitioned",
            format!(
                "the node's {} GPUs are partitioned ({mode}, current_compute_partition/current_memory_partition): \
                 the {} KFD GPUs are each a share of a physical GPU's compute and memory, and TP and the memory \
                 checks count partitions",
                shown(node),
                d.gpus.len()
            ),
        ));
    }
    if d.numa_balancing == Some(1) {
        findings.push(Finding::warn(
            "numa-balancing",
            "/proc/sys/kernel/numa_balancing is 1: AMD's guidance for Instinct GPUs is to turn it off (the GPU might hang); on the node: `sysctl -w kernel.numa_balancing=0`",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_targets_and_overrides() {
        assert!(runs_on("gfx942", "gfx942"));
        assert!(runs_on("gfx9-4-generic", "gfx950"));
        assert!(!runs_on("gfx9-4-generic", "gfx90a"));
        assert!(!runs_on("gfx9-generic", "gfx90a"));
        assert!(!runs_on("gfx942", "gfx950"));
        assert_eq!(override_gfx("9.4.2").as_deref(), Some("gfx942"));
        assert_eq!(override_gfx("11.0.0").as_deref(), Some("gfx1100"));
        assert_eq!(override_gfx("9.4").as_deref(), None);
        assert_eq!(override_gfx("x").as_deref(), None);
    }
}
