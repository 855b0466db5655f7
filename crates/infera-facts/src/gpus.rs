//! How many GPUs this container may use: the allocation first (INFERA_GPUS, then the
//! visible-devices variables), then what the node exposes under the root.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use crate::envvars as ev;
use crate::envvars::Env;
use infera_core::rootfs::{self, Root};
use infera_exec_derive::Refuse;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpus {
    pub count: Option<u32>,
    pub source: GpuSource,
}

/// Where the count came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GpuSource {
    /// `INFERA_GPUS=N`.
    Infera {
        value: String,
    },
    /// `HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES` / `ROCR_VISIBLE_DEVICES` (`var`, the
    /// mask counted), read as torch reads them; `read` says how, where that is not a plain
    /// count of the entries.
    VisibleDevices {
        var: &'static str,
        value: String,
        read: Option<String>,
    },
    /// KFD topology GPUs whose render node is in /dev/dri.
    KfdTopology,
    /// `/dev/dri/renderD*` nodes (no usable KFD topology).
    RenderNodes,
    /// A node profile (`--node`): every GPU it lists.
    Profile {
        source: String,
    },
    /// The node's KFD topology lists GPUs, none allocated to this container.
    NodeOnly {
        listed: usize,
    },
    Nothing,
}

impl GpuSource {
    /// An allocation stated by the pod's environment (not read from the node).
    pub fn from_env(&self) -> bool {
        matches!(self, GpuSource::Infera { .. } | GpuSource::VisibleDevices { .. })
    }
}

impl std::fmt::Display for GpuSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuSource::Infera { value } => write!(f, "{}={value}", ev::INFERA_GPUS),
            GpuSource::VisibleDevices { var, value, read: None } => write!(f, "{var}={value}"),
            GpuSource::VisibleDevices { var, value, read: Some(how) } => write!(f, "{var}={value}: {how}"),
            GpuSource::KfdTopology => f.write_str("KFD topology GPUs whose render node is in /dev/dri"),
            GpuSource::RenderNodes => f.write_str("/dev/dri/renderD* device nodes"),
            GpuSource::Profile { source } => write!(f, "the GPUs of --node {source}"),
            GpuSource::NodeOnly { listed } => write!(
                f,
                "the node's KFD topology lists {listed} GPUs, none allocated to this container (no /dev/dri/renderD*)"
            ),
            GpuSource::Nothing => f.write_str("no visible-devices variable, KFD topology or render nodes"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Refuse)]
pub enum GpuError {
    #[error("{}=`{value}` {why}", ev::INFERA_GPUS)]
    #[refuse(code = "gpus-invalid", exit = Usage, hint = "set INFERA_GPUS to a whole number, or unset it")]
    InferaGpus { value: String, why: &'static str },
    #[error("{var}=`{value}` leaves no GPU for the engine: {why}")]
    #[refuse(
        code = "gpus-none-visible",
        exit = Refused,
        hint = "list the GPUs this container may use, each once (`0,1,2,3`), or unset the variable to use the GPUs allocated to the pod"
    )]
    NoneVisible { var: &'static str, value: String, why: String },
    #[error(
        "HIP_VISIBLE_DEVICES=`{hip}` names {hip_n} GPUs, but ROCR_VISIBLE_DEVICES=`{rocr}` leaves {rocr_n} to select from; torch refuses this at start (\"HIP_VISIBLE_DEVICES contains more devices than ROCR_VISIBLE_DEVICES\")"
    )]
    #[refuse(
        code = "gpus-masks-disagree",
        exit = Refused,
        hint = "HIP_VISIBLE_DEVICES selects among the GPUs ROCR_VISIBLE_DEVICES leaves (numbered from 0): set one of them only, or make HIP's list index into ROCR's"
    )]
    MasksDisagree { hip: String, hip_n: usize, rocr: String, rocr_n: usize },
    #[error("{stated} gives the engine {count} GPUs, but the node has {listed} ({node}): TP and the memory checks would count GPUs it does not have")]
    #[refuse(
        code = "gpus-exceed-node",
        exit = Refused,
        hint = "give the pod at most the node's GPUs (its `amd.com/gpu` limit), or judge it against a node that has them"
    )]
    MoreThanTheNode { stated: String, count: u32, listed: usize, node: String },
}

