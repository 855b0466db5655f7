//! Name resolution for the leader wait, without glibc's name service: a static glibc binary
//! must not call `getaddrinfo` (it would dlopen NSS modules of another glibc). So this reads
//! the pod's `/etc/hosts` and `/etc/resolv.conf` and asks its nameservers over UDP, as the
//! resolver would: the search list first for names with fewer dots than `ndots` (a pod's
//! resolv.conf has `ndots:5`, so `leader-0.lws.ns` is tried as `leader-0.lws.ns.<search>`
//! first), A then AAAA records.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<IpAddr>,
    pub search: Vec<String>,
    pub ndots: usize,
    pub timeout: Duration,
}

impl ResolvConf {
    pub fn parse(text: &str) -> ResolvConf {
        let mut c =
            ResolvConf { nameservers: Vec::new(), search: Vec::new(), ndots: 1, timeout: Duration::from_secs(2) };
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with(['#', ';'])) {
            let mut w = line.split_whitespace();
            match w.next() {
                Some("nameserver") => {
                    if let Some(ip) = w.next().and_then(|a| a.parse().ok()) {
                        if c.nameservers.len() < 3 {
                            c.nameservers.push(ip);
                        }
                    }
                }
                Some("search" | "domain") => c.search = w.map(|d| d.trim_end_matches('.').to_string()).collect(),
                Some("options") => {
                    for o in w {
                        if let Some(n) = o.strip_prefix("ndots:").and_then(|n| n.parse::<usize>().ok()) {
                            c.ndots = n.min(15);
                        }
                        if let Some(n) = o.strip_prefix("timeout:").and_then(|n| n.parse::<u64>().ok()) {
                            c.timeout = Duration::from_secs(n).clamp(Duration::from_secs(1), Duration::from_secs(30));
                        }
                    }
                }
                _ => {}
            }
        }
        if c.nameservers.is_empty() {
            c.nameservers.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        c
    }

    /// The names to ask for, in order (the resolver's search rules).
    pub fn candidates(&self, name: &str) -> Vec<String> {
        if let Some(abs) = name.strip_suffix('.') {
            return vec![abs.to_string()];
        }
        let searched: Vec<String> = self.search.iter().map(|d| format!("{name}.{d}")).collect();
        let dots = name.matches('.').count();
        let mut out = Vec::new();
        if dots >= self.ndots {
            out.push(name.to_string());
            out.extend(searched);
        } else {
            out.extend(searched);
            out.push(name.to_string());
        }
        out
    }
}

/// The addresses `/etc/hosts` gives a name.
pub fn from_hosts(text: &str, name: &str) -> Vec<IpAddr> {
    let name = name.trim_end_matches('.');
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let ip: IpAddr = w.next()?.parse().ok()?;
            w.any(|n| n.eq_ignore_ascii_case(name)).then_some(ip)
        })
        .collect()
}

/// What one round of lookups found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(IpAddr),
    /// The reason of the last answer (`NXDOMAIN from 10.96.0.10`, `no answer from …`).
    NotYet(String),
}

/// One round: the literal, `/etc/hosts`, then every candidate name at every nameserver.
pub fn lookup(name: &str, conf: &ResolvConf, hosts: &str) -> Lookup {
    if let Ok(ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Lookup::Found(ip);
    }
    if let Some(ip) = from_hosts(hosts, name).first() {
        return Lookup::Found(*ip);
    }
    let mut why = String::from("no nameserver answered");
    for cand in conf.candidates(name) {
        for ns in &conf.nameservers {
            for qtype in [1u16, 28] {
                match query(*ns, &cand, qtype, conf.timeout) {
                    Ok(Answer::Addr(ip)) => return Lookup::Found(ip),
                    Ok(Answer::NxDomain) => {
                        why = format!("NXDOMAIN for `{cand}` from {ns}");
                        break; // no AAAA either
                    }
                    Ok(Answer::NoData) => why = format!("no address for `{cand}` from {ns}"),
                    Err(e) => why = format!("no answer from {ns}: {e}"),
                }
            }
        }
    }
    Lookup::NotYet(why)
}

enum Answer {
    Addr(IpAddr),
    NxDomain,
    NoData,
}

fn query(ns: IpAddr, name: &str, qtype: u16, timeout: Duration) -> std::io::Result<Answer> {
    let bind: SocketAddr = if ns.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }
        .map_err(|_| std::io::Error::other("bind address"))?;
    let sock = UdpSocket::bind(bind)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.connect(SocketAddr::new(ns, 53))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let id = (std::process::id() as u16) ^ (nanos as u16) ^ qtype;
    let q = encode(id, name, qtype).ok_or_else(|| std::io::Error::other(format!("`{name}` is not a DNS name")))?;
    sock.send(&q)?;
    let mut buf = [0u8; 1500];
    let deadline = Instant::now() + timeout;
    loop {
        let n = sock.recv(&mut buf)?;
        if let Some(a) = decode(&buf[..n], id, qtype) {
            return Ok(a);
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"));
        }
    }
}

