//! Rendering a plan: text for people, JSON (the README's stable fields) for machines.
//! Only the plan goes to stdout; refusals also go to stderr.

use std::ffi::OsStr;
use std::fmt::Write;

use crate::plan::Plan;
use crate::spec::{is_secret, ExecSpec, Step, REDACTED};
use crate::term::shell_quote;
use infera_facts::finding::Level;

/// `writeln!` to a String, which cannot fail.
macro_rules! w {
    ($($t:tt)*) => {{
        let _ = writeln!($($t)*);
    }};
}

/// The plan as JSON; Err: why it cannot be (a bug: every path and argument is rendered,
/// UTF-8 or not).
pub(crate) fn json(plan: &Plan) -> Result<String, String> {
    serde_json::to_string_pretty(plan).map_err(|e| e.to_string())
}

/// A JSON answer as YAML (`-o yaml`): the same document, JSON its one source.
pub(crate) fn yaml(json: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    serde_saphyr::to_string(&v).map_err(|e| e.to_string())
}

/// A JSON answer in the format asked for: pretty JSON, or YAML.
pub(crate) fn structured(json: String, as_yaml: bool) -> Result<String, String> {
    match as_yaml {
        true => yaml(&json),
        false => Ok(json + "\n"),
    }
}

/// `refusal_row`: the refusal as the plan's last row (left out where stderr, which says it
/// with its hint, goes to the same place).
pub(crate) fn text(plan: &Plan, check: bool, refusal_row: bool) -> String {
    let mut o = String::new();
    let f = &plan.facts;
    w!(o, "infera-exec {} plan{}", plan.role, if plan.error.is_some() { " (refused)" } else { "" });
    // The router uses no GPU: their count is no fact of its plan.
    image_section(&mut o, f, plan.role != crate::choices::Role::Server.name());
    match f.host {
        Some(h) => host_section(&mut o, h),
        None if check => w!(o, "  host      unknown (capabilities, memlock and devices are read only with --root /)"),
        None => {}
    }
    match f.node {
        Some(n) => node_section(&mut o, n),
        None if check => w!(o, "  node      unknown (read at --root /, or given with --node FILE|PART[:N])"),
        None => {}
    }
    if let Some(e) = &plan.engine {
        w!(o, "  engine    {} {} → module {}", e.name, e.version.as_deref().unwrap_or("(not installed)"), e.module);
    }
    if let (Some(fam), Some(tree)) = (&plan.family, &plan.tree) {
        w!(o, "  tree      {fam} ({})", tree.display());
    }
    if check || plan.capabilities.iter().any(|c| c.requested) {
        capability_table(&mut o, &plan.capabilities);
    }
    if let Some(x) = &plan.exec {
        exec_section(&mut o, x);
    }
    for fi in &plan.findings {
        finding_line(&mut o, fi);
    }
    if let Some(e) = plan.error.as_ref().filter(|_| refusal_row) {
        w!(o, "  refused   [{}] exit {}: {}", e.code, e.exit.code(), e.message);
    }
    o
}

