//! Rendering a plan: text for people, JSON (DESIGN.md stable fields) for machines.
//! Only the plan goes to stdout; refusals also go to stderr.

use std::ffi::OsStr;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;

use crate::finding::Level;
use crate::plan::Plan;

pub fn json(plan: &Plan) -> String {
    serde_json::to_string_pretty(plan)
        .unwrap_or_else(|e| format!("{{\"error\":{{\"code\":\"internal\",\"message\":\"{e}\"}}}}"))
}

/// Quote for a POSIX shell so the printed command can be pasted; non-UTF-8 bytes use
/// bash's `$'\xNN'` form so nothing is lost.
pub fn shell_quote(s: &OsStr) -> String {
    let b = s.as_bytes();
    if !b.is_empty() && b.iter().all(|c| c.is_ascii_alphanumeric() || b"_-./=:,+@%^".contains(c)) {
        return String::from_utf8_lossy(b).into_owned();
    }
    match s.to_str() {
        Some(t) if !t.chars().any(|c| c.is_control()) => format!("'{}'", t.replace('\'', "'\\''")),
        _ => {
            let mut out = String::from("$'");
            for &c in b {
                match c {
                    b'\'' => out.push_str("\\'"),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(c as char),
                    _ => {
                        let _ = write!(out, "\\x{c:02x}");
                    }
                }
            }
            out.push('\'');
            out
        }
    }
}

pub fn text(plan: &Plan, check: bool) -> String {
    let mut o = String::new();
    let f = &plan.facts;
    let _ = writeln!(o, "infera-exec {} plan{}", plan.role, if plan.error.is_some() { " (refused)" } else { "" });
    if let Some(py) = f.get("python").filter(|v| !v.is_null()) {
        let ev: Vec<&str> =
            py["evidence"].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
        let _ = writeln!(
            o,
            "  python    {} at {} (from {})",
            py["version"].as_str().unwrap_or("?"),
            py["executable"].as_str().unwrap_or("?"),
            ev.join(", ")
        );
    }
    if let Some(r) = f.get("rocm").filter(|v| !v.is_null()) {
        let _ = writeln!(
            o,
            "  rocm      {} (from {})",
            r["version"].as_str().unwrap_or("?"),
            r["source"].as_str().unwrap_or("?")
        );
    }
    if let Some(t) = f.get("torch").filter(|v| !v.is_null()) {
        let _ = writeln!(
            o,
            "  torch     {} (hip {})",
            t["version"].as_str().unwrap_or("?"),
            t["hip"].as_str().unwrap_or("none")
        );
    }
    let gpus = f.get("gpus").and_then(|g| g.as_u64()).map(|g| g.to_string()).unwrap_or_else(|| "unknown".into());
    let _ = writeln!(o, "  gpus      {gpus} ({})", f.get("gpus_source").and_then(|s| s.as_str()).unwrap_or(""));
    if let Some(h) = f.get("host").filter(|v| !v.is_null()) {
        let list = |k: &str| -> String {
            let v: Vec<&str> =
                h["caps"][k].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
            if v.is_empty() {
                "-".into()
            } else {
                v.join(",")
            }
        };
        let memlock = h["memlock"].as_u64().map(|b| format!("{} KiB", b / 1024)).unwrap_or_else(|| "unlimited".into());
        let _ = writeln!(o, "  memlock   {memlock}");
        let _ = writeln!(o, "  caps      effective {}", list("effective"));
        let _ = writeln!(o, "            bounding  {}", list("bounding"));
        let _ = writeln!(o, "            ambient   {}", list("ambient"));
        let rdma = h["rdma_devices"].as_array().map(|a| a.len()).unwrap_or(0);
        let _ = writeln!(
            o,
            "  devices   /dev/kfd {}, {} render nodes, {rdma} RDMA devices",
            if h["kfd"] == true { "present" } else { "absent" },
            h["render_nodes"]
        );
    } else if check {
        let _ = writeln!(o, "  host      unknown (capabilities, memlock and devices are read only with --root /)");
    }
    if let Some(e) = &plan.engine {
        let _ = writeln!(
            o,
            "  engine    {} {} → module {}",
            e.name,
            e.version.as_deref().unwrap_or("(not installed)"),
            e.module
        );
    }
    if let (Some(fam), Some(tree)) = (&plan.family, &plan.tree) {
        let _ = writeln!(o, "  tree      {fam} ({})", tree.display());
    }
    if check || plan.capabilities.iter().any(|c| c.requested) {
        let _ = writeln!(o, "  capabilities:");
        let _ = writeln!(o, "    {:<12} {:<10} {:<9} {:<7} why", "name", "requested", "provided", "usable");
        for c in &plan.capabilities {
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
            let _ =
                writeln!(o, "    {:<12} {:<10} {:<9} {:<7} {}", c.name, yn(c.requested), yn(c.provided), usable, why);
        }
    }
    if let Some(x) = &plan.exec {
        let cmd: Vec<String> = x.argv.iter().map(|a| shell_quote(a)).collect();
        let _ = writeln!(o, "  exec      {}", cmd.join(" "));
        for (k, v) in &x.env {
            let _ = writeln!(o, "  env       {}={}", k.to_string_lossy(), shell_quote(v));
        }
        if x.init {
            let _ = writeln!(o, "  init      yes: the launcher stays as init (reaps, forwards signals)");
        }
        if let Some(k) = &x.keep_caps {
            let _ = writeln!(o, "  caps kept {}", if k.is_empty() { "none".to_string() } else { k.join(",") });
        }
        if !x.added_args.is_empty() {
            let added: Vec<String> = x.added_args.iter().map(|a| shell_quote(a)).collect();
            let _ = writeln!(o, "  added     {}", added.join(" "));
        }
    }
    for fi in &plan.findings {
        let lvl = match fi.level {
            Level::Info => "info",
            Level::Warn => "warn",
        };
        let _ = writeln!(o, "  {lvl:<9} [{}] {}", fi.code, fi.message);
    }
    if let Some(e) = &plan.error {
        let _ = writeln!(o, "  refused   [{}] exit {}: {}", e.code, e.exit.code(), e.message);
    }
    o
}

fn yn(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
