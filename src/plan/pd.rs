//! Prefill/decode disaggregation: the role the engine args give this pod (vLLM's `kv_role`
//! in `--kv-transfer-config`, also in its dotted form; sglang's `--disaggregation-mode`),
//! what that role needs of the node — the RDMA devices it names, the GID `MC_GID_INDEX`
//! picks, a bootstrap address other nodes can reach — and what the router must know.
//! (That Mooncake itself can work here is the capability check: the role implies it.)

use serde::Serialize;
use thiserror::Error;

use crate::dialect::Parsed;
use crate::engines::{Engine, Opt};
use crate::envvars::{self as ev, Env};
use crate::facts::net::{unreachable_host, unusable_gid};
use crate::facts::Facts;
use crate::finding::Finding;
use crate::request::Group;
use infera_exec_derive::Refuse;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum PdError {
    #[error("{flag}: `{device}` is not an RDMA device of this node (under /sys/class/infiniband: {})", if have.is_empty() { "none".to_string() } else { have.join(", ") })]
    #[refuse(code = "ib-device-missing", exit = Refused, hint = "name a device of the node (`ibv_devices`), and give the pod /dev/infiniband (the RDMA device plugin)")]
    IbDevice { flag: String, device: String, have: Vec<String> },
    #[error("MC_GID_INDEX=`{value}` is not a GID index")]
    #[refuse(code = "gid-index-invalid", exit = Refused, hint = "give the index of a GID (`show_gids`), or unset it")]
    GidIndexInvalid { value: String },
    #[error("MC_GID_INDEX={index}: {device} port {port} has no GID at that index")]
    #[refuse(code = "gid-index-missing", exit = Refused, hint = "pick an index `show_gids` lists for the RoCE v2 address of the pod's network")]
    GidMissing { index: u32, device: String, port: u32 },
    #[error("MC_GID_INDEX={index}: the GID of {device} port {port} is {why} ({gid}); Mooncake could not reach another node with it")]
    #[refuse(code = "gid-unusable", exit = Refused, hint = "pick the index of a routable (RoCE v2, IPv4-mapped) GID (`show_gids`)")]
    GidUnusable { index: u32, device: String, port: u32, gid: String, why: &'static str },
    #[error("the prefill's bootstrap address {what} `{host}` is a wildcard or loopback; decode nodes of a {nodes}-node group cannot reach it")]
    #[refuse(code = "bootstrap-unreachable", exit = Refused, hint = "advertise the prefill leader's name or IP (the launcher uses LWS_LEADER_ADDRESS when nothing is given)")]
    Bootstrap { what: String, host: String, nodes: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Prefill,
    Decode,
    /// vLLM's `kv_both`.
    Both,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Both => "prefill and decode (kv_both)",
        }
    }
}

/// What the router (and the operator) needs to know about a PD pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PdView {
    pub role: Role,
    /// The prefill's bootstrap server, `host:port` (host null when only the pod's IP would do
    /// and `POD_IP` is not set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_port: Option<u16>,
    pub transfer: &'static str,
}