/// What the image is: its Python, ROCm release and HIP ABI, torch, and the GPUs.
fn image_section(o: &mut String, f: &infera_facts::FactsView, gpus: bool) {
    if let Some(i) = f.image {
        let manifest = i.manifest_digest.as_deref().map(|d| format!("manifest {d}, ")).unwrap_or_default();
        let n = i.layers.len();
        w!(
            o,
            "  image     {} ({manifest}config {}, {n} layer{})",
            i.reference,
            i.config_digest,
            if n == 1 { "" } else { "s" }
        );
    }
    if let Some(py) = f.python {
        w!(o, "  python    {} at {} (from {})", py.version, py.executable.display(), py.evidence.join(", "));
    }
    if let Some(r) = f.rocm {
        match &r.release {
            Some(rel) => w!(o, "  rocm      {} (from {})", rel.version, rel.source),
            None => w!(o, "  rocm      release not recorded"),
        }
        let hip = r.hip.version.as_deref().map_or_else(String::new, |v| format!(" = HIP {v}"));
        w!(o, "  hip       ABI {}{hip} (from {})", r.hip.major, r.hip.source);
    }
    if let Some(t) = f.torch {
        w!(o, "  torch     {} (hip {})", t.version.as_deref().unwrap_or("?"), t.hip.as_deref().unwrap_or("none"));
    }
    for lib in f.gpu_code {
        let code = match &lib.targets {
            Ok(c) if c.bundles == 0 => c.processors.iter().cloned().collect::<Vec<_>>().join(", "),
            Ok(c) => format!(
                "{} ({} bundle{}{})",
                c.processors.iter().cloned().collect::<Vec<_>>().join(", "),
                c.bundles,
                if c.bundles == 1 { "" } else { "s" },
                if c.sampled { " read, more not" } else { "" }
            ),
            Err(e) => format!("unreadable: {e}"),
        };
        w!(o, "  gpu code  {:<10} {code} (`{}`)", lib.package, lib.path.display());
    }
    for m in f.models.iter().filter_map(|m| match m {
        infera_facts::model::ModelFacts::Known(m) => Some(m),
        _ => None,
    }) {
        let size = m.weights.as_ref().map(|w| format!("{} ({})", crate::plan::memory::gib(w.bytes), w.source));
        let fs = m.filesystem.as_ref().map(|f| format!("on {} ({})", f.fstype, f.mount_point.display()));
        if size.is_some() || fs.is_some() {
            let parts: Vec<String> = [size, fs].into_iter().flatten().collect();
            w!(o, "  model     {}: {}", m.reference, parts.join(" "));
        }
    }
    if gpus {
        let gpus = f.gpus.map_or_else(|| "unknown".to_string(), |g| g.to_string());
        w!(o, "  gpus      {gpus} ({})", f.gpus_source);
    }
}

/// A finding as the plan's text shows it.
pub(crate) fn finding_line(o: &mut String, fi: &infera_facts::finding::Finding) {
    let lvl = match (fi.level, &fi.accepted) {
        (Level::Warn, Some(_)) => "accepted",
        (Level::Info, _) => "info",
        (Level::Warn, None) => "warn",
    };
    w!(o, "  {lvl:<9} [{}] {}", fi.code, fi.message);
    if let Some(by) = &fi.accepted {
        w!(o, "            accepted by {by}");
    }
}

/// This process (root `/` only): memlock, capability sets, device access.
fn host_section(o: &mut String, h: &infera_facts::host::Host) {
    // A set is summarised when it is all of them or another set (the JSON has each in full).
    let mut every: Vec<String> = caps::all().iter().map(ToString::to_string).collect();
    every.sort();
    let list = |v: &[String], same: Option<(&str, &[String])>| {
        let missing: Vec<&str> = every.iter().filter(|c| !v.contains(c)).map(String::as_str).collect();
        match (v.len(), same) {
            (0, _) => "none".to_string(),
            (_, Some((name, other))) if v == other => format!("= {name}"),
            _ if missing.is_empty() => format!("all {}", v.len()),
            (n, _) if missing.len() <= 5 => format!("all but {} ({n} of {})", missing.join(","), every.len()),
            _ => v.join(","),
        }
    };
    let memlock = h.memlock.map_or_else(|| "unlimited".to_string(), |b| format!("{} KiB", b / 1024));
    w!(o, "  memlock   {memlock}");
    let c = &h.caps;
    w!(o, "  caps      effective {}", list(&c.effective, None));
    w!(o, "            bounding  {}", list(&c.bounding, Some(("effective", &c.effective))));
    w!(o, "            ambient   {}", list(&c.ambient, None));
    let d = &h.devices;
    let groups: Vec<String> = d.groups.iter().map(u32::to_string).collect();
    w!(
        o,
        "  devices   /dev/kfd {}, {} render nodes; this process: uid {}, groups {}",
        if h.kfd { "present" } else { "absent" },
        h.render_nodes,
        d.uid,
        if groups.is_empty() { "none".to_string() } else { groups.join(",") }
    );
    for n in &d.nodes {
        let state = match &n.reason {
            None => "can open (read-write)".to_string(),
            Some(r) => format!("CANNOT OPEN: {r}"),
        };
        w!(o, "            {:<20} {:<18} {state}", n.path.display(), n.mode);
    }
}

