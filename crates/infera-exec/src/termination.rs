//! A refusal also goes where Kubernetes shows it: the container's termination message file
//! (`/dev/termination-log`, which the kubelet bind-mounts into every container), so that
//! `kubectl describe pod` and `kubectl get pod -o yaml` say why the pod stopped. Written only
//! when the file exists and is writable: the launcher never creates files in /dev, and
//! outside Kubernetes there is nothing to write. `INFERA_TERMINATION_LOG` names another file
//! (a pod spec's `terminationMessagePath`); empty turns it off.

use std::io::Write;

use infera_core::error::Refusal;
use infera_facts::envvars::{self as ev, Env};

pub(crate) const DEFAULT_PATH: &str = "/dev/termination-log";
/// The kubelet keeps at most 4096 bytes of a container's message.
pub(crate) const MAX_BYTES: usize = 4096;

/// The message: short and complete (code, exit code, what, what to do), within the kubelet's limit.
pub(crate) fn message(r: &Refusal) -> String {
    let mut s =
        format!("infera-exec refused [{}] (exit {}): {}", r.code, r.exit.code(), infera_core::term::safe(&r.message));
    if let Some(h) = &r.hint {
        s.push_str("\nhint: ");
        s.push_str(&infera_core::term::safe(h));
    }
    s.push('\n');
    if s.len() > MAX_BYTES {
        let mut end = MAX_BYTES - 4;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...\n");
    }
    s
}

/// Write the refusal to the termination message file, if there is one to write.
pub(crate) fn write(r: &Refusal, env: &Env) {
    let path = match ev::get(env, ev::INFERA_TERMINATION_LOG) {
        Some(v) if v.is_empty() => return,
        Some(v) => std::path::PathBuf::from(v),
        None => std::path::PathBuf::from(DEFAULT_PATH),
    };
    // Never created, never followed through a link in any component, never blocking on a FIFO.
    let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::TRUNC;
    if let Ok(mut f) = infera_core::nofollow::open_regular(&path, flags) {
        let _ = f.write_all(message(r).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infera_core::error::Exit;

    fn refusal(msg: &str) -> Refusal {
        Refusal {
            code: "kv-cache-fp8-mla".into(),
            message: msg.into(),
            hint: Some("drop it".into()),
            exit: Exit::Refused,
        }
    }

    #[test]
    fn short_complete_bounded() {
        assert_eq!(
            message(&refusal("fp8 KV with MLA crashes")),
            "infera-exec refused [kv-cache-fp8-mla] (exit 78): fp8 KV with MLA crashes\nhint: drop it\n"
        );
        let long = message(&refusal(&"é".repeat(5000)));
        assert!(long.len() <= MAX_BYTES && long.ends_with("...\n"), "{}", long.len());
    }

    #[test]
    fn written_only_into_an_existing_file() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("termination-log");
        let env = |p: &std::path::Path| Env::from([(ev::INFERA_TERMINATION_LOG.into(), p.as_os_str().to_owned())]);
        write(&refusal("x"), &env(&log));
        assert!(!log.exists(), "never created");
        std::fs::write(&log, "old text that is longer than the message, all of it replaced").unwrap();
        write(&refusal("x"), &env(&log));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "infera-exec refused [kv-cache-fp8-mla] (exit 78): x\nhint: drop it\n"
        );
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        std::fs::write(&log, "").unwrap();
        write(&refusal("y"), &env(&link));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "", "not through a link");
        let linked_dir = d.path().join("dir");
        std::os::unix::fs::symlink(d.path(), &linked_dir).unwrap();
        write(&refusal("z"), &env(&linked_dir.join("termination-log")));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "", "not through a link in a directory component");
    }
}
