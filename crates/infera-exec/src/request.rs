//! The command line, high level: what the pod asked for, every value validated, from
//! either form. The command form's `python3 -m infera.engine.<engine> ARGS` becomes the same
//! request as `worker --engine <engine> -- ARGS`; `-m infera.server` the same as `server`;
//! anything else a `run` of that program with the selected tree's environment. Reads no
//! file: the overlay is found and `--image-env` read at launch.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::choices::Prefetch;
use crate::choices::Role;
use crate::cli::{Options, Output};
use crate::error::UsageError;
use crate::error::MAX_GRACE_SECONDS;
use crate::spec::{InitSpec, Privileges};
use infera_core::rootfs::parse_minor;
use infera_facts::engines::Engine;
use infera_facts::envvars::{self as ev, Env};
use infera_overlay::manifest::SERVER_MODULE;

/// What the run execs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The role's module of the selected tree, run by the image's interpreter (subcommands).
    RoleModule,
    /// `python … -m MODULE`, as the command wrote it.
    Module { interpreter: OsString, options: Vec<OsString>, module: String },
    /// Any other program, found on the image's PATH (or in the tree's bin/).
    Program { program: OsString },
}

impl Target {
    /// The interpreter the command names (not for plain `python3`/`python`, which is the default search).
    pub(crate) fn interpreter(&self) -> Option<&OsStr> {
        match self {
            Target::Module { interpreter, .. } => Some(interpreter),
            _ => None,
        }
    }
}

/// A capability the pod requires, and who requires it (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Required {
    pub name: String,
    pub by: &'static str,
}

/// `INFERA_VERIFY`: check the selected tree against its integrity record before exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    Off,
    Size,
    Digest,
}

/// This pod's place in a multi-node group (LeaderWorkerSet's variables, or the launcher's
/// own options for clusters without it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// Nodes (pods) in the group, the leader included.
    pub size: u32,
    /// This node's rank: 0 is the leader.
    pub rank: u32,
    /// The leader's address (a name that resolves once the leader pod has an IP).
    pub leader: Option<String>,
    /// Where the three came from, for messages (`LWS_GROUP_SIZE=2, LWS_WORKER_INDEX=1`).
    pub source: String,
    /// Seconds a rank > 0 waits for the leader's name to resolve.
    pub leader_wait: u64,
}

/// What the pod asked for, resolved from argv and environment, every value validated.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub role: Role,
    pub target: Target,
    /// The engine asked for (`--engine`, or the command form's module); None: the one the image has.
    pub engine: Option<Engine>,
    pub require: Vec<Required>,
    /// `INFERA_REQUIRE_NATIVE=1|true|all`: everything the native tree carries.
    pub require_all_native: bool,
    pub family: Option<String>,
    pub allow: Vec<String>,
    /// The args after the module or program (`--` ARGS of the subcommands).
    pub args: Vec<OsString>,
    pub root: PathBuf,
    /// Container paths read from local directories instead (`--volume PATH=DIR`).
    pub volumes: Vec<(PathBuf, PathBuf)>,
    /// `--image-env` as given (files or KEY=VALUE: the image's own environment, over the
    /// launcher's, with --root) and how the user named it; read at launch.
    pub image_env: Vec<OsString>,
    pub image_env_said: String,
    /// `--env-file`, as given: files of the variables the pod sets.
    pub env_files: Vec<OsString>,
    /// `--env`, as given (applied after the files): variables the pod sets.
    pub pod_env: Vec<OsString>,
    /// `--overlay`; None: found at launch (`overlay::discover`).
    pub overlay: Option<PathBuf>,
    /// `INFERA_PYTHON`: the interpreter, overriding the command's.
    pub python: Option<OsString>,
    /// The working directory of the program (None: the launcher's own).
    pub chdir: Option<PathBuf>,
    pub skip_engine_patches: bool,
    pub engine_patch_timeout: u64,
    pub dry_run: bool,
    pub output: Output,
    pub init: Option<InitSpec>,
    pub privileges: Privileges,
    pub verify: Verify,
    /// The multi-node group this pod is a rank of (None: a single node).
    pub group: Option<Group>,
    /// `--wait-model`: how long a real run waits for an absent model path to appear.
    pub wait_model: Option<ModelWait>,
    /// `--prefetch`: the launcher's own read-ahead of the weights.
    pub prefetch: Prefetch,
    /// `check --fail-on`: what fails the gate.
    pub fail_on: crate::choices::FailOn,
    /// `check --image`: the image read from its archive instead of `root`.
    pub image: crate::cli::ImageArgs,
    /// `--node`: the nodes judged against (empty: this node at root `/`, else none).
    pub node: Vec<String>,
    /// With `--node`: the worker's pod as `--shm-size` and `--memory` give it (what is not
    /// given is not judged).
    pub worker_pod: infera_facts::node::Pod,
    /// Why each code of `allow` is accepted: the option or variable, or the file's line and
    /// its reason.
    pub allow_why: BTreeMap<String, String>,
}

