//! Name resolution for the leader wait, without glibc's name service: a static glibc binary
//! must not call `getaddrinfo` (it would dlopen NSS modules of another glibc). So this reads
//! the pod's `/etc/hosts` and `/etc/resolv.conf` and asks its nameservers over UDP, as the
//! resolver would: the search list first for names with fewer dots than `ndots` (a pod's
//! resolv.conf has `ndots:5`, so `leader-0.lws.ns` is tried as `leader-0.lws.ns.<search>`
//! first), A then AAAA records.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
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
    /// The reason of the last answer (`NXDOMAIN from 10.96.0.10`, `no answer from …`);
    /// None when the deadline came before any nameserver was asked.
    NotYet(Option<String>),
    /// A signal that ends the wait arrived (its number).
    Stopped(i32),
}

/// Waits up to the given time for a signal that ends the wait; its number, or None.
pub type Stop<'a> = &'a dyn Fn(Duration) -> Option<i32>;

/// A name with an empty label (`a..b`, `.a`), which no resolver sends (a final dot only
/// makes a name absolute).
pub fn has_empty_label(name: &str) -> bool {
    name.trim_end_matches('.').split('.').any(str::is_empty)
}

/// Why `address` cannot be a leader's address (an IP literal or a host name as glibc's
/// resolver checks it: labels of letters, digits, `-` and `_`, at most 63 bytes each and
/// 253 in all), or None when it can. Said before anything waits on it: a port or junk would
/// otherwise fail only once the leader wait is over.
pub fn not_a_leader_address(address: &str) -> Option<String> {
    if address.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
        return None;
    }
    if let Some((host, port)) = address.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()) {
        return Some(format!(
            "has a port (`:{port}`): the leader's address is a host (`{host}`); the port the ranks meet on is the engine's own option"
        ));
    }
    if has_empty_label(address) {
        return Some("has an empty label: no resolver sends such a name".into());
    }
    let name = address.trim_end_matches('.');
    let bad = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
    match bad {
        Some(c) => {
            Some(format!("is not a host name or an IP address (`{}` is not allowed in a name)", c.escape_default()))
        }
        None if name.len() > 253 || name.split('.').any(|l| l.len() > 63) => {
            Some("is not a host name (longer than 253 bytes, or a label longer than 63)".into())
        }
        None => None,
    }
}

/// One round: the literal, `hosts` (what /etc/hosts gives the name), then every candidate
/// name at every nameserver, each query given what is left of `deadline`.
pub fn lookup(name: &str, conf: &ResolvConf, hosts: Option<IpAddr>, deadline: Instant, stop: Stop) -> Lookup {
    if let Ok(ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Lookup::Found(ip);
    }
    if let Some(ip) = hosts {
        return Lookup::Found(ip);
    }
    let mut why = None;
    for cand in conf.candidates(name) {
        for ns in &conf.nameservers {
            for qtype in [RecordType::A, RecordType::AAAA] {
                let until = deadline.min(Instant::now() + conf.timeout);
                if until <= Instant::now() {
                    return Lookup::NotYet(why);
                }
                match query(*ns, &cand, qtype, until, stop) {
                    Ok(Answer::Addr(ip)) => return Lookup::Found(ip),
                    Ok(Answer::Stopped(sig)) => return Lookup::Stopped(sig),
                    Ok(Answer::NxDomain) => {
                        why = Some(format!("NXDOMAIN for `{cand}` from {ns}"));
                        break; // no AAAA either
                    }
                    Ok(Answer::NoData) => why = Some(format!("no address for `{cand}` from {ns}")),
                    Err(e) => why = Some(format!("no answer from {ns}: {e}")),
                }
            }
        }
    }
    Lookup::NotYet(why)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Addr(IpAddr),
    NxDomain,
    NoData,
    Stopped(i32),
}