/// The node judged against: its GPUs, driver, memory, /dev/shm, RDMA devices.
pub(crate) fn node_section(o: &mut String, d: &infera_facts::node::NodeFacts) {
    if !d.live {
        w!(o, "  node      {}", d.source);
    }
    if !d.gpus.is_empty() {
        let list: Vec<String> = d
            .gpus
            .iter()
            .map(|g| {
                let render = g.render_minor.map(|m| format!(" renderD{m}")).unwrap_or_default();
                let vram = g.vram.map(|b| format!(" {}", crate::plan::memory::gib(b))).unwrap_or_default();
                let part: Vec<&str> =
                    [g.compute_partition.as_deref(), g.memory_partition.as_deref()].into_iter().flatten().collect();
                let part = if part.is_empty() { String::new() } else { format!(" {}", part.join("/")) };
                format!("node {} {}{render}{vram}{part}", g.node, g.gfx.as_deref().unwrap_or("gfx?"))
            })
            .collect();
        w!(o, "  gpu arch  {}", list.join(", "));
    }
    let kernel = d.kernel.as_deref().unwrap_or("?");
    let driver = match (&d.driver, d.driver_loaded) {
        (Some(v), _) => format!("amdgpu {v} (/sys/module/amdgpu/version), kernel {kernel}"),
        (None, true) => format!("the kernel's own amdgpu (kernel {kernel}; no /sys/module/amdgpu/version)"),
        (None, false) => format!("no amdgpu driver loaded on this node (no /sys/module/amdgpu; kernel {kernel})"),
    };
    if d.live || d.driver.is_some() {
        w!(o, "  driver    {driver}");
    }
    if let Some(n) = &d.name {
        w!(o, "  name      {n}");
    }
    if let Some(p) = &d.product {
        w!(o, "  product   {p}");
    }
    // Whose pod, where it is not the one this runs in (a profile's reader, the worker's options).
    let pod = if d.live || d.pod.source.is_empty() { String::new() } else { format!(" ({})", d.pod.source) };
    if let Some(m) = &d.pod.memory {
        let gib = crate::plan::memory::gib;
        let limit = match m.limit {
            Some(l) => format!("limit {}, {} used ({})", gib(l), gib(m.usage.unwrap_or(0)), m.source),
            None => format!("no limit ({})", m.source),
        };
        let node = m.host_available.map_or_else(|| "unknown".to_string(), gib);
        w!(o, "  memory    pod {limit}; node MemAvailable {node}{pod}");
    }
    if d.live || !d.rdma_devices.is_empty() {
        w!(o, "  rdma      {} RDMA devices", d.rdma_devices.len());
    }
    if let Some(s) = d.pod.shm {
        w!(
            o,
            "  shm       /dev/shm {} ({} free){pod}",
            crate::plan::memory::gib_or_mib(s.size),
            crate::plan::memory::gib_or_mib(s.available)
        );
    }
}