/// `kfd`: the KFD topology's GPUs (`devices::kfd_gpus`). A count the pod's environment states
/// is held to the node's GPUs, where the node lists any.
pub fn detect(root: &Root, env: &Env, node: Option<&super::node::NodeFacts>) -> Result<Gpus, GpuError> {
    let gpus = stated_or_found(root, env, node)?;
    let listed = node.map_or(0, |n| n.gpus.len());
    match (gpus.count, node) {
        (Some(n), Some(on)) if gpus.source.from_env() && listed > 0 && n as usize > listed => {
            Err(GpuError::MoreThanTheNode { stated: gpus.source.to_string(), count: n, listed, node: on.described() })
        }
        _ => Ok(gpus),
    }
}

fn stated_or_found(root: &Root, env: &Env, node: Option<&super::node::NodeFacts>) -> Result<Gpus, GpuError> {
    if let Some(v) = ev::get(env, ev::INFERA_GPUS) {
        let value = rootfs::os_to_string(v);
        return match value.trim().parse::<u32>() {
            // (An engine on no GPU: every hint would ask for a size of 0.)
            Ok(0) => Err(GpuError::NoneVisible { var: ev::INFERA_GPUS, value, why: "it names 0 GPUs".into() }),
            Ok(n) => Ok(Gpus { count: Some(n), source: GpuSource::Infera { value } }),
            Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
                Err(GpuError::InferaGpus { value, why: "is larger than any node's count of GPUs" })
            }
            Err(_) => Err(GpuError::InferaGpus { value, why: "is not a whole number of GPUs" }),
        };
    }
    if let Some(gpus) = masked(env)? {
        return Ok(gpus);
    }
    let kfd = node.map_or(&[][..], |n| &n.gpus[..]);
    if let Some(n) = node.filter(|n| !n.live) {
        return Ok(Gpus { count: Some(kfd.len() as u32), source: GpuSource::Profile { source: n.label.clone() } });
    }
    // What the node exposes. sysfs is not namespaced: the KFD topology lists every GPU of
    // the node, while the device plugin allocates GPUs by mounting their render nodes. So a
    // GPU counts when its render node is in this container's /dev/dri.
    let renders: BTreeSet<u32> = root
        .list(Path::new("/dev/dri"))
        .iter()
        .filter_map(|n| n.to_str()?.strip_prefix("renderD")?.parse().ok())
        .collect();
    let kfd_gpus: Vec<Option<u32>> = kfd.iter().map(|g| g.render_minor).collect();
    if !renders.is_empty() {
        if !kfd_gpus.is_empty() && kfd_gpus.iter().all(Option::is_some) {
            let n = kfd_gpus.iter().flatten().filter(|m| renders.contains(m)).count() as u32;
            return Ok(Gpus { count: Some(n), source: GpuSource::KfdTopology });
        }
        return Ok(Gpus { count: Some(renders.len() as u32), source: GpuSource::RenderNodes });
    }
    if !kfd_gpus.is_empty() {
        return Ok(Gpus { count: None, source: GpuSource::NodeOnly { listed: kfd_gpus.len() } });
    }
    Ok(Gpus { count: None, source: GpuSource::Nothing })
}