/// One query (hickory-proto writes and reads the messages), waiting until `until` for the
/// reply to it: an answer with another id, another question, or that is not a response is
/// not the reply, as glibc's resolver ignores it.
fn query(ns: IpAddr, name: &str, qtype: RecordType, until: Instant, stop: Stop) -> std::io::Result<Answer> {
    let invalid = || std::io::Error::other(format!("`{name}` is not a DNS name"));
    if has_empty_label(name) {
        return Err(invalid());
    }
    // Absolute, as the resolver sends it.
    let qname = Name::from_ascii(format!("{}.", name.trim_end_matches('.'))).map_err(|_| invalid())?;
    let bind: SocketAddr = if ns.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }
        .map_err(|_| std::io::Error::other("bind address"))?;
    let sock = UdpSocket::bind(bind)?;
    sock.connect(SocketAddr::new(ns, 53))?;
    let question = Query::query(qname, qtype);
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(question.clone());
    let id = msg.metadata.id;
    sock.send(&msg.to_vec().map_err(|_| invalid())?)?;
    let mut buf = [0u8; 1500];
    loop {
        if let Some(sig) = stop(Duration::ZERO) {
            return Ok(Answer::Stopped(sig));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"));
        }
        // In slices, so that a signal is acted on within one.
        sock.set_read_timeout(Some(left.min(Duration::from_millis(200))))?;
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e),
        };
        if let Some(a) = read_reply(&buf[..n], id, &question) {
            return Ok(a);
        }
    }
}

/// A datagram read as the reply to query `id` asking `question`, or None when it is not that
/// reply (undecodable, another id, not a response, another question).
pub fn read_reply(datagram: &[u8], id: u16, question: &Query) -> Option<Answer> {
    let reply = Message::from_vec(datagram).ok()?;
    let m = &reply.metadata;
    if m.id != id || m.message_type != MessageType::Response || reply.queries.as_slice() != [question.clone()] {
        return None;
    }
    Some(answer(&reply, question.name(), question.query_type()))
}

/// The address for `qname` in a reply: a record of its owner name, or of the name a CNAME
/// chain in the answer leads to (records for any other name are not the answer).
fn answer(reply: &Message, qname: &Name, qtype: RecordType) -> Answer {
    match reply.metadata.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Answer::NxDomain,
        _ => return Answer::NoData,
    }
    let mut want = qname.clone();
    for _ in 0..reply.answers.len() {
        let mut next = None;
        for rr in reply.answers.iter().filter(|rr| rr.name == want) {
            match (&rr.data, qtype) {
                (RData::A(a), RecordType::A) => return Answer::Addr(IpAddr::V4(a.0)),
                (RData::AAAA(a), RecordType::AAAA) => return Answer::Addr(IpAddr::V6(a.0)),
                (RData::CNAME(c), _) => next = Some(c.0.clone()),
                _ => {}
            }
        }
        match next {
            Some(n) => want = n,
            None => break,
        }
    }
    Answer::NoData
}

/// The first address `/etc/hosts` gives `name`, read a line at a time, so a file of any size
/// is read to its end; a line longer than 64 KiB (no hosts line is) is passed over.
pub fn hosts_entry(root: &crate::rootfs::Root, hosts: &Path, name: &str) -> Option<IpAddr> {
    use std::io::{BufRead, Read};
    let (file, _) = root.open_file(hosts).ok()?;
    let mut r = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r).take(64 << 10).read_until(b'\n', &mut line).ok()?;
        if n == 0 {
            return None;
        }
        if !line.ends_with(b"\n") && n == 64 << 10 {
            r.skip_until(b'\n').ok()?; // the rest of an over-long line, unbuffered
            continue;
        }
        if let Some(ip) = from_hosts(&String::from_utf8_lossy(&line), name).first() {
            return Some(*ip);
        }
    }
}

/// Why a wait ended without an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The deadline passed; the last reason.
    TimedOut(String),
    /// `stop` gave this signal number (SIGTERM, SIGINT).
    Stopped(i32),
}

