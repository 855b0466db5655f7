//! Capabilities: what the pod asks for (`--require`, or implied by engine args), whether
//! the selected tree provides it, and whether this node can use it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;
use thiserror::Error;

use super::usable;
use infera_exec_derive::Refuse;
use infera_facts::engines::{Engine, Opt};
use infera_facts::envvars::Env;

use crate::request::Request;
use infera_core::error::Refusal;
use infera_core::names::Dist;
use infera_facts::finding::Finding;
use infera_facts::rocm::Rocm;
use infera_facts::site::SiteIndex;
use infera_facts::Facts;
use infera_overlay::manifest::Prefer;
use infera_overlay::overlay::{Overlay, Presence, Tree};

/// Which copy of a capability's modules the child imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Copy {
    /// The tree's (its own directory, when it has one, goes on PYTHONPATH).
    Tree,
    /// The engine image's own: the tree's, in its own directory, stays off the path.
    Base,
}

/// Where the child imports a capability from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Import {
    pub copy: Copy,
    /// The directory the child finds the capability's package in (container path).
    #[serde(serialize_with = "infera_facts::ser::ser_path")]
    pub from: PathBuf,
    /// The distribution that installed that copy (`mooncake_transfer_engine_rocm 0.3.13.post1`).
    pub dist: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct CapRow {
    pub name: String,
    pub requested: bool,
    /// Why it is requested: `--require`, or the engine flag that implies it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    pub provided: bool,
    /// Whether this node can use it; `null` when not checked.
    pub usable: Option<bool>,
    pub reason: Option<String>,
    /// Which copy the child imports (the tree's or the image's); null when not provided.
    pub import: Option<Import>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub(crate) enum CapError {
    #[error("capability `{name}` (requested by {by}) cannot be supplied: {reason}; trees that provide it: {}", if providers.is_empty() { "none".to_string() } else { providers.join(", ") })]
    #[refuse(
        code = "capability-unavailable",
        exit = Unsupported,
        hint = if known.contains(name) {
            "run the engine image that matches a tree providing it, or drop the requirement".to_string()
        } else {
            format!("known capabilities: {}", known.join(", "))
        }
    )]
    Unavailable { name: String, by: String, reason: String, providers: Vec<String>, known: Vec<String> },
    #[error("{by} names the capability `{name}`, which no tree of this overlay knows; known: {}", known.join(", "))]
    #[refuse(code = "capability-unknown", exit = Usage, hint_opt = hint.clone())]
    Unknown { name: String, by: String, known: Vec<String>, hint: Option<String> },
    #[error("capability `{name}` is provided by the tree but cannot work on this node: {reason}")]
    #[refuse(code = "capability-unusable", exit = Unsupported, hint_opt = hint.clone())]
    Unusable { name: String, reason: String, hint: Option<String> },
    #[error("--kv-transfer-config is not valid UTF-8")]
    #[refuse(code = "kv-transfer-config-invalid", exit = Refused)]
    KvTransferConfigNotUtf8,
    #[error("--kv-transfer-config is not JSON ({reason}): `{text}`")]
    #[refuse(
        code = "kv-transfer-config-invalid",
        exit = Refused,
        hint = "give a JSON object, e.g. '{{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_producer\"}}'"
    )]
    KvTransferConfigNotJson { reason: String, text: String },
}

/// The capabilities a set of engine args implies, with the flag that implies each.
pub(crate) fn implied(
    engine: Engine,
    read: &infera_facts::engine_args::Read,
) -> Result<Vec<(String, String)>, CapError> {
    let (parsed, mut out) = (&read.parsed, Vec::new());
    if let Some(v) = parsed.get(Opt::KvTransferConfig) {
        let text = v.as_str().ok_or(CapError::KvTransferConfigNotUtf8)?;
        serde_json::from_str::<serde_json::Value>(text)
            .map_err(|e| CapError::KvTransferConfigNotJson { reason: e.to_string(), text: text.to_string() })?;
    }
    // The JSON value with vLLM's dotted keys (`--kv-transfer-config.kv_connector X`) merged.
    if let Some(json) = read.json(Opt::KvTransferConfig) {
        let mut connectors = Vec::new();
        collect_connectors(json, &mut connectors);
        if let Some(c) = connectors.iter().find(|c| c.to_ascii_lowercase().contains("mooncake")) {
            out.push(("mooncake".to_string(), format!("{} kv_connector={c}", engine.flag(Opt::KvTransferConfig))));
        }
    }
    // PD transfer: the backend the engine will use (its default when a mode is set).
    let backend = parsed.value(Opt::DisaggregationBackend);
    let pd = matches!(parsed.value(Opt::DisaggregationMode), Some("prefill" | "decode"));
    let default = engine.default_of(Opt::DisaggregationBackend).filter(|_| pd && backend.is_none());
    if backend.or(default) == Some("mooncake") {
        let how = match backend {
            Some(b) => b.to_string(),
            None => format!("mooncake ({}'s default)", engine.name()),
        };
        out.push(("mooncake".to_string(), format!("{} {how}", engine.flag(Opt::DisaggregationBackend))));
    }
    if parsed.value(Opt::HicacheStorageBackend) == Some("mooncake") {
        out.push(("mooncake".to_string(), format!("{} mooncake", engine.flag(Opt::HicacheStorageBackend))));
    }
    Ok(out)
}