/// The GPUs the visible-device masks leave, counted as torch counts them on a ROCm build
/// (`torch.cuda._parse_visible_devices`, torch/cuda/__init__.py, 2.4 and later): the ROCm
/// runtime applies ROCR_VISIBLE_DEVICES first, and HIP_VISIBLE_DEVICES (else
/// CUDA_VISIBLE_DEVICES) then selects among the GPUs it left, numbered from 0; torch raises
/// when HIP's list is longer than ROCR's. None: no mask is set (the node decides).
fn masked(env: &Env) -> Result<Option<Gpus>, GpuError> {
    let get = |var| ev::get(env, var).map(|v| rootfs::os_to_string(v));
    let (rocr, hip, cuda) =
        (get(ev::ROCR_VISIBLE_DEVICES), get(ev::HIP_VISIBLE_DEVICES), get(ev::CUDA_VISIBLE_DEVICES));
    // ROCR's own list is not parsed by torch: its entries are counted.
    let rocr_n = rocr.as_deref().map(|r| if r.trim().is_empty() { 0 } else { r.split(',').count() });
    let (var, value) = match (hip, cuda) {
        (Some(h), _) => (ev::HIP_VISIBLE_DEVICES, h),
        (None, Some(c)) if rocr.is_none() => (ev::CUDA_VISIBLE_DEVICES, c),
        _ => match (rocr, rocr_n) {
            (Some(value), Some(n)) => {
                let var = ev::ROCR_VISIBLE_DEVICES;
                if n == 0 {
                    return Err(GpuError::NoneVisible { var, value, why: "the list is empty".into() });
                }
                return Ok(Some(Gpus {
                    count: Some(n as u32),
                    source: GpuSource::VisibleDevices { var, value, read: None },
                }));
            }
            _ => return Ok(None),
        },
    };
    if let (Some(rocr), Some(rocr_n)) = (&rocr, rocr_n) {
        let hip_n = value.split(',').count();
        if hip_n > rocr_n {
            return Err(GpuError::MasksDisagree { hip: value, hip_n, rocr: rocr.clone(), rocr_n });
        }
    }
    let (count, read) = parse_mask(&value, rocr_n);
    if count == 0 {
        let why = read.unwrap_or_else(|| "the list is empty".into());
        return Err(GpuError::NoneVisible { var, value, why });
    }
    let read = match (&rocr, read) {
        (Some(r), None) => {
            Some(format!("selected among the {} GPUs ROCR_VISIBLE_DEVICES={r} leaves", rocr_n.unwrap_or(0)))
        }
        (_, read) => read,
    };
    Ok(Some(Gpus { count: Some(count as u32), source: GpuSource::VisibleDevices { var, value, read } }))
}

/// The entries torch keeps of one mask, and how it read them where that is not a plain
/// count: UUIDs (`GPU-…`) up to the first entry without the prefix; ordinals read as C's
/// `strtoul` reads them (`1gpu` is 1), up to the first negative or unreadable entry; a
/// repeated entry empties the set. `limit`: ordinals from it on name no GPU (ROCR left
/// only that many), and end the list as the runtime ends it.
fn parse_mask(value: &str, limit: Option<usize>) -> (usize, Option<String>) {
    let entries: Vec<&str> = value.split(',').collect();
    if let Some(prefix) = ["GPU-", "MIG-"].into_iter().find(|p| value.starts_with(p)) {
        let mut seen: Vec<&str> = Vec::new();
        for e in &entries {
            if seen.contains(e) {
                return (0, Some(format!("`{e}` is listed twice, which leaves none (torch)")));
            }
            if !e.starts_with(prefix) {
                let n = seen.len();
                return (n, Some(format!("the list ends at `{e}`, which is not a {prefix} id: {}", plural(n))));
            }
            seen.push(e);
        }
        return (seen.len(), None);
    }
    let mut seen: Vec<i64> = Vec::new();
    let mut note = None;
    for e in &entries {
        let x = strtoul(e.trim());
        if seen.contains(&x) && x >= 0 {
            return (0, Some(format!("GPU {x} is listed twice, which leaves none (torch)")));
        }
        if x < 0 {
            let n = seen.len();
            let what = if e.trim().is_empty() { "an empty entry".to_string() } else { format!("`{}`", e.trim()) };
            return (n, Some(format!("the list ends at {what}: {}", plural(n))));
        }
        if let Some(l) = limit.filter(|l| x >= *l as i64) {
            let n = seen.len();
            return (
                n,
                Some(format!(
                    "GPU {x} is not among the {l} ROCR_VISIBLE_DEVICES leaves: the list ends there, {}",
                    plural(n)
                )),
            );
        }
        if x.to_string() != e.trim().trim_start_matches('+') && note.is_none() {
            note = Some(format!("`{}` is read as {x}", e.trim()));
        }
        seen.push(x);
    }
    (seen.len(), note.map(|n| format!("{n}: {}", plural(seen.len()))))
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 GPU".into()
    } else {
        format!("{n} GPUs")
    }
}

