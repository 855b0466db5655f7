//! Whether a capability the tree provides can work on this node: a pure function of
//! the host facts (devices, memlock, capabilities), ROCm and the pod's environment.

use infera_facts::envvars::{self as ev, Env};
use infera_facts::host::Host;
use infera_facts::rocm::Rocm;

pub(super) struct Usability {
    pub usable: Option<bool>,
    pub reason: Option<String>,
    pub hint: Option<String>,
}

fn yes(reason: Option<String>) -> Usability {
    Usability { usable: Some(true), reason, hint: None }
}

fn no(reason: String, hint: &str) -> Usability {
    Usability { usable: Some(false), reason: Some(reason), hint: Some(hint.to_string()) }
}

fn unknown(reason: &str) -> Usability {
    Usability { usable: None, reason: Some(reason.to_string()), hint: None }
}

const NOT_ROOT: &str = "unknown: the node's devices and limits are only read with --root /";

/// `rdma`: the node's RDMA devices (None: the node is unknown).
pub(super) fn check(name: &str, host: Option<&Host>, rdma: Option<&[String]>, rocm: &Rocm, env: &Env) -> Usability {
    match name {
        "mooncake" => {
            if ev::truthy(env, ev::MC_FORCE_TCP) {
                return yes(Some("MC_FORCE_TCP=1: TCP transport, no RDMA needed".into()));
            }
            let (Some(h), Some(rdma)) = (host, rdma) else { return unknown(NOT_ROOT) };
            let hint = "set MC_FORCE_TCP=1 to use TCP, or give the pod RDMA devices (the RDMA device plugin) and an \
                        unlimited memlock limit or CAP_IPC_LOCK (securityContext.capabilities.add: [IPC_LOCK])";
            if rdma.is_empty() {
                return no("no RDMA devices (/dev/infiniband/uverbs*) in the container".into(), hint);
            }
            match h.memlock {
                None => yes(None),
                Some(_) if h.has_effective("CAP_IPC_LOCK") => yes(None),
                Some(limit) => no(
                    format!(
                        "the memlock limit is {} KiB and CAP_IPC_LOCK is not effective: Mooncake cannot register memory for RDMA",
                        limit / 1024
                    ),
                    hint,
                ),
            }
        }
        "hipfile" => {
            let hint = "hipFile needs ROCm >= 7.2 userspace in the image and /dev/kfd in the container (the AMD GPU device plugin)";
            // The ROCm release, not the HIP ABI: ROCm 10 ships HIP 7.15.
            match &rocm.release {
                Some(r) if (r.major, r.minor) < (7, 2) => {
                    return no(format!("ROCm {} from {} is older than 7.2", r.version, r.source), hint)
                }
                None => return unknown("unknown: the image does not record its ROCm release (hipFile needs >= 7.2)"),
                _ => {}
            }
            let Some(h) = host else { return unknown(NOT_ROOT) };
            if !h.kfd {
                return no("/dev/kfd is not in the container".into(), hint);
            }
            yes(None)
        }
        _ => yes(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infera_facts::host::CapSets;

    fn host(memlock: Option<u64>, ipc_lock: bool, kfd: bool) -> Host {
        Host {
            pid1: false,
            memlock,
            caps: CapSets {
                effective: if ipc_lock { vec!["CAP_IPC_LOCK".into()] } else { vec![] },
                ..CapSets::default()
            },
            kfd,
            render_nodes: 0,
            devices: Default::default(),
        }
    }

    fn rocm(version: &str, major: u32, minor: Option<u32>) -> Rocm {
        use infera_facts::rocm::{Hip, Release};
        let release = minor.map(|minor| Release {
            version: version.into(),
            major,
            minor,
            source: "/opt/rocm/.info/version".into(),
        });
        Rocm {
            hip: Hip { major: 7, version: None, source: "/opt/rocm/lib/libamdhip64.so.7".into() },
            release,
            install: None,
        }
    }

    #[test]
    fn mooncake_table() {
        let r = rocm("7.0.0", 7, Some(0));
        let env = Env::new();
        let cases = [
            (true, host(None, false, false), Some(true), None),
            (true, host(Some(65536), true, false), Some(true), None),
            (true, host(Some(65536), false, false), Some(false), Some("the memlock limit is 64 KiB")),
            (false, host(None, true, false), Some(false), Some("no RDMA devices")),
        ];
        for (has_rdma, h, want, why) in cases {
            let rdma: Vec<String> = if has_rdma { vec!["/dev/infiniband/uverbs0".into()] } else { vec![] };
            let u = check("mooncake", Some(&h), Some(&rdma), &r, &env);
            assert_eq!(u.usable, want);
            if let Some(w) = why {
                assert!(u.reason.as_deref().unwrap().contains(w), "{:?}", u.reason);
                assert!(u.hint.as_deref().unwrap().contains("MC_FORCE_TCP=1"));
            }
        }
        assert_eq!(check("mooncake", None, None, &r, &env).usable, None);
        let tcp = Env::from([("MC_FORCE_TCP".into(), "1".into())]);
        assert_eq!(check("mooncake", Some(&host(Some(1), false, false)), Some(&[]), &r, &tcp).usable, Some(true));
    }

    #[test]
    fn hipfile_table() {
        let env = Env::new();
        let h = host(None, false, true);
        assert_eq!(check("hipfile", Some(&h), None, &rocm("7.2.0", 7, Some(2)), &env).usable, Some(true));
        let old = check("hipfile", Some(&h), None, &rocm("7.0.0", 7, Some(0)), &env);
        assert_eq!(old.usable, Some(false));
        assert!(old.reason.unwrap().contains("older than 7.2"));
        let nokfd = check("hipfile", Some(&host(None, false, false)), None, &rocm("7.2.0", 7, Some(2)), &env);
        assert_eq!(nokfd.reason.as_deref(), Some("/dev/kfd is not in the container"));
        assert_eq!(check("hipfile", None, None, &rocm("7.2.0", 7, Some(2)), &env).usable, None);
        assert_eq!(check("hipfile", Some(&h), None, &rocm("7", 7, None), &env).usable, None);
        // ROCm 10 ships HIP 7.15: the release decides, not the ABI.
        assert_eq!(check("hipfile", Some(&h), None, &rocm("10.0.0", 10, Some(0)), &env).usable, Some(true));
    }
}
