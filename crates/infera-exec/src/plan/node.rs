//! The pod's environment as the engine's processes will read it, checked before anything
//! loads: a Service named `vllm` injecting `VLLM_PORT=tcp://…` (vLLM refuses it after
//! start), GPU masks that disagree, a socket interface for Gloo/RCCL that this pod does not
//! have (the rendezvous then hangs or fails after the weights are loaded).

use thiserror::Error;

use infera_exec_derive::Refuse;
use infera_facts::engines::Engine;
use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;
use infera_facts::net::Iface;
use infera_facts::Facts;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum NodeError {
    #[error("VLLM_PORT=`{value}` is not a port number; vLLM refuses it when it starts")]
    #[refuse(
        code = "vllm-port-invalid",
        exit = Refused,
        hint = "a Service named `vllm` makes Kubernetes inject VLLM_PORT=tcp://…: set `enableServiceLinks: false` in the pod spec, or rename the Service"
    )]
    VllmPort { value: String },
    #[error("HIP_VISIBLE_DEVICES=`{hip}` and CUDA_VISIBLE_DEVICES=`{cuda}` select different GPUs")]
    #[refuse(code = "visible-devices-disagree", exit = Refused, hint = "set one of them (HIP_VISIBLE_DEVICES on ROCm), or the same list in both")]
    VisibleDevices { hip: String, cuda: String },
    #[error("{var}=`{value}`: {why}; this pod's interfaces: {have}")]
    #[refuse(
        code = "socket-ifname-missing",
        exit = Refused,
        hint = "name an interface this pod has (with hostNetwork: the node's), or unset it to let Gloo/RCCL choose"
    )]
    Ifname { var: &'static str, value: String, why: String, have: String },
    #[error(
        "this process cannot open {path}: {reason}{more}; the engine would fail with no usable GPU after it starts"
    )]
    #[refuse(
        code = "gpu-device-denied",
        exit = Unsupported,
        hint = "run the container with the device nodes' group (pod securityContext.supplementalGroups: the `video` and `render` gids of the node, as the mode shows), or as the uid that owns them"
    )]
    GpuDeviceDenied { path: String, reason: String, more: String },
}