fn collect_connectors(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "kv_connector" {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_string());
                    }
                }
                collect_connectors(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_connectors(x, out)),
        _ => {}
    }
}

/// One row per capability the tree declares or the pod requests; refuses the first
/// requested one the tree cannot supply.
pub(crate) fn rows(
    req: &Request,
    overlay: &Overlay,
    tree: &Tree,
    engine: Option<Engine>,
    image_engine: Option<Engine>,
    read: &infera_facts::engine_args::Read,
    copies: &BTreeMap<String, Import>,
) -> Result<Vec<CapRow>, (Vec<CapRow>, Refusal)> {
    let mut requested: Vec<(String, String)> = req.require.iter().map(|r| (r.name.clone(), r.by.to_string())).collect();
    if req.require_all_native {
        // Everything the tree carries; with no native tree at all, that is at least Mooncake
        // (as the stack's launcher reads `all`), which it then cannot supply.
        let all: Vec<String> = match tree.hip {
            Some(_) => tree.manifest.capabilities.keys().cloned().collect(),
            None => vec!["mooncake".to_string()],
        };
        for name in all {
            if !requested.iter().any(|(x, _)| *x == name) {
                requested.push((name, format!("{}=all", infera_facts::envvars::INFERA_REQUIRE_NATIVE)));
            }
        }
    }
    if let Some(e) = engine {
        match implied(e, read) {
            Ok(imp) => {
                for (c, by) in imp {
                    if !requested.iter().any(|(x, _)| *x == c) {
                        requested.push((c, by));
                    }
                }
            }
            Err(err) => return Err((Vec::new(), err.into())),
        }
    }
    let mut names: Vec<String> = tree.manifest.capabilities.keys().cloned().collect();
    for (c, _) in &requested {
        if !names.contains(c) {
            names.push(c.clone());
        }
    }
    let mut rows = Vec::new();
    let mut refusal: Option<Refusal> = None;
    for name in names {
        let by = requested.iter().find(|(c, _)| *c == name).map(|(_, b)| b.clone());
        let (provided, reason) = match provided(tree, &name, image_engine, req.role) {
            Ok(x) => x,
            Err(e) => return Err((rows, e)),
        };
        if let (Some(by), false, None) = (&by, provided, &refusal) {
            refusal = Some(unavailable(overlay, tree, &name, by, reason.clone().unwrap_or_default()).into());
        }
        let import = copies.get(&name).filter(|_| provided).cloned();
        rows.push(CapRow { name, requested: by.is_some(), requested_by: by, provided, usable: None, reason, import });
    }
    match refusal {
        Some(r) => Err((rows, r)),
        None => Ok(rows),
    }
}

fn unavailable(overlay: &Overlay, tree: &Tree, name: &str, by: &str, reason: String) -> CapError {
    let known: BTreeSet<&String> = overlay.trees.iter().flat_map(|t| t.manifest.capabilities.keys()).collect();
    // A name the pod spec wrote that no tree knows at all: a typo, said as one.
    let written = [
        crate::request::REQUIRE_FLAG,
        infera_facts::envvars::INFERA_REQUIRE,
        infera_facts::envvars::INFERA_REQUIRE_NATIVE,
    ];
    if !known.contains(&name.to_string()) && written.contains(&by) {
        return CapError::Unknown {
            name: name.to_string(),
            by: by.to_string(),
            hint: infera_facts::suggest::did_you_mean(name, known.iter().map(|k| k.as_str())),
            known: known.into_iter().cloned().collect(),
        };
    }
    let providers = overlay
        .trees
        .iter()
        .filter(|t| t.family != tree.family)
        .filter_map(|t| t.manifest.capabilities.get(name).map(|c| (t, c)))
        .map(|(t, c)| {
            if c.engines.is_empty() {
                t.family.clone()
            } else {
                format!("{} (for {})", t.family, c.engines.join(", "))
            }
        })
        .collect();
    CapError::Unavailable {
        name: name.to_string(),
        by: by.to_string(),
        reason,
        providers,
        known: known.into_iter().cloned().collect(),
    }
}

