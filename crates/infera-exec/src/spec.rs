//! What the exec stage needs, complete: the program, argv, the whole child environment,
//! the working directory, init settings, privilege steps and the steps taken before the
//! exec. `--dry-run` prints exactly this; the exec stage only carries it out.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use infera_facts::ser::{os_json, ser_opt_path, ser_os_vec, ser_path, ser_paths};
use serde::{Serialize, Serializer};

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ExecSpec {
    /// The program, as a container path.
    #[serde(serialize_with = "ser_path")]
    pub program: PathBuf,
    /// With `--root` other than `/`: the host file the real run execs.
    #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
    pub host_program: Option<PathBuf>,
    /// With `--root` other than `/`: the real run's argv[0], the program as named (not
    /// resolved) on this host. CPython finds a venv's `pyvenv.cfg` from argv[0]'s directory:
    /// given the resolved base interpreter it would miss the venv's site-packages.
    #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
    pub host_argv0: Option<PathBuf>,
    #[serde(serialize_with = "ser_os_vec")]
    pub argv: Vec<OsString>,
    /// The child's complete environment (the pod's, with the launcher's changes).
    #[serde(serialize_with = "ser_env")]
    pub env: BTreeMap<OsString, OsString>,
    /// The variables the launcher set or changed (the rest are the pod's as they were).
    pub env_set: Vec<String>,
    /// The args the launcher appended after the user's (each explained by a finding).
    #[serde(serialize_with = "ser_os_vec")]
    pub added_args: Vec<OsString>,
    /// The working directory (container path); None: the launcher's own.
    #[serde(serialize_with = "ser_opt_path")]
    pub cwd: Option<PathBuf>,
    /// With `--root` other than `/`: where that directory is on this host.
    #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
    pub host_cwd: Option<PathBuf>,
    /// `--init`: the launcher stays as PID 1 / subreaper and runs this as its child.
    pub init: Option<InitSpec>,
    pub privileges: Privileges,
    /// Taken in order before the exec.
    pub steps: Vec<Step>,
    /// A multi-node rank: the digest of the engine args every rank of the group must share
    /// (the rank flags left out), also given to the child as `INFERA_ARGS_DIGEST`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_digest: Option<String>,
    /// The launcher's own read-ahead of the weights (`--prefetch`), started just before the
    /// exec (or the child, with `--init`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<PrefetchSpec>,
}

/// A read-ahead of the checkpoint into the page cache, beside the engine: the files in the
/// loader's order, at most `lead_bytes` ahead of where the engine's loader reads, `ranges`
/// reads at once. See `crate::prefetch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PrefetchSpec {
    /// The files, as this launcher opens them (host paths: the container's at root `/`).
    #[serde(serialize_with = "ser_paths")]
    pub files: Vec<PathBuf>,
    pub bytes: u64,
    pub lead_bytes: u64,
    pub ranges: u32,
    /// Read a file only once the engine has it open: FUSE drops a file's cache when it is
    /// opened (without `kernel_cache`), so what was read before would be lost.
    pub after_open: bool,
    /// Start once the engine has opened its first weight file: before, the engine reads its
    /// interpreter and imports, from the same device (the image's root holds the model) or
    /// from storage that keeps up by itself, and reads beside them would slow them.
    pub with_loader: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct InitSpec {
    /// Forward signals to the child's process group instead of the child alone.
    pub group: bool,
    /// After a forwarded SIGTERM: SIGKILL what is left after this many seconds.
    pub grace_seconds: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Privileges {
    /// `--drop-caps`: every Linux capability but these is dropped (None: unchanged).
    #[serde(serialize_with = "ser_caps")]
    pub keep_caps: Option<Vec<caps::Capability>>,
    pub no_new_privs: bool,
}

/// A step of the real run before the exec. Only waiting for the leader can stop the start
/// (a rank that cannot reach it would wait for nothing after loading its weights); any
/// other failure is logged as a warning and the run goes on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum Step {
    /// A rank > 0 waits until the leader's name resolves (the DNS name of a pod exists only
    /// once the pod has an IP; CoreDNS caches the NXDOMAIN a too early rank would get).
    /// (The standard library's resolver reads this process's /etc/hosts and
    /// /etc/resolv.conf: the pod's in a pod, this host's with `--root`.)
    AwaitLeader { host: String, timeout_seconds: u64 },
    /// Run an engine patch of the overlay with the image's interpreter, in `/`, with the
    /// exec's environment, for at most `timeout_seconds` (then it is killed).
    Patch {
        engine: &'static str,
        #[serde(serialize_with = "ser_path")]
        file: PathBuf,
        #[serde(serialize_with = "ser_os_vec")]
        argv: Vec<OsString>,
        /// With `--root` other than `/`: the host file the run execs.
        #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
        host_program: Option<PathBuf>,
        timeout_seconds: u64,
        /// The directory the engine is installed in, `flock`ed while the patch runs: another
        /// start in the same container (a second process, a restart) waits instead of
        /// patching the same files at once. Nothing is created for the lock.
        #[serde(serialize_with = "ser_path")]
        lock: PathBuf,
        #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
        host_lock: Option<PathBuf>,
    },
    /// Put `from` in place of `to` (a copy beside it, renamed over it).
    Replace {
        #[serde(serialize_with = "ser_path")]
        from: PathBuf,
        #[serde(serialize_with = "ser_path")]
        to: PathBuf,
        /// With `--root` other than `/`: the two files on this host.
        #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
        host_from: Option<PathBuf>,
        #[serde(serialize_with = "ser_opt_path", skip_serializing_if = "Option::is_none")]
        host_to: Option<PathBuf>,
        why: String,
    },
}

/// Variables whose values are not printed (tokens pasted into a bug report leak).
pub(crate) fn is_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "API_KEY", "ACCESS_KEY"].iter().any(|s| n.contains(s))
}

pub(crate) const REDACTED: &str = "<redacted>";

fn ser_env<S: Serializer>(m: &BTreeMap<OsString, OsString>, s: S) -> Result<S::Ok, S::Error> {
    let mut out = serde_json::Map::new();
    for (k, v) in m {
        let k = k.to_string_lossy().into_owned();
        let v = if is_secret(&k) { serde_json::Value::String(REDACTED.into()) } else { os_json(v) };
        out.insert(k, v);
    }
    out.serialize(s)
}

fn ser_caps<S: Serializer>(c: &Option<Vec<caps::Capability>>, s: S) -> Result<S::Ok, S::Error> {
    c.as_ref().map(|v| v.iter().map(|c| c.to_string()).collect::<Vec<_>>()).serialize(s)
}