/// The engine needs read-write access to /dev/kfd and its GPUs' render nodes: a node present
/// that this uid cannot open is refused now rather than as "no ROCm-capable device" later.
pub(crate) fn devices(facts: &Facts) -> Result<(), NodeError> {
    let Some(h) = &facts.host else { return Ok(()) };
    let denied: Vec<_> = h.devices.denied().collect();
    let Some(first) = denied.first() else { return Ok(()) };
    let more = match denied.len() {
        1 => String::new(),
        n => format!(
            " (and {} more: {})",
            n - 1,
            denied[1..].iter().map(|d| d.path.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    };
    Err(NodeError::GpuDeviceDenied {
        path: first.path.display().to_string(),
        reason: first.reason.clone().unwrap_or_default(),
        more,
    })
}

/// `engine`: the one the request names; with `auto`, each engine the image has.
pub(crate) fn check(
    engine: Option<Engine>,
    facts: &Facts,
    env: &Env,
    findings: &mut Vec<Finding>,
) -> Result<(), NodeError> {
    let var = |k: &str| ev::get(env, k).map(|v| v.to_string_lossy().into_owned());
    let engines: Vec<Engine> = match engine {
        Some(e) => vec![e],
        None => Engine::all().filter(|e| facts.engine(*e).is_some()).collect(),
    };
    for port_var in engines.iter().filter_map(|e| e.info().port_var) {
        if let Some(v) = var(port_var).filter(|v| v.trim().parse::<u16>().is_err()) {
            return Err(NodeError::VllmPort { value: v });
        }
    }
    if let (Some(hip), Some(cuda)) = (var(ev::HIP_VISIBLE_DEVICES), var(ev::CUDA_VISIBLE_DEVICES)) {
        let norm = |s: &str| s.split(',').map(str::trim).filter(|x| !x.is_empty()).collect::<Vec<_>>().join(",");
        if norm(&hip) != norm(&cuda) {
            return Err(NodeError::VisibleDevices { hip, cuda });
        }
    }
    for k in [ev::GLOO_SOCKET_IFNAME, ev::NCCL_SOCKET_IFNAME] {
        let Some(v) = var(k).filter(|v| !v.trim().is_empty()) else { continue };
        let Some(ifaces) = &facts.interfaces else {
            findings.push(Finding::info(
                "socket-ifname-unchecked",
                format!("{k}=`{v}` not checked: the pod's interfaces are read only with --root /"),
            ));
            continue;
        };
        if let Some(why) = ifname_problem(k, &v, ifaces) {
            let have = ifaces
                .iter()
                .map(|i| {
                    let a: Vec<String> = i.addrs.iter().map(|a| a.to_string()).collect();
                    format!("{} ({})", i.name, if a.is_empty() { "no address".to_string() } else { a.join(", ") })
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(NodeError::Ifname { var: k, value: v, why, have });
        }
    }
    Ok(())
}

/// NCCL/RCCL: a comma list of name prefixes (`=` for exact names, `^` to exclude: not
/// checked); one interface with an address must match. Gloo: a comma list of names, each
/// must exist with an address.
fn ifname_problem(var: &str, value: &str, ifaces: &[Iface]) -> Option<String> {
    let with_addr = |i: &&Iface| !i.addrs.is_empty();
    if var == ev::NCCL_SOCKET_IFNAME {
        if value.starts_with('^') {
            return None;
        }
        let (exact, list) = match value.strip_prefix('=') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        let names: Vec<&str> = list.split(',').map(str::trim).filter(|x| !x.is_empty()).collect();
        let matches = |i: &&Iface| names.iter().any(|n| if exact { i.name == *n } else { i.name.starts_with(n) });
        return match ifaces.iter().filter(matches).collect::<Vec<_>>() {
            m if m.is_empty() => Some("no interface matches".to_string()),
            m if !m.iter().any(with_addr) => Some("the matching interfaces have no address".to_string()),
            _ => None,
        };
    }
    for name in value.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match ifaces.iter().find(|i| i.name == name) {
            None => return Some(format!("there is no interface `{name}`")),
            Some(i) if i.addrs.is_empty() => return Some(format!("`{name}` has no address")),
            Some(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifs() -> Vec<Iface> {
        vec![
            Iface { name: "lo".into(), addrs: vec!["127.0.0.1".parse().unwrap()] },
            Iface { name: "eth0".into(), addrs: vec!["10.1.2.3".parse().unwrap()] },
            Iface { name: "ib0".into(), addrs: vec![] },
        ]
    }

    #[test]
    fn nccl_and_gloo_syntax() {
        let f = ifs();
        assert_eq!(ifname_problem("NCCL_SOCKET_IFNAME", "eth", &f), None);
        assert_eq!(ifname_problem("NCCL_SOCKET_IFNAME", "=eth", &f).as_deref(), Some("no interface matches"));
        assert_eq!(ifname_problem("NCCL_SOCKET_IFNAME", "=eth0", &f), None);
        assert_eq!(ifname_problem("NCCL_SOCKET_IFNAME", "^docker,lo", &f), None);
        assert_eq!(
            ifname_problem("NCCL_SOCKET_IFNAME", "ib", &f).as_deref(),
            Some("the matching interfaces have no address")
        );
        assert_eq!(ifname_problem("NCCL_SOCKET_IFNAME", "bond", &f).as_deref(), Some("no interface matches"));
        assert_eq!(ifname_problem("GLOO_SOCKET_IFNAME", "eth0", &f), None);
        assert_eq!(ifname_problem("GLOO_SOCKET_IFNAME", "eth1", &f).as_deref(), Some("there is no interface `eth1`"));
        assert_eq!(ifname_problem("GLOO_SOCKET_IFNAME", "eth0,ib0", &f).as_deref(), Some("`ib0` has no address"));
    }
}