/// Is `name` provided by `tree` to `engine`? A path escaping the tree is an error (65).
fn provided(
    tree: &Tree,
    name: &str,
    engine: Option<Engine>,
    role: crate::choices::Role,
) -> Result<(bool, Option<String>), Refusal> {
    let Some(cap) = tree.manifest.capabilities.get(name) else {
        return Ok((false, Some(format!("tree {} does not declare it", tree.family))));
    };
    if !tree.manifest.offers(name, engine.map(Engine::name)) {
        return Ok((
            false,
            Some(format!(
                "tree {} offers it to {} only, not to {}",
                tree.family,
                cap.engines.join(", "),
                engine.map_or(
                    if role == crate::choices::Role::Server {
                        "the router"
                    } else {
                        "a program outside an engine's image"
                    },
                    Engine::name
                )
            )),
        ));
    }
    // Every module and library present inside the tree; the first one absent says why not.
    let modules = cap.modules.iter().map(|m| (tree.module(m), format!("module `{m}`"), tree.site()));
    let libs = cap.libraries.iter().map(|l| (tree.library(l), format!("library `{l}`"), tree.lib()));
    for (presence, what, dir) in modules.chain(libs) {
        match presence {
            Presence::Present => {}
            Presence::Missing => return Ok((false, Some(format!("{what} is missing from `{}`", dir.display())))),
            Presence::Escapes(e) => return Err(e.clone().into()),
        }
    }
    Ok((true, None))
}

/// Fill `usable` for the provided capabilities; refuse a requested one that cannot work
/// here. The process judged is the engine's: after `--drop-caps`, not before.
pub(crate) fn usability(
    rows: &mut [CapRow],
    keep_caps: Option<&[caps::Capability]>,
    facts: &Facts,
    node: Option<&infera_facts::node::NodeFacts>,
    rocm: &Rocm,
    env: &Env,
) -> Result<(), CapError> {
    let rdma = node.map(|n| n.rdma_devices.as_slice());
    let host = match (&facts.host, keep_caps) {
        (Some(h), Some(keep)) => {
            let keep: Vec<String> = keep.iter().map(|c| c.to_string()).collect();
            let mut h = h.clone();
            h.caps.effective.retain(|c| keep.contains(c));
            Some(h)
        }
        (h, _) => h.clone(),
    };
    let mut refusal = None;
    for row in rows.iter_mut().filter(|r| r.provided) {
        let u = usable::check(&row.name, host.as_ref(), rdma, rocm, env);
        row.usable = u.usable;
        row.reason = u.reason.clone();
        if row.requested && u.usable == Some(false) && refusal.is_none() {
            refusal =
                Some(CapError::Unusable { name: row.name.clone(), reason: u.reason.unwrap_or_default(), hint: u.hint });
        }
    }
    refusal.map_or(Ok(()), Err)
}

/// For each capability the tree declares: which copy the child imports. The image's copy
/// when the image ships the capability's modules and the manifest prefers it (the default)
/// and the tree keeps its own copy apart, so it can be left off the path; the tree's copy
/// otherwise, with a warning naming both when the image has one (vLLM's ROCm images ship
/// mooncake-transfer-engine-rocm: a tree that silently replaced it under the engine's own
/// MooncakeConnector would run a build the engine was not tested with).
/// Which copy of each capability module the child imports, by capability name.
pub(crate) type Copies = BTreeMap<String, Import>;

pub(crate) fn copies(tree: &Tree, site: &SiteIndex, findings: &mut Vec<Finding>) -> Copies {
    let mut out = BTreeMap::new();
    for (name, cap) in &tree.manifest.capabilities {
        let mut tops: Vec<&str> = cap.modules.iter().filter_map(|m| m.split('.').next()).collect();
        tops.dedup();
        let Some(top) = tops.first().copied() else { continue };
        let own = tree.paths.caps.get(name);
        let tree_dir = own.or_else(|| tree.facts.top_modules.get(top)).cloned().unwrap_or_else(|| tree.site());
        let tree_dist = Dist::of(&tree.facts.dists, &tree_dir, top).map(Dist::describe);
        let theirs = tops.iter().find_map(|t| site.provider(t).map(|(dir, d)| (*t, dir, d.map(Dist::describe))));
        let import = match (theirs, cap.prefer, own) {
            (Some((t, dir, dist)), Prefer::Base, Some(_)) => {
                findings.push(Finding::info(
                    "capability-from-image",
                    format!(
                        "{name}: the image's `{t}` ({}, `{}`) is imported; the tree's copy ({}) stays off the path (prefer = \"base\")",
                        dist.as_deref().unwrap_or("version not recorded"),
                        dir.join(t).display(),
                        tree_dist.as_deref().unwrap_or("version not recorded"),
                    ),
                ));
                Import { copy: Copy::Base, from: dir.to_path_buf(), dist }
            }
            (Some((t, dir, dist)), Prefer::Tree, _) => {
                findings.push(Finding::warn(
                    "capability-replaces-image",
                    format!(
                        "{name}: the tree's `{t}` ({}, `{}`) is imported ahead of the image's own ({}, `{}`) (prefer = \"tree\")",
                        tree_dist.as_deref().unwrap_or("version not recorded"),
                        tree_dir.join(t).display(),
                        dist.as_deref().unwrap_or("version not recorded"),
                        dir.join(t).display(),
                    ),
                ));
                Import { copy: Copy::Tree, from: tree_dir, dist: tree_dist }
            }
            // No copy in the image; or prefer = "base" with the tree's copy in its always-on
            // site directory, which the shadowing check refuses.
            _ => Import { copy: Copy::Tree, from: tree_dir, dist: tree_dist },
        };
        out.insert(name.clone(), import);
    }
    out
}