/// The worker's pod on a `--node`: its /dev/shm and memory limit as the options give them.
fn worker_pod(shm: Option<crate::cli::Size>, memory: Option<crate::cli::Size>) -> infera_facts::node::Pod {
    let said: Vec<String> = [("--shm-size", &shm), ("--memory", &memory)]
        .iter()
        .filter_map(|(o, v)| v.as_ref().map(|v| format!("{o} {}", v.said)))
        .collect();
    infera_facts::node::Pod {
        shm: shm.map(|s| infera_facts::host::Shm { size: s.bytes, available: s.bytes }),
        memory: memory.map(|m| infera_facts::storage::PodMemory {
            limit: Some(m.bytes),
            usage: Some(0),
            host_available: None,
            source: format!("--memory {}", m.said),
        }),
        source: if said.is_empty() { String::new() } else { format!("the worker's pod: {}", said.join(", ")) },
    }
}

/// `--wait-model SECONDS` (> 0) and how the user set it, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelWait {
    /// None: until the path appears or a stop signal.
    pub seconds: Option<u64>,
    pub said: String,
}

impl ModelWait {
    /// `up to 600 s`, `until it appears or a SIGTERM`.
    pub(crate) fn how_long(&self) -> String {
        match self.seconds {
            Some(s) => format!("up to {s} s"),
            None => "until it appears or a SIGTERM".into(),
        }
    }
}

/// Who requires a capability given with `--require`.
pub(crate) const REQUIRE_FLAG: &str = "--require";

/// `--allow engine-version`: run an engine version no tree is built for, knowingly.
pub(crate) const ENGINE_VERSION: &str = "engine-version";

/// Refusals besides the rules' that `--allow` may override: judgements a user can know better
/// (an engine version, a GPU override, memory arithmetic), never a missing file or device.
pub(crate) const ALLOWABLE: &[&str] =
    &[ENGINE_VERSION, "gfx-override", "weights-exceed-vram", "kv-cache-no-room", "nats-server-missing"];

