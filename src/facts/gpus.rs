//! How many GPUs this container may use: the allocation first (INFERA_GPUS, then the
//! visible-devices variables), then what the node exposes under the root.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use crate::envvars as ev;
use crate::rootfs::{self, Root};
use crate::Env;
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
    /// `HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES` / `ROCR_VISIBLE_DEVICES`.
    VisibleDevices {
        var: &'static str,
        value: String,
    },
    /// KFD topology GPUs whose render node is in /dev/dri.
    KfdTopology,
    /// `/dev/dri/renderD*` nodes (no usable KFD topology).
    RenderNodes,
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
            GpuSource::VisibleDevices { var, value } => write!(f, "{var}={value}"),
            GpuSource::KfdTopology => f.write_str("KFD topology GPUs whose render node is in /dev/dri"),
            GpuSource::RenderNodes => f.write_str("/dev/dri/renderD* device nodes"),
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
    #[error("{}=`{value}` is not a whole number of GPUs", ev::INFERA_GPUS)]
    #[refuse(code = "gpus-invalid", exit = Usage, hint = "set INFERA_GPUS to a whole number, or unset it")]
    InferaGpus { value: String },
}

pub fn detect(root: &Root, env: &Env, findings: &mut Vec<crate::finding::Finding>) -> Result<Gpus, GpuError> {
    if let Some(v) = ev::get(env, ev::INFERA_GPUS) {
        let value = rootfs::os_to_string(v);
        return match value.trim().parse::<u32>() {
            Ok(n) => Ok(Gpus { count: Some(n), source: GpuSource::Infera { value } }),
            Err(_) => Err(GpuError::InferaGpus { value }),
        };
    }
    // HIP and CUDA masks select among the devices ROCR exposes, so the innermost wins.
    for var in [ev::HIP_VISIBLE_DEVICES, ev::CUDA_VISIBLE_DEVICES, ev::ROCR_VISIBLE_DEVICES] {
        if let Some(v) = ev::get(env, var) {
            let value = rootfs::os_to_string(v);
            return Ok(Gpus { count: Some(count_list(&value)), source: GpuSource::VisibleDevices { var, value } });
        }
    }
    // What the node exposes. sysfs is not namespaced: the KFD topology lists every GPU of
    // the node, while the device plugin allocates GPUs by mounting their render nodes. So a
    // GPU counts when its render node is in this container's /dev/dri.
    let renders: BTreeSet<u32> = root
        .list(Path::new("/dev/dri"))
        .iter()
        .filter_map(|n| n.to_str()?.strip_prefix("renderD")?.parse().ok())
        .collect();
    let nodes = Path::new("/sys/class/kfd/kfd/topology/nodes");
    let mut kfd_gpus: Vec<Option<u32>> = Vec::new(); // each GPU node's drm_render_minor
    for n in root.list(nodes) {
        let props = nodes.join(&n).join("properties");
        let text = match root.read_small_string(&props) {
            Ok(t) => t,
            Err(e) => {
                crate::finding::unreadable(
                    findings,
                    "gpu-topology-unreadable",
                    &props,
                    &e,
                    "this KFD node is not counted",
                );
                continue;
            }
        };
        let prop = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
        // CPU nodes report simd_count 0.
        if prop("simd_count ").unwrap_or(0) > 0 {
            kfd_gpus.push(prop("drm_render_minor ").and_then(|m| u32::try_from(m).ok()));
        }
    }
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

/// `0,1,2,3` → 4; `` → 0; `-1` (CUDA's "none") → 0.
fn count_list(s: &str) -> u32 {
    let s = s.trim();
    if s.is_empty() || s == "-1" {
        return 0;
    }
    s.split(',').filter(|x| !x.trim().is_empty()).count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(count_list("0,1,2,3,4,5,6,7"), 8);
        assert_eq!(count_list(""), 0);
        assert_eq!(count_list("-1"), 0);
        assert_eq!(count_list("GPU-abc,GPU-def"), 2);
    }
}
