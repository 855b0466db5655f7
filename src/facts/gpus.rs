//! How many GPUs this container may use: the allocation first (INFERA_GPUS, then the
//! visible-devices variables), then what the node exposes under the root.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;

use serde::Serialize;

use crate::envvars as ev;
use crate::rootfs::{self, Root};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpus {
    pub count: Option<u32>,
    pub source: String,
}

pub fn detect(root: &Root, env: &BTreeMap<OsString, OsString>) -> Result<Gpus, String> {
    if let Some(v) = env.get(&OsString::from(ev::INFERA_GPUS)) {
        let s = rootfs::os_to_string(v);
        return match s.trim().parse::<u32>() {
            Ok(n) => Ok(Gpus { count: Some(n), source: format!("{}={s}", ev::INFERA_GPUS) }),
            Err(_) => Err(format!("{}=`{s}` is not a whole number of GPUs", ev::INFERA_GPUS)),
        };
    }
    // HIP and CUDA masks select among the devices ROCR exposes, so the innermost wins.
    for var in [ev::HIP_VISIBLE_DEVICES, ev::CUDA_VISIBLE_DEVICES, ev::ROCR_VISIBLE_DEVICES] {
        if let Some(v) = env.get(&OsString::from(var)) {
            let s = rootfs::os_to_string(v);
            return Ok(Gpus { count: Some(count_list(&s)), source: format!("{var}={s}") });
        }
    }
    // What the node exposes. sysfs is not namespaced: the KFD topology lists every GPU of
    // the node, while the device plugin allocates GPUs by mounting their render nodes. So a
    // GPU counts when its render node is in this container's /dev/dri.
    let dri = Path::new("/dev/dri");
    let renders: BTreeSet<u32> =
        root.list(dri).iter().filter_map(|n| n.to_str()?.strip_prefix("renderD")?.parse().ok()).collect();
    let nodes = Path::new("/sys/class/kfd/kfd/topology/nodes");
    let mut kfd_gpus: Vec<Option<u32>> = Vec::new(); // each GPU node's drm_render_minor
    for n in root.list(nodes) {
        let Ok(text) = root.read_small_string(&nodes.join(&n).join("properties")) else { continue };
        let prop = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
        // CPU nodes report simd_count 0.
        if prop("simd_count ").unwrap_or(0) > 0 {
            kfd_gpus.push(prop("drm_render_minor ").and_then(|m| u32::try_from(m).ok()));
        }
    }
    if !renders.is_empty() {
        if !kfd_gpus.is_empty() && kfd_gpus.iter().all(Option::is_some) {
            let n = kfd_gpus.iter().flatten().filter(|m| renders.contains(m)).count() as u32;
            return Ok(Gpus {
                count: Some(n),
                source: format!("KFD topology GPUs whose render node is in {}", dri.display()),
            });
        }
        return Ok(Gpus {
            count: Some(renders.len() as u32),
            source: format!("{}/renderD* device nodes", dri.display()),
        });
    }
    if !kfd_gpus.is_empty() {
        return Ok(Gpus {
            count: None,
            source: format!(
                "the node's KFD topology lists {} GPUs, none allocated to this container (no /dev/dri/renderD*)",
                kfd_gpus.len()
            ),
        });
    }
    Ok(Gpus { count: None, source: "no visible-devices variable, KFD topology or render nodes".into() })
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