/// The group from the launcher's options, else LeaderWorkerSet's variables.
fn group(o: &Options, env: &Env) -> Result<Option<Group>, UsageError> {
    let lws = |k: &'static str| ev::get(env, k).map(|v| (k.to_string(), v.to_string_lossy().into_owned()));
    let said = |long: &str, v: String| (o.said(long), v);
    let e = &o.engine;
    let size = e.nnodes.clone().map(|v| said("nnodes", v)).or_else(|| lws(ev::LWS_GROUP_SIZE));
    let rank = e.node_rank.clone().map(|v| said("node-rank", v)).or_else(|| lws(ev::LWS_WORKER_INDEX));
    let leader = e
        .leader_address
        .clone()
        .map(|v| said("leader-address", v))
        .or_else(|| lws(ev::LWS_LEADER_ADDRESS))
        .filter(|(_, v)| !v.trim().is_empty());
    let ((size_var, size), (rank_var, rank)) = match (size, rank) {
        (None, None) if leader.is_none() => return Ok(None),
        (Some(s), Some(r)) => (s, r),
        (Some((have, _)), None) => {
            return Err(UsageError::GroupPartial { have, missing: "the node rank (LWS_WORKER_INDEX, --node-rank)" })
        }
        (None, Some((have, _))) => {
            return Err(UsageError::GroupPartial { have, missing: "the group size (LWS_GROUP_SIZE, --nnodes)" })
        }
        (None, None) => {
            let have = leader.map_or_else(|| "the leader's address".to_string(), |(k, _)| k);
            return Err(UsageError::GroupPartial {
                have,
                missing: "the group size and the node rank (LWS_GROUP_SIZE, LWS_WORKER_INDEX)",
            });
        }
    };
    let num = |var: &str, v: &str| -> Result<u32, UsageError> {
        let bad = |why| UsageError::GroupValue { var: var.to_string(), value: v.to_string(), why };
        match infera_facts::dialect::py_int(v) {
            Ok(Some(n)) if n < 0 => Err(bad("is negative: a group size or rank counts from 0")),
            Ok(Some(n)) => u32::try_from(n).map_err(|_| bad("is larger than any group of nodes")),
            _ => Err(bad("is not a whole number")),
        }
    };
    let (n, r) = (num(&size_var, &size)?, num(&rank_var, &rank)?);
    // The launcher's own setting wins over LeaderWorkerSet's, but one that contradicts it
    // plans a group LeaderWorkerSet did not make: every rank would wait on a rank that
    // never comes.
    let ours = [(&e.nnodes, &size_var, ev::LWS_GROUP_SIZE, n), (&e.node_rank, &rank_var, ev::LWS_WORKER_INDEX, r)];
    for (mine, said, theirs, value) in ours {
        let Some((var, lws_value)) = mine.as_ref().and(lws(theirs)) else { continue };
        if num(&var, &lws_value).ok() != Some(value) {
            let sep = if said.starts_with("--") { " " } else { "=" };
            return Err(UsageError::GroupContradiction {
                said: format!("{said}{sep}{value}"),
                lws: format!("{var}={lws_value}"),
            });
        }
    }
    let source_ = format!("{size_var}={size}, {rank_var}={rank}");
    if n == 0 {
        return Err(UsageError::GroupValue {
            var: size_var,
            value: size,
            why: "is no group: a group has at least 1 node",
        });
    }
    if r >= n {
        return Err(UsageError::RankOutOfRange { rank: r, size: n, source_ });
    }
    if let Some((var, v)) = leader.as_ref() {
        if let Some(why) = crate::leader::not_a_leader_address(v.trim()) {
            return Err(UsageError::LeaderInvalid { var: var.clone(), value: v.clone(), why });
        }
    }
    let leader = leader.map(|(_, v)| v.trim().to_string());
    if n > 1 && leader.is_none() {
        return Err(UsageError::NoLeader { size: n, source_ });
    }
    Ok(Some(Group { size: n, rank: r, leader, source: source_, leader_wait: e.leader_wait }))
}

/// The warning codes a pod may accept: every `warn` row of docs/findings.md (a test holds
/// that page to the codes the sources say).
fn warning_codes() -> Vec<&'static str> {
    include_str!("../../../docs/findings.md")
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split(" | ");
            let code = cells.next()?.strip_suffix('`')?;
            (cells.next()? == "warn").then_some(code)
        })
        .collect()
}