/// torch's `_strtoul`: the integer an entry starts with (a sign allowed first), or -1.
fn strtoul(s: &str) -> i64 {
    let digits = s.char_indices().take_while(|(i, c)| c.is_ascii_digit() || (*i == 0 && (*c == '+' || *c == '-')));
    let end = digits.last().map_or(0, |(i, c)| i + c.len_utf8());
    s[..end].parse::<i64>().unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_read_as_torch_reads_them() {
        let count = |v: &str| parse_mask(v, None).0;
        assert_eq!(count("0,1,2,3,4,5,6,7"), 8);
        assert_eq!(count(""), 0);
        assert_eq!(count("-1"), 0);
        assert_eq!(count("0,-1,1"), 1, "a negative entry ends the list");
        assert_eq!(count("0,0,0,0"), 0, "a repeated ordinal empties the set");
        assert_eq!(count("1gpu2,2ampere"), 2, "strtoul: the leading digits");
        assert_eq!(count("0,x,1"), 1);
        assert_eq!(count(" 0 , 1 "), 2);
        assert_eq!(count("0-3"), 1, "no ranges: `0-3` is 0");
        assert_eq!(count("GPU-abc,GPU-def"), 2);
        assert_eq!(count("GPU-abc,GPU-abc"), 0);
        assert_eq!(count("GPU-abc,1,GPU-def"), 1);
        assert_eq!(parse_mask("0,1,2,3", Some(2)).0, 2, "ordinals past ROCR's GPUs end the list");
        assert_eq!(strtoul("+3"), 3);
        assert_eq!(strtoul("-"), -1);
        assert_eq!(strtoul("99999999999999999999"), -1);
    }

    fn env(vars: &[(&str, &str)]) -> Env {
        vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn rocr_first_then_hip_among_what_it_left() {
        let n = |vars: &[(&str, &str)]| masked(&env(vars)).map(|g| g.and_then(|g| g.count));
        assert_eq!(n(&[]), Ok(None));
        assert_eq!(n(&[("ROCR_VISIBLE_DEVICES", "0,1")]), Ok(Some(2)));
        assert_eq!(n(&[("ROCR_VISIBLE_DEVICES", "4,5,6"), ("HIP_VISIBLE_DEVICES", "0,2")]), Ok(Some(2)));
        assert_eq!(n(&[("ROCR_VISIBLE_DEVICES", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1,2,3")]), Ok(Some(2)));
        assert_eq!(n(&[("CUDA_VISIBLE_DEVICES", "0,1,2")]), Ok(Some(3)));
        assert_eq!(n(&[("HIP_VISIBLE_DEVICES", "0"), ("CUDA_VISIBLE_DEVICES", "0,1,2")]), Ok(Some(1)));
        let e = masked(&env(&[("ROCR_VISIBLE_DEVICES", "0,1"), ("HIP_VISIBLE_DEVICES", "0,1,2,3")])).unwrap_err();
        assert!(matches!(e, GpuError::MasksDisagree { hip_n: 4, rocr_n: 2, .. }), "{e}");
        let e = masked(&env(&[("HIP_VISIBLE_DEVICES", "0,0,0,0")])).unwrap_err();
        assert_eq!(e.to_string(), "HIP_VISIBLE_DEVICES=`0,0,0,0` leaves no GPU for the engine: GPU 0 is listed twice, which leaves none (torch)");
        let e = masked(&env(&[("ROCR_VISIBLE_DEVICES", "")])).unwrap_err();
        assert!(e.to_string().contains("the list is empty"), "{e}");
        let g = masked(&env(&[("HIP_VISIBLE_DEVICES", "0,-1,1")])).unwrap().unwrap();
        assert_eq!(g.count, Some(1));
        assert_eq!(g.source.to_string(), "HIP_VISIBLE_DEVICES=0,-1,1: the list ends at `-1`: 1 GPU");
    }
}
