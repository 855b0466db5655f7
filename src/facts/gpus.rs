//! How many GPUs this container may use: the allocation first (INFERA_GPUS, then the
//! visible-devices variables), then what the node exposes under the root.

use std::collections::BTreeMap;
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
    let nodes = Path::new("/sys/class/kfd/kfd/topology/nodes");
    let mut kfd = 0;
    let mut saw_kfd = false;
    for n in root.list(nodes) {
        let props = nodes.join(&n).join("properties");
        if let Ok(text) = root.read_small_string(&props) {
            saw_kfd = true;
            // CPU nodes report simd_count 0.
            let simds = text.lines().find_map(|l| l.strip_prefix("simd_count ")?.trim().parse::<u64>().ok());
            if simds.unwrap_or(0) > 0 {
                kfd += 1;
            }
        }
    }
    if saw_kfd {
        return Ok(Gpus { count: Some(kfd), source: format!("{} (KFD topology)", nodes.display()) });
    }
    let dri = Path::new("/dev/dri");
    let render = root.list(dri).iter().filter(|n| n.to_string_lossy().starts_with("renderD")).count();
    if render > 0 {
        return Ok(Gpus { count: Some(render as u32), source: format!("{}/renderD* device nodes", dri.display()) });
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
