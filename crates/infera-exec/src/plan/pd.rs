//! Prefill/decode disaggregation: the role the engine args give this pod (vLLM's `kv_role`
//! in `--kv-transfer-config`, also in its dotted form; sglang's `--disaggregation-mode`),
//! what that role needs of the node — the RDMA devices it names, the GID `MC_GID_INDEX`
//! picks, a bootstrap address other nodes can reach — and what the router must know.
//! (That Mooncake itself can work here is the capability check: the role implies it.)

use serde::Serialize;
use thiserror::Error;

use crate::request::Group;
use infera_exec_derive::Refuse;
use infera_facts::dialect::Parsed;
use infera_facts::engines::{Engine, Opt};
use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;
use infera_facts::net::{unreachable_host, unusable_gid};
use infera_facts::Facts;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum PdError {
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
    #[error("this {role} worker would publish `{host}` ({why}): infera's wrapper refuses a disaggregated worker whose address is a wildcard or loopback, before the engine starts")]
    #[refuse(code = "advertise-unroutable", exit = Refused, hint = "set POD_IP from the downward API (status.podIP), or pass --advertise-host with the pod's routable address")]
    Advertise { role: &'static str, host: String, why: String },
    #[error("the prefill's bootstrap address {what} `{host}` is a wildcard or loopback; decode nodes of a {nodes}-node group cannot reach it")]
    #[refuse(code = "bootstrap-unreachable", exit = Refused, hint = "advertise the prefill leader's name or IP (the launcher uses LWS_LEADER_ADDRESS when nothing is given)")]
    Bootstrap { what: String, host: String, nodes: u32 },
}

/// A disaggregated role, as infera's wrapper registers it (vLLM: `_KV_ROLE_TO_DISAGG` maps
/// `kv_producer`/`kv_consumer`; `kv_both` is a MIXED worker to the router).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    Prefill,
    Decode,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// The address infera's wrapper publishes for this worker (infera/engine/<engine>/__main__.py):
/// `--advertise-host`, else `POD_IP` under kubernetes discovery (its default), else `--host`.
/// The launcher makes it explicit: `--host 0.0.0.0` where none is given (a worker pod serves
/// a router in another pod; vLLM's default None would make the wrapper probe and publish
/// `http://None:PORT`, sglang's binds 127.0.0.1), and `--advertise-host $POD_IP` where the
/// wrapper would otherwise publish that bind address (etcd discovery). Without POD_IP, a
/// wildcard or loopback address is refused for a disaggregated worker (as the wrapper does
/// after its imports) and an info finding otherwise. Returns the published host.
/// `defaults`: false when a `--config` file could not be read (it may set `host`).
pub(crate) fn advertise(
    e: Engine,
    p: &Parsed,
    role: Option<Role>,
    defaults: bool,
    env: &Env,
    added: &mut Vec<std::ffi::OsString>,
    findings: &mut Vec<Finding>,
) -> Result<Option<String>, PdError> {
    let flag = |o: Opt, v: &str| infera_facts::dialect::render(e, o, v).unwrap_or_default();
    let mut host = p.value(Opt::Host).map(str::to_string);
    if host.is_none() && defaults {
        added.extend(flag(Opt::Host, "0.0.0.0"));
        findings.push(Finding::info(
            "host-default",
            format!(
                "added --host 0.0.0.0: the router reaches this worker from another pod, and {}",
                e.info().host_default
            ),
        ));
        host = Some("0.0.0.0".into());
    }
    if let Some(a) = p.value(Opt::AdvertiseHost) {
        if let Some(r) = role.filter(|_| unreachable_host(a)) {
            return Err(PdError::Advertise { role: r.name(), host: a.into(), why: "--advertise-host".into() });
        }
        return Ok(Some(a.to_string()));
    }
    let pod_ip = ev::get(env, ev::POD_IP).map(|v| v.to_string_lossy().trim().to_string()).filter(|v| !v.is_empty());
    let k8s = p.value_or_default(e, Opt::DiscoveryBackend) == Some("kubernetes");
    match pod_ip {
        Some(ip) if k8s => Ok(Some(ip)),
        Some(ip) => {
            added.extend(flag(Opt::AdvertiseHost, &ip));
            findings.push(Finding::info(
                "advertise-host",
                format!("added --advertise-host {ip} (POD_IP): with etcd discovery infera's wrapper publishes --host (`{}`) otherwise", host.as_deref().unwrap_or("")),
            ));
            Ok(Some(ip))
        }
        None => {
            let h = host.unwrap_or_default();
            if unreachable_host(&h) {
                let why = "no --advertise-host, no POD_IP, and --host is the bind address".to_string();
                if let Some(r) = role {
                    return Err(PdError::Advertise { role: r.name(), host: h, why });
                }
                findings.push(Finding::info(
                    "advertise-unroutable",
                    format!("this worker would register `{h}` ({why}): only a router in this pod could reach it; set POD_IP (downward API) or --advertise-host"),
                ));
            }
            Ok(Some(h))
        }
    }
}

/// The role infera's wrapper registers this worker with (None: MIXED).
pub(crate) fn role(e: Engine, read: &infera_facts::engine_args::Read, p: &Parsed) -> Option<Role> {
    let r = e.info().pd_role;
    let value = match r.json_key {
        Some(key) => read.json(r.opt)?.get(key)?.as_str()?,
        None => p.value(r.opt)?,
    };
    if value == r.prefill {
        Some(Role::Prefill)
    } else if value == r.decode {
        Some(Role::Decode)
    } else {
        None
    }
}

/// What the router (and the operator) needs to know about a PD pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PdView {
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
/// `advertised`: the address the wrapper publishes (`advertise`), None when this rank does
/// not register.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    e: Engine,
    read: &infera_facts::engine_args::Read,
    p: &Parsed,
    group: Option<&Group>,
    advertised: Option<&str>,
    facts: &Facts,
    env: &Env,
    findings: &mut Vec<Finding>,
) -> Result<Option<PdView>, PdError> {
    let var = |k: &str| ev::get(env, k).map(|v| v.to_string_lossy().into_owned());
    devices_and_gid(e, p, facts, env, findings)?;
    // A --kv-transfer-config that is not JSON is the capability check's refusal.
    let kv = read.json(Opt::KvTransferConfig).cloned();
    if kv.as_ref().and_then(|j| j.get("kv_role")).and_then(|r| r.as_str()) == Some("kv_both") {
        findings.push(Finding::info(
            "pd-kv-both",
            "kv_role kv_both: a MIXED worker to the router (infera's wrapper maps kv_both to MIXED), not a prefill or decode pod",
        ));
    }
    let Some(role) = role(e, read, p) else { return Ok(None) };
    let nodes = group.map_or(1, |g| g.size);
    // What the wrapper publishes; a rank that does not register: the pod's IP.
    let published = advertised.map(str::to_string).or_else(|| var(ev::POD_IP).filter(|h| !h.trim().is_empty()));
    let pd = e.info().pd;
    let value = |o: Opt| p.value(o);
    let var_of = |k: &str| var(k);
    if nodes > 1 {
        for (what, host) in (pd.own_addresses)(kv.as_ref(), &var_of, role != Role::Decode) {
            if unreachable_host(&host) {
                return Err(PdError::Bootstrap { what, host, nodes });
            }
        }
    }
    // The wrapper registers the advertised host with the bootstrap port, whatever the
    // connector's own settings.
    let port = (pd.bootstrap_port)(&var_of, &value).unwrap_or(8998);
    let (host, transfer) = (published, (pd.transfer)(kv.as_ref(), &value));
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

/// The transfer of a vLLM connector, as infera's `_CONNECTOR_TO_PROTOCOL` names it
/// (a MultiConnector's first child that has one).
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