/// `--allow` / INFERA_ALLOW and `--allow-file`: the codes accepted (rule codes, the
/// judgements of `ALLOWABLE`, warnings), each checked, with why each is (`by`, a reason).
fn allowed(o: &Options) -> Result<(Vec<String>, BTreeMap<String, String>), UsageError> {
    let said = o.said("allow");
    let mut why: BTreeMap<String, String> = BTreeMap::new();
    let mut allow = clean(o.common.allow.clone());
    for code in &allow {
        why.insert(code.clone(), said.clone());
    }
    if let Some(path) = &o.common.allow_file {
        let file_said = o.said("allow-file");
        let bad = |reason: String| UsageError::AllowFile { said: file_said.clone(), path: path.clone(), reason };
        let bytes =
            infera_core::rootfs::read_bounded(path, 1 << 20).map_err(|e| bad(infera_core::rootfs::io_reason(&e)))?;
        let text = String::from_utf8(bytes).map_err(|_| bad("is not UTF-8 text".into()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (code, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let reason = reason.trim().trim_start_matches('#').trim();
            let by = format!("{file_said} {}:{}", path.display(), n + 1);
            let by = if reason.is_empty() { by } else { format!("{by}: {reason}") };
            if !allow.iter().any(|a| a == code) {
                allow.push(code.to_string());
            }
            why.entry(code.to_string()).or_insert(by);
        }
    }
    // (The rules are parsed only when something names one.)
    let warnings = warning_codes();
    let known = |x: &str| crate::rule_table::codes().contains(&x) || ALLOWABLE.contains(&x) || warnings.contains(&x);
    if let Some(name) = allow.iter().find(|x| !known(x)) {
        let mut rules: Vec<String> = crate::rule_table::codes().iter().map(|r| r.to_string()).collect();
        rules.extend(ALLOWABLE.iter().map(|c| c.to_string()));
        let said = why.get(name).cloned().unwrap_or(said);
        return Err(UsageError::AllowUnknown { said, name: name.clone(), rules, warnings });
    }
    Ok((allow, why))
}

/// The capabilities required (`--require`, then the stack's INFERA_REQUIRE_NATIVE), each
/// with who requires it, and whether everything the native tree carries is.
fn required(o: &Options) -> (Vec<Required>, bool) {
    let require_said: &'static str = if o.said("require") == REQUIRE_FLAG { REQUIRE_FLAG } else { ev::INFERA_REQUIRE };
    let mut require: Vec<Required> =
        clean(o.common.require.clone()).into_iter().map(|name| Required { name, by: require_said }).collect();
    let (native, all) = parse_require_native(o.common.require_native.as_deref());
    for name in native {
        if !require.iter().any(|r| r.name == name) {
            require.push(Required { name, by: ev::INFERA_REQUIRE_NATIVE });
        }
    }
    (require, all)
}

/// `net_bind_service,CAP_KILL` → the set, sorted; `none` (or empty) → keep nothing.
pub(crate) fn parse_caps(list: &[String], said: &str) -> Result<Vec<caps::Capability>, UsageError> {
    use std::str::FromStr;
    let mut keep = Vec::new();
    for name in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none")) {
        let cap = caps::Capability::from_str(&caps::to_canonical(name))
            .map_err(|_| UsageError::DropCaps { said: said.to_string(), name: name.to_string() })?;
        if !keep.contains(&cap) {
            keep.push(cap);
        }
    }
    keep.sort_by_key(|c| c.to_string());
    Ok(keep)
}

/// `--volume PATH=DIR`: an absolute container path and a directory of this host.
fn volumes(given: &[OsString], said: &str) -> Result<Vec<(PathBuf, PathBuf)>, UsageError> {
    let mut out = Vec::new();
    for v in given.iter().filter(|v| !v.is_empty()) {
        let b = v.as_bytes();
        let split = b.iter().position(|c| *c == b'=').map(|i| (&b[..i], &b[i + 1..]));
        match split.map(|(p, d)| (PathBuf::from(OsStr::from_bytes(p)), PathBuf::from(OsStr::from_bytes(d)))) {
            Some((path, dir)) if path.is_absolute() && path != Path::new("/") && !dir.as_os_str().is_empty() => {
                out.push((path, dir));
            }
            _ => return Err(UsageError::Volume { said: said.to_string(), value: v.to_string_lossy().into_owned() }),
        }
    }
    Ok(out)
}

/// `INFERA_REQUIRE_NATIVE` as the Infera stack reads it: (names, everything?).
pub(crate) fn parse_require_native(value: Option<&str>) -> (Vec<String>, bool) {
    let v = value.unwrap_or("").trim();
    match v.to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "none" => (Vec::new(), false),
        "1" | "true" | "all" => (Vec::new(), true),
        _ => (clean(v.split([',', ' ', '\t']).map(String::from).collect()), false),
    }
}

