//! The node's network as a multi-node or PD run needs it: the interfaces and their
//! addresses (the process's own network namespace, read with `--root /` only, from netlink:
//! no name service is called), and the RDMA devices with the GID a Mooncake run would use.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use serde::Serialize;

use infera_core::rootfs::Root;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Iface {
    pub name: String,
    pub addrs: Vec<IpAddr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IbDevice {
    pub name: String,
    /// port → the GID at `MC_GID_INDEX` (None: that index does not exist on the port).
    pub gids: BTreeMap<u32, Option<String>>,
}

/// The interfaces of this network namespace with their addresses.
pub fn interfaces() -> Option<Vec<Iface>> {
    let all = nix::ifaddrs::getifaddrs().ok()?;
    let mut out: Vec<Iface> = Vec::new();
    for a in all {
        let ip = a.address.as_ref().and_then(|s| {
            s.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        });
        let entry = match out.iter_mut().find(|i| i.name == a.interface_name) {
            Some(e) => e,
            None => {
                out.push(Iface { name: a.interface_name.clone(), addrs: Vec::new() });
                out.last_mut()?
            }
        };
        if let Some(ip) = ip {
            if !entry.addrs.contains(&ip) {
                entry.addrs.push(ip);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Some(out)
}

/// `/sys/class/infiniband/*`, with each port's GID at `gid_index` when one is asked for.
pub fn infiniband(root: &Root, gid_index: Option<u32>) -> Vec<IbDevice> {
    let base = Path::new("/sys/class/infiniband");
    let mut names: Vec<String> = root.list(base).into_iter().filter_map(|n| n.into_string().ok()).collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let mut gids = BTreeMap::new();
            if let Some(idx) = gid_index {
                let ports = base.join(&name).join("ports");
                for p in root.list(&ports).into_iter().filter_map(|n| n.to_str()?.parse::<u32>().ok()) {
                    let gid = root
                        .read_small_string(&ports.join(p.to_string()).join("gids").join(idx.to_string()))
                        .ok()
                        .map(|g| g.trim().to_string());
                    gids.insert(p, gid);
                }
            }
            IbDevice { name, gids }
        })
        .collect()
}

/// Is this address unusable as what another node connects to (a wildcard or loopback)?
pub fn unreachable_host(host: &str) -> bool {
    let h = host.trim().trim_start_matches('[').trim_end_matches(']');
    if h.eq_ignore_ascii_case("localhost") || h.is_empty() {
        return true;
    }
    match h.parse::<IpAddr>() {
        Ok(ip) => ip.is_unspecified() || ip.is_loopback(),
        Err(_) => false,
    }
}

/// A GID that RDMA across nodes cannot use: all zeros (unset) or link-local (fe80::/64,
/// the one a RoCE v1 / IPv6-link-local entry carries).
pub fn unusable_gid(gid: &str) -> Option<&'static str> {
    let hex: String = gid.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    if hex.len() != 32 {
        return Some("not a GID");
    }
    if hex.bytes().all(|b| b == b'0') {
        return Some("all zeros (unset)");
    }
    if hex.to_ascii_lowercase().starts_with("fe80") {
        return Some("link-local");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_gids() {
        for h in ["0.0.0.0", "127.0.0.1", "127.1.2.3", "::", "::1", "[::1]", "localhost", ""] {
            assert!(unreachable_host(h), "{h}");
        }
        for h in ["10.0.0.5", "leader-0.lws.ns", "fd00::5"] {
            assert!(!unreachable_host(h), "{h}");
        }
        assert_eq!(unusable_gid("fe80:0000:0000:0000:0225:9dff:fe36:f7ff"), Some("link-local"));
        assert_eq!(unusable_gid("0000:0000:0000:0000:0000:0000:0000:0000"), Some("all zeros (unset)"));
        assert_eq!(unusable_gid("0000:0000:0000:0000:0000:ffff:0a00:0005"), None);
        assert_eq!(unusable_gid("garbage"), Some("not a GID"));
    }
}