/// The role, the node checks, the view.
pub fn plan(
    e: Engine,
    args: &[std::ffi::OsString],
    p: &Parsed,
    group: Option<&Group>,
    facts: &Facts,
    env: &Env,
    findings: &mut Vec<Finding>,
) -> Result<Option<PdView>, PdError> {
    let var = |k: &str| ev::get(env, k).map(|v| v.to_string_lossy().into_owned());
    devices_and_gid(e, p, facts, env, findings)?;
    // A --kv-transfer-config that is not JSON is the capability check's refusal.
    let kv = crate::dialect::json_option(e, args, p, Opt::KvTransferConfig).ok().flatten();
    let role = match e {
        Engine::Vllm => match kv.as_ref().and_then(|j| j.get("kv_role")).and_then(|r| r.as_str()) {
            Some("kv_producer") => Role::Prefill,
            Some("kv_consumer") => Role::Decode,
            Some("kv_both") => Role::Both,
            _ => return Ok(None),
        },
        Engine::Sglang => match p.value(Opt::DisaggregationMode) {
            Some("prefill") => Role::Prefill,
            Some("decode") => Role::Decode,
            _ => return Ok(None),
        },
    };
    let nodes = group.map_or(1, |g| g.size);
    let pod_ip = var(ev::POD_IP).filter(|h| !h.trim().is_empty());
    let (host, port, transfer) = match e {
        Engine::Vllm => {
            let extra = kv
                .as_ref()
                .and_then(|j| j.get("kv_connector_extra_config"))
                .and_then(|x| x.get("bootstrap_server_address"));
            if let Some(addr) = extra.and_then(|a| a.as_str()) {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                if nodes > 1 && role != Role::Decode && unreachable_host(host) {
                    let what = "kv_connector_extra_config.bootstrap_server_address".to_string();
                    return Err(PdError::Bootstrap { what, host: host.into(), nodes });
                }
            }
            if let Some(ip) = var(ev::VLLM_HOST_IP).filter(|ip| nodes > 1 && unreachable_host(ip)) {
                return Err(PdError::Bootstrap { what: "VLLM_HOST_IP".into(), host: ip, nodes });
            }
            let port = var(ev::VLLM_MOONCAKE_BOOTSTRAP_PORT).and_then(|v| v.trim().parse().ok()).unwrap_or(8998);
            // Multi-node: the model-parallel master is the bootstrap endpoint of every rank.
            let host = extra
                .and_then(|a| a.as_str())
                .map(|a| a.rsplit_once(':').map_or(a, |(h, _)| h).to_string())
                .or_else(|| {
                    (nodes > 1)
                        .then(|| {
                            p.value(Opt::MasterAddr)
                                .map(str::to_string)
                                .or_else(|| group.and_then(|g| g.leader.clone()))
                        })
                        .flatten()
                })
                .or(pod_ip);
            (host, port, "mooncake")
        }
        Engine::Sglang => {
            let port = p.value(Opt::DisaggregationBootstrapPort).and_then(|v| v.trim().parse().ok()).unwrap_or(8998);
            // Multi-node: the bootstrap server's host is --dist-init-addr's.
            let host = (nodes > 1)
                .then(|| {
                    p.value(Opt::DistInitAddr)
                        .map(|a| a.rsplit_once(':').map_or(a, |(h, _)| h).to_string())
                        .or_else(|| group.and_then(|g| g.leader.clone()))
                })
                .flatten()
                .or(pod_ip);
            let transfer = match p.value(Opt::DisaggregationBackend) {
                Some("nixl") => "nixl",
                Some("mooncake_tcp") => "mooncake_tcp",
                _ => "mooncake",
            };
            (host, port, transfer)
        }
    };
    let is_prefill = role != Role::Decode;
    let view = PdView {
        role,
        bootstrap_host: host.filter(|_| is_prefill),
        bootstrap_port: is_prefill.then_some(port),
        transfer,
    };
    findings.push(Finding::info(
        "pd-role",
        match (&view.bootstrap_host, view.bootstrap_port) {
            (Some(h), Some(port)) => format!("{} pod ({transfer}); bootstrap server {h}:{port}", role.name()),
            (None, Some(port)) => {
                format!("{} pod ({transfer}); bootstrap server on this pod's IP, port {port}", role.name())
            }
            _ => format!("{} pod ({transfer})", role.name()),
        },
    ));
    Ok(Some(view))
}

/// The RDMA devices the args name exist; the GID `MC_GID_INDEX` picks is routable.
fn devices_and_gid(
    e: Engine,
    p: &Parsed,
    facts: &Facts,
    env: &Env,
    findings: &mut Vec<Finding>,
) -> Result<(), PdError> {
    let devices = facts.infiniband.as_deref().unwrap_or_default();
    let have: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
    let mut named: Vec<String> = Vec::new();
    if let Some(v) = p.value(Opt::DisaggregationIbDevice) {
        let flag = e.flag(Opt::DisaggregationIbDevice);
        let v = v.trim();
        let list: Vec<String> = if v.starts_with('{') {
            match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(v) {
                Ok(m) => m.values().filter_map(|x| x.as_str()).flat_map(|s| s.split(',')).map(str::to_string).collect(),
                Err(_) => Vec::new(),
            }
        } else if v.contains('/') {
            findings.push(Finding::info(
                "ib-device-unchecked",
                format!("{flag} names a file (`{v}`); its devices are not checked here"),
            ));
            Vec::new()
        } else {
            v.split(',').map(str::to_string).collect()
        };
        for d in list.iter().map(|d| d.trim()).filter(|d| !d.is_empty()) {
            let name = d.split(':').next().unwrap_or(d).to_string();
            if !have.contains(&name) {
                return Err(PdError::IbDevice { flag, device: name, have });
            }
            if !named.contains(&name) {
                named.push(name);
            }
        }
    }
    let Some(raw) = ev::get(env, ev::MC_GID_INDEX).map(|v| v.to_string_lossy().into_owned()) else { return Ok(()) };
    let index: u32 = raw.trim().parse().map_err(|_| PdError::GidIndexInvalid { value: raw.clone() })?;
    for d in devices.iter().filter(|d| named.is_empty() || named.contains(&d.name)) {
        for (port, gid) in &d.gids {
            match gid {
                None => return Err(PdError::GidMissing { index, device: d.name.clone(), port: *port }),
                Some(g) => {
                    if let Some(why) = unusable_gid(g) {
                        return Err(PdError::GidUnusable {
                            index,
                            device: d.name.clone(),
                            port: *port,
                            gid: g.clone(),
                            why,
                        });
                    }
                }
            }
        }
    }
    Ok(())
}