/// Each capability: requested, provided, usable, which copy the child imports, and why.
fn capability_table(o: &mut String, rows: &[crate::plan::caps::CapRow]) {
    if rows.is_empty() {
        return; // a plan refused before its tree was read: no table to show
    }
    w!(o, "  capabilities:");
    w!(o, "    {:<12} {:<10} {:<9} {:<7} {:<6} why", "name", "requested", "provided", "usable", "copy");
    for c in rows {
        let usable = match c.usable {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        let why = c
            .reason
            .clone()
            .or_else(|| c.requested_by.clone().map(|b| format!("requested by {b}")))
            .unwrap_or_default();
        // Which copy the child imports: the tree's, or the engine image's own.
        let copy = match c.import.as_ref().map(|i| i.copy) {
            Some(crate::plan::caps::Copy::Tree) => "tree",
            Some(crate::plan::caps::Copy::Base) => "image",
            None => "-",
        };
        w!(o, "    {:<12} {:<10} {:<9} {:<7} {:<6} {}", c.name, yn(c.requested), yn(c.provided), usable, copy, why);
    }
}

/// The one line a start logs at the default level: what runs, from where, with which
/// interpreter, and what the launcher added to the args and why (the findings that say
/// `added ...`).
pub(crate) fn start_line(plan: &Plan, x: &ExecSpec) -> String {
    let mut o = String::new();
    let _ = match &plan.engine {
        Some(e) => write!(o, "{} {} ({})", e.name, e.version.as_deref().unwrap_or("?"), e.module),
        None => write!(o, "{}", plan.role),
    };
    if let (Some(fam), Some(tree)) = (&plan.family, &plan.tree) {
        let _ = write!(o, " from tree {fam} ({})", tree.display());
    }
    if let Some(py) = plan.facts.python {
        let _ = write!(o, " with {} {}", py.executable.display(), py.version);
    }
    if let Some(g) = &plan.group {
        let _ = write!(o, ", rank {} of {}", g.rank, g.size);
    }
    if x.added_args.is_empty() {
        o.push_str("; nothing added to the args");
    } else {
        let added: Vec<String> = x.added_args.iter().map(|a| shell_quote(a)).collect();
        let why: Vec<String> = plan
            .findings
            .iter()
            .filter(|f| f.message.starts_with("added "))
            .map(|f| format!("[{}] {}", f.code, f.message))
            .collect();
        let _ = write!(o, "; added {} ({})", added.join(" "), why.join("; "));
    }
    if let Some(p) = &x.prefetch {
        let _ = write!(
            o,
            "; reading ahead of the engine's loader: {} file{}, {}",
            p.files.len(),
            if p.files.len() == 1 { "" } else { "s" },
            crate::plan::memory::gib(p.bytes)
        );
    }
    o
}

/// Every step the real run takes, in the order it takes them.
fn exec_section(o: &mut String, x: &ExecSpec) {
    for step in &x.steps {
        match step {
            Step::AwaitLeader { host, timeout_seconds, .. } => {
                w!(o, "  wait      until the leader `{host}` resolves (at most {timeout_seconds} s; then refused, 66)")
            }
            Step::Patch { engine, argv, timeout_seconds, .. } => {
                let cmd: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
                w!(o, "  patch     {engine}: {} (in /, at most {timeout_seconds} s; a failure warns)", cmd.join(" "));
            }
            Step::Replace { from, to, .. } => {
                w!(o, "  replace   {} with {} (a failure warns)", to.display(), from.display())
            }
        }
    }
    let p = &x.privileges;
    if let Some(k) = &p.keep_caps {
        let names: Vec<String> = k.iter().map(|c| c.to_string()).collect();
        w!(o, "  caps kept {}", if names.is_empty() { "none".to_string() } else { names.join(",") });
    }
    if p.no_new_privs {
        w!(o, "  privs     no_new_privs set before exec");
    }
    match &x.cwd {
        Some(d) => w!(o, "  cwd       {}", d.display()),
        None => w!(o, "  cwd       unchanged"),
    }
    let cmd: Vec<String> = x.argv.iter().map(|a| shell_quote(a)).collect();
    w!(o, "  exec      {}", cmd.join(" "));
    if let Some(h) = &x.host_program {
        w!(o, "  host file {}", h.display());
    }
    if let Some(i) = &x.init {
        let grace = i.grace_seconds.map_or_else(|| "no".to_string(), |g| format!("{g} s"));
        w!(
            o,
            "  init      yes: the launcher stays as init (reaps, forwards signals to the {}; SIGKILL grace: {grace})",
            if i.group { "process group" } else { "child" }
        );
    }
    let value = |k: &OsStr, v: &OsStr| {
        if is_secret(&k.to_string_lossy()) {
            REDACTED.to_string()
        } else {
            shell_quote(v)
        }
    };
    for k in &x.env_set {
        if let Some(v) = x.env.get(OsStr::new(k)) {
            w!(o, "  env       {k}={}", value(OsStr::new(k), v));
        }
    }
    let kept: Vec<String> = x
        .env
        .keys()
        .filter(|k| !x.env_set.iter().any(|s| OsStr::new(s) == *k))
        .map(|k| k.to_string_lossy().into_owned())
        .collect();
    if !kept.is_empty() {
        w!(o, "  env kept  {} variables as the pod set them: {}", kept.len(), kept.join(" "));
    }
    if !x.added_args.is_empty() {
        let added: Vec<String> = x.added_args.iter().map(|a| shell_quote(a)).collect();
        w!(o, "  added     {}", added.join(" "));
    }
}

fn yn(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