/// Wait until `name` resolves or `timeout` passes, logging progress; one deadline across
/// rounds, search names, nameservers and retries. `stop(d)` waits up to `d` for a signal
/// that ends the wait (and is asked between queries). Ok: the address and how long it took.
pub fn wait(
    name: &str,
    root: &crate::rootfs::Root,
    resolv_conf: &Path,
    hosts: &Path,
    timeout: Duration,
    stop: Stop,
) -> Result<(IpAddr, Duration), Unresolved> {
    let start = Instant::now();
    let deadline = start + timeout;
    let read = |p: &Path| root.read_file(p, 64 << 20).map(|b| String::from_utf8_lossy(&b).into_owned());
    let mut pause = Duration::from_millis(250);
    let mut logged = Instant::now() - Duration::from_secs(3600);
    let mut last = String::from("no nameserver was asked in time");
    loop {
        if let Some(sig) = stop(Duration::ZERO) {
            return Err(Unresolved::Stopped(sig));
        }
        // Re-read each round: a pod's files are written by the kubelet and may change.
        let conf = ResolvConf::parse(&read(resolv_conf).unwrap_or_default());
        match lookup(name, &conf, hosts_entry(root, hosts, name), deadline, stop) {
            Lookup::Found(ip) => return Ok((ip, start.elapsed())),
            Lookup::Stopped(sig) => return Err(Unresolved::Stopped(sig)),
            Lookup::NotYet(why) => {
                let why = why.unwrap_or_else(|| last.clone());
                last.clone_from(&why);
                let waited = start.elapsed();
                if Instant::now() >= deadline {
                    return Err(Unresolved::TimedOut(why));
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
                if let Some(sig) = stop(pause.min(deadline.saturating_duration_since(Instant::now()))) {
                    return Err(Unresolved::Stopped(sig));
                }
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

    /// The address is taken for the name asked (or the name its CNAME chain leads to), as
    /// glibc takes it: a record for another name is no answer.
    /// /etc/hosts of any size is read to its end (a line at a time), an over-long line
    /// passed over: here 70 MiB of one line, then the entry.
    #[test]
    fn hosts_of_any_size() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::File::create(&path).unwrap().set_len(70 << 20).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"\n127.0.0.1 localhost\n10.1.2.3 kimi-0.kimi.infera\n").unwrap();
        let root = crate::rootfs::Root::new("/");
        assert_eq!(hosts_entry(&root, &path, "kimi-0.kimi.infera."), Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))));
        assert_eq!(hosts_entry(&root, &path, "other"), None);
    }

    #[test]
    fn leader_addresses_are_names_or_ips_without_a_port() {
        for ok in ["kimi-0.kimi.infera", "kimi-0.kimi.infera.", "10.4.0.9", "fd00::1", "[fd00::1]", "leader_0.x"] {
            assert_eq!(not_a_leader_address(ok), None, "{ok}");
        }
        let why = |a: &str| not_a_leader_address(a).unwrap_or_default();
        assert!(why("kimi-0:5000").starts_with("has a port (`:5000`)"));
        assert!(why("[fd00::1]:29500").starts_with("has a port (`:29500`)"));
        assert!(why("a..b").starts_with("has an empty label"));
        assert!(why("kimi 0").contains("` ` is not allowed"));
        assert!(why(&"a".repeat(64)).contains("a label longer than 63"));
        assert!(why("").starts_with("has an empty label"));
    }

    #[test]
    fn answers_are_for_the_name_asked() {
        use hickory_proto::rr::rdata::{A, CNAME};
        use hickory_proto::rr::Record;
        let name = |s: &str| Name::from_ascii(s).unwrap();
        let reply = |answers: Vec<Record>, code: ResponseCode| {
            let mut m = Message::response(7, hickory_proto::op::OpCode::Query);
            m.metadata.response_code = code;
            m.add_query(Query::query(name("leader.grp."), RecordType::A));
            m.add_answers(answers);
            m
        };
        let a = |owner: &str, ip: [u8; 4]| {
            Record::from_rdata(name(owner), 30, RData::A(A::new(ip[0], ip[1], ip[2], ip[3])))
        };
        let cname = |owner: &str, to: &str| Record::from_rdata(name(owner), 30, RData::CNAME(CNAME(name(to))));
        let q = name("leader.grp.");
        let chain = reply(vec![cname("LEADER.grp.", "pod.grp."), a("pod.grp.", [10, 0, 0, 7])], ResponseCode::NoError);
        assert!(matches!(answer(&chain, &q, RecordType::A), Answer::Addr(ip) if ip == IpAddr::from([10, 0, 0, 7])));
        let other = reply(vec![a("evil.grp.", [6, 6, 6, 6])], ResponseCode::NoError);
        assert!(matches!(answer(&other, &q, RecordType::A), Answer::NoData));
        assert!(matches!(answer(&reply(vec![], ResponseCode::NXDomain), &q, RecordType::A), Answer::NxDomain));
        // An empty label is not a name: never sent.
        let never = |_: Duration| None;
        let e = query(IpAddr::from([127, 0, 0, 1]), "leader-0..grp", RecordType::A, Instant::now(), &never);
        assert!(e.is_err_and(|e| e.to_string().contains("is not a DNS name")));
    }
}
