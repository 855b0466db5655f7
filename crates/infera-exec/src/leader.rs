//! The leader wait of a rank > 0: until the leader's name resolves (the name a headless
//! Service gives the leader pod exists only once that pod has an IP), with the standard
//! library's resolver — musl's, in the static binary: /etc/hosts, then the nameservers of
//! /etc/resolv.conf with its search list, `ndots`, `timeout` and `attempts`. Each try runs on
//! a helper thread, so the one deadline and the signals that end the wait are looked at
//! while it runs; a try still running at the deadline is left behind (the exec ends it).

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Waits up to the given time for a signal that ends the wait; its number, or None.
pub(crate) type Stop<'a> = &'a dyn Fn(Duration) -> Option<i32>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// The deadline passed; the resolver's last answer.
    TimedOut(String),
    /// A signal that ends the wait arrived (its number).
    Stopped(i32),
}

/// Why `address` cannot be a leader's address (an IP literal or a host name as a resolver
/// checks it: labels of letters, digits, `-` and `_`, at most 63 bytes each and 253 in
/// all), or None when it can. Said before anything waits on it: a port or junk would
/// otherwise fail only once the leader wait is over.
pub(crate) fn not_a_leader_address(address: &str) -> Option<String> {
    if address.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
        return None;
    }
    if let Some((host, port)) = address.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()) {
        return Some(format!(
            "has a port (`:{port}`): the leader's address is a host (`{host}`); the port the ranks meet on is the engine's own option"
        ));
    }
    let name = address.trim_end_matches('.');
    if name.split('.').any(str::is_empty) {
        return Some("has an empty label: no resolver sends such a name".into());
    }
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

/// Wait until `name` resolves or `timeout` passes, saying why at the first answer that is not
/// an address, then every 5 s. Between tries
/// (each as long as the resolver's own timeouts) a pause of 250 ms, doubling to 2 s. Ok: the
/// address (IPv4 first, as the engines connect) and how long it took.
pub(crate) fn wait(name: &str, timeout: Duration, stop: Stop) -> Result<(IpAddr, Duration), Unresolved> {
    let start = Instant::now();
    let deadline = start + timeout;
    let (tx, rx) = mpsc::channel::<Result<Vec<IpAddr>, String>>();
    let (mut asking, mut next, mut pause) = (false, start, Duration::from_millis(250));
    let mut last = String::from("no answer in time");
    let mut logged: Option<Instant> = None;
    loop {
        if !asking && Instant::now() >= next {
            asking = ask(name, tx.clone());
        }
        if let Ok(answer) = rx.try_recv() {
            match answer.map(|ips| ips.iter().find(|i| i.is_ipv4()).or(ips.first()).copied()) {
                Ok(Some(ip)) => return Ok((ip, start.elapsed())),
                Ok(None) => last = "no address".into(),
                Err(why) => last = why,
            }
            asking = false;
            next = Instant::now() + pause;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Unresolved::TimedOut(last));
        }
        // Said at the first answer that is not the address, then every 5 s.
        if !asking && logged.is_none_or(|l| now.duration_since(l) >= Duration::from_secs(5)) {
            tracing::warn!(
                code = "leader-wait",
                "waiting for the leader `{name}` to resolve ({last}); {} s of {} s",
                now.duration_since(start).as_secs(),
                timeout.as_secs()
            );
            logged = Some(now);
        }
        if let Some(sig) = stop(Duration::from_millis(50).min(deadline - now)) {
            return Err(Unresolved::Stopped(sig));
        }
    }
}

/// One try on a helper thread; its answer is sent back. False when no thread can be made
/// (then the next round tries again).
fn ask(name: &str, tx: mpsc::Sender<Result<Vec<IpAddr>, String>>) -> bool {
    let name = name.to_string();
    let resolve = move || {
        let answer = (name.as_str(), 0).to_socket_addrs().map(|a| a.map(|s| s.ip()).collect()).map_err(|e| {
            let why = e.to_string();
            why.strip_prefix("failed to lookup address information: ").map_or(why.clone(), str::to_string)
        });
        let _ = tx.send(answer);
    };
    std::thread::Builder::new().name("resolve".into()).spawn(resolve).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_literal_and_localhost_resolve_at_once_and_a_stop_ends_the_wait() {
        let never = |_: Duration| None;
        let (ip, _) = wait("127.0.0.1", Duration::from_secs(5), &never).unwrap();
        assert_eq!(ip, IpAddr::from([127, 0, 0, 1]));
        let stop = |_: Duration| Some(15);
        assert_eq!(wait("leader.invalid", Duration::from_secs(60), &stop), Err(Unresolved::Stopped(15)));
    }
}