/// A query: header (recursion desired), one question.
fn encode(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        if label.len() > 63 {
            return None;
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    if q.len() > 12 + 255 {
        return None;
    }
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    Some(q)
}

/// The answer to query `id` (None: not it, or malformed).
fn decode(m: &[u8], id: u16, qtype: u16) -> Option<Answer> {
    if m.len() < 12 || u16::from_be_bytes([m[0], m[1]]) != id || m[2] & 0x80 == 0 {
        return None;
    }
    match m[3] & 0x0f {
        0 => {}
        3 => return Some(Answer::NxDomain),
        _ => return Some(Answer::NoData),
    }
    let qd = u16::from_be_bytes([m[4], m[5]]);
    let an = u16::from_be_bytes([m[6], m[7]]);
    let mut at = 12;
    for _ in 0..qd {
        at = skip_name(m, at)? + 4;
    }
    for _ in 0..an {
        at = skip_name(m, at)?;
        let rr = m.get(at..at + 10)?;
        let (t, len) = (u16::from_be_bytes([rr[0], rr[1]]), usize::from(u16::from_be_bytes([rr[8], rr[9]])));
        let data = m.get(at + 10..at + 10 + len)?;
        at += 10 + len;
        match (t, len) {
            (1, 4) if qtype == 1 => {
                return Some(Answer::Addr(IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3]))))
            }
            (28, 16) if qtype == 28 => {
                let b: [u8; 16] = data.try_into().ok()?;
                return Some(Answer::Addr(IpAddr::V6(Ipv6Addr::from(b))));
            }
            _ => {} // a CNAME or another type: the address records follow it
        }
    }
    Some(Answer::NoData)
}

/// Past a (possibly compressed) name.
fn skip_name(m: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *m.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

/// Wait until `name` resolves or `timeout` passes, logging progress. Ok: the address and
/// how long it took; Err: the last reason.
pub fn wait(name: &str, resolv_conf: &Path, hosts: &Path, timeout: Duration) -> Result<(IpAddr, Duration), String> {
    let start = Instant::now();
    let read = |p: &Path| crate::rootfs::read_bounded(p, 1 << 20).map(|b| String::from_utf8_lossy(&b).into_owned());
    let mut pause = Duration::from_millis(250);
    let mut logged = Instant::now() - Duration::from_secs(3600);
    loop {
        // Re-read each round: a pod's files are written by the kubelet and may change.
        let conf = ResolvConf::parse(&read(resolv_conf).unwrap_or_default());
        match lookup(name, &conf, &read(hosts).unwrap_or_default()) {
            Lookup::Found(ip) => return Ok((ip, start.elapsed())),
            Lookup::NotYet(why) => {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(why);
                }
                if logged.elapsed() >= Duration::from_secs(5) {
                    tracing::warn!(
                        code = "leader-wait",
                        "waiting for the leader `{name}` to resolve ({why}); {} s of {} s",
                        waited.as_secs(),
                        timeout.as_secs()
                    );
                    logged = Instant::now();
                }
                std::thread::sleep(pause.min(timeout.saturating_sub(waited)));
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_resolv_conf() {
        let c = ResolvConf::parse(
            "search infera.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
        );
        assert_eq!(c.nameservers, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(c.ndots, 5);
        assert_eq!(
            c.candidates("kimi-0.kimi.infera"),
            [
                "kimi-0.kimi.infera.infera.svc.cluster.local",
                "kimi-0.kimi.infera.svc.cluster.local",
                "kimi-0.kimi.infera.cluster.local",
                "kimi-0.kimi.infera"
            ]
        );
        assert_eq!(
            c.candidates("a.b.c.d.e.f"),
            [
                "a.b.c.d.e.f",
                "a.b.c.d.e.f.infera.svc.cluster.local",
                "a.b.c.d.e.f.svc.cluster.local",
                "a.b.c.d.e.f.cluster.local"
            ]
        );
        assert_eq!(c.candidates("abs.name."), ["abs.name"]);
        assert_eq!(
            from_hosts("127.0.0.1 localhost\n10.1.2.3 leader leader.ns # x\n", "leader.ns"),
            vec!["10.1.2.3".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn wire_format() {
        let q = encode(0x1234, "a.bc", 1).unwrap();
        assert_eq!(q, [0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'a', 2, b'b', b'c', 0, 0, 1, 0, 1]);
        // A response: the question echoed, a CNAME then an A record.
        let mut r = q.clone();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = 2;
        r.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 30, 0, 2, 0xc0, 12]);
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 0, 0, 7]);
        assert!(matches!(decode(&r, 0x1234, 1), Some(Answer::Addr(ip)) if ip == "10.0.0.7".parse::<IpAddr>().unwrap()));
        assert!(decode(&r, 0x9999, 1).is_none(), "another query's answer");
        r[3] = 0x83;
        assert!(matches!(decode(&r, 0x1234, 1), Some(Answer::NxDomain)));
        assert!(decode(&r[..5], 0x1234, 1).is_none());
    }
}