/// Trimmed, without empties and duplicates, in order.
fn clean(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

impl Request {
    /// A subcommand (`worker`, `server`, `check`) and its `--` args.
    pub(crate) fn resolve(role: Role, o: Options, args: Vec<OsString>, env: &Env) -> Result<Request, UsageError> {
        Request::build(role, Target::RoleModule, o.engine.engine.engine(), o, args, env)
    }

    /// The command form: PROGRAM ARGS as the pod spec wrote them.
    pub(crate) fn from_command(o: Options, command: Vec<OsString>, env: &Env) -> Result<Request, UsageError> {
        let mut words = command.into_iter();
        let program = words.next().unwrap_or_default();
        let rest: Vec<OsString> = words.collect();
        let Some((options, module, args)) = python_module(&program, &rest) else {
            return Request::build(Role::Run, Target::Program { program }, o.engine.engine.engine(), o, rest, env);
        };
        let (role, engine) = match infera_facts::engines::TABLE.iter().find(|i| i.module == module) {
            Some(info) => {
                if let Some(e) = o.engine.engine.engine().filter(|e| *e != info.engine) {
                    return Err(UsageError::EngineConflict { module, module_engine: info.name, engine: e.name() });
                }
                (Role::Worker, Some(info.engine))
            }
            None if module == SERVER_MODULE => (Role::Server, o.engine.engine.engine()),
            None => (Role::Run, o.engine.engine.engine()),
        };
        Request::build(role, Target::Module { interpreter: program, options, module }, engine, o, args, env)
    }

    fn build(
        role: Role,
        target: Target,
        engine: Option<Engine>,
        o: Options,
        args: Vec<OsString>,
        env: &Env,
    ) -> Result<Request, UsageError> {
        let x = &o.exec;
        let grace = match x.init_grace.as_deref().map(|t| (t, t.trim().parse::<f64>())) {
            None => None,
            Some((_, Ok(g))) if (0.0..=MAX_GRACE_SECONDS).contains(&g) => Some(g),
            Some((text, _)) => return Err(UsageError::InitGrace { said: o.said("init-grace"), value: text.into() }),
        };
        let init = x.init.then_some(InitSpec { group: x.init_group, grace_seconds: grace });
        let group = group(&o, env)?;
        let c = &o.common;
        let keep_caps = c.drop_caps.as_deref().map(|l| parse_caps(l, &o.said("drop-caps"))).transpose()?;
        let (allow, allow_why) = allowed(&o)?;
        let verify = match ev::get(env, ev::INFERA_VERIFY).map(|v| v.to_string_lossy()).as_deref() {
            None | Some("" | "off" | "0") => Verify::Off,
            Some("size") => Verify::Size,
            Some("digest") => Verify::Digest,
            Some(other) => return Err(UsageError::Verify { value: other.to_string() }),
        };
        // The image's WORKDIR (/app, /sgl-workspace) can hold a copy of infera or of the
        // engine that `python -m` would put first on sys.path: run in `/` unless told otherwise.
        let chdir = match c.chdir.clone().map(PathBuf::from) {
            None => Some(PathBuf::from("/")),
            Some(d) if d.as_os_str().is_empty() => None,
            Some(d) if d.is_absolute() => Some(d),
            Some(dir) => return Err(UsageError::ChdirRelative { said: o.said("chdir"), dir }),
        };
        check_only(role, &o)?;
        let (require, require_all_native) = required(&o);
        let volumes = volumes(&c.volume, &o.said("volume"))?;
        let image_env_said = o.said("image-env");
        let wait_model = (o.exec.wait_model.0 != Some(0))
            .then(|| ModelWait { seconds: o.exec.wait_model.0, said: o.said("wait-model") });
        let Options { common: c, engine: e, exec: x, image, .. } = o;
        Ok(Request {
            role,
            target,
            engine,
            require,
            require_all_native,
            family: c.family.filter(|f| !f.is_empty()),
            allow,
            allow_why,
            args,
            root: c.root,
            volumes,
            image_env: c.image_env,
            image_env_said,
            env_files: c.env_file,
            pod_env: c.pod_env,
            overlay: c.overlay,
            python: c.python.filter(|p| !p.is_empty()),
            chdir,
            skip_engine_patches: e.skip_engine_patches,
            engine_patch_timeout: e.engine_patch_timeout,
            dry_run: x.dry_run || role == Role::Check,
            output: c.output,
            init,
            privileges: Privileges { keep_caps, no_new_privs: c.no_new_privs },
            verify,
            group,
            wait_model,
            prefetch: e.prefetch.into(),
            fail_on: match image.fail_on {
                crate::cli::FailOnChoice::Refusal => crate::choices::FailOn::Refusal,
                crate::cli::FailOnChoice::Warn => crate::choices::FailOn::Warn,
            },
            image,
            worker_pod: worker_pod(c.shm_size, c.memory),
            node: c.node,
        })
    }

    /// The interpreter to look for in the image: INFERA_PYTHON, else the one the command
    /// names (plain `python3` / `python` is the default search anyway).
    pub(crate) fn interpreter(&self) -> Option<&OsStr> {
        self.python.as_deref().or_else(|| self.target.interpreter().filter(|i| !matches!(i.as_bytes(), b"python3")))
    }
}

/// `--family all` and `--output junit` judge images for CI: `check`'s, never a run's.
fn check_only(role: Role, o: &Options) -> Result<(), UsageError> {
    if role == Role::Check {
        return Ok(());
    }
    match (o.common.node.as_slice(), o.exec.dry_run) {
        ([], _) => {}
        ([first, ..], false) => return Err(UsageError::NodeRunOnly { value: first.clone() }),
        ([_, _, ..], true) => return Err(UsageError::NodeMany),
        ([_], true) => {}
    }
    if o.common.family.as_deref() == Some(crate::cli::ALL_FAMILIES) {
        return Err(UsageError::CheckOnly { said: o.said("family"), value: crate::cli::ALL_FAMILIES.into() });
    }
    match o.common.output {
        crate::cli::Output::Junit => Err(UsageError::CheckOnly { said: o.said("output"), value: "junit".into() }),
        crate::cli::Output::Affinity => Err(UsageError::CheckOnly { said: o.said("output"), value: "affinity".into() }),
        _ => Ok(()),
    }
}

/// Is `program` a CPython interpreter (`python`, `python3`, `python3.12`, a path to one)?
fn is_python(program: &OsStr) -> bool {
    let name = Path::new(program).file_name().and_then(OsStr::to_str).unwrap_or("");
    name == "python" || name == "python3" || parse_minor(name).is_some_and(|(major, _)| major == 3)
}

/// `python [OPTIONS] -m MODULE ARGS` → (interpreter options, module, ARGS). None when the
/// interpreter runs something else (`-c`, a script, `--version`): then it is a plain program.
/// CPython's options: flags `bBdEhiIOPqRsStuvVx`, with a value `W` and `X` (joined or not).
fn python_module(program: &OsStr, rest: &[OsString]) -> Option<(Vec<OsString>, String, Vec<OsString>)> {
    if !is_python(program) {
        return None;
    }
    let mut options = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_bytes();
        if !a.starts_with(b"-") || a.starts_with(b"--") || a.len() < 2 {
            return None;
        }
        let mut j = 1;
        while j < a.len() {
            match a[j] {
                b'm' => {
                    if j > 1 {
                        options.push(OsStr::from_bytes(&a[..j]).to_os_string());
                    }
                    let (module, next) = if j + 1 < a.len() {
                        (OsStr::from_bytes(&a[j + 1..]).to_os_string(), i + 1)
                    } else {
                        (rest.get(i + 1)?.clone(), i + 2)
                    };
                    let module = module.into_string().ok().filter(|m| infera_overlay::manifest::is_dotted_module(m))?;
                    return Some((options, module, rest[next.min(rest.len())..].to_vec()));
                }
                b'W' | b'X' => {
                    options.push(rest[i].clone());
                    if j + 1 == a.len() {
                        i += 1;
                        options.push(rest.get(i)?.clone());
                    }
                    break;
                }
                c if b"bBdEhiIOPqRsStuvVx".contains(&c) => j += 1,
                _ => return None,
            }
        }
        if j == a.len() {
            options.push(rest[i].clone());
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn python_module_forms() {
        let m = |p: &str, rest: &[&str]| python_module(OsStr::new(p), &os(rest));
        assert_eq!(
            m("python3", &["-m", "infera.engine.vllm", "--model", "/m"]),
            Some((vec![], "infera.engine.vllm".into(), os(&["--model", "/m"])))
        );
        assert_eq!(
            m("/usr/bin/python3.12", &["-u", "-X", "dev", "-W", "ignore", "-minfera.kvd", "-x"]),
            Some((os(&["-u", "-X", "dev", "-W", "ignore"]), "infera.kvd".into(), os(&["-x"])))
        );
        assert_eq!(m("python", &["-uBm", "infera.server"]), Some((os(&["-uB"]), "infera.server".into(), vec![])));
        assert_eq!(m("python3", &["-c", "print(1)"]), None);
        assert_eq!(m("python3", &["script.py", "-m", "x"]), None);
        assert_eq!(m("python3", &["-m"]), None);
        assert_eq!(m("python3", &["-m", "../evil"]), None);
        assert_eq!(m("ray", &["-m", "x"]), None);
        assert_eq!(m("python3-config", &["-m", "x"]), None);
    }

    #[test]
    fn require_native_as_the_stack_reads_it() {
        assert_eq!(parse_require_native(Some("mooncake hipfile")), (os_s(&["mooncake", "hipfile"]), false));
        assert_eq!(parse_require_native(Some("mooncake,hipfile , mooncake")), (os_s(&["mooncake", "hipfile"]), false));
        for all in ["1", "true", "ALL"] {
            assert_eq!(parse_require_native(Some(all)), (vec![], true));
        }
        for none in [None, Some(""), Some("0"), Some(" ")] {
            assert_eq!(parse_require_native(none), (vec![], false));
        }
    }

    fn os_s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }
}
