//! The child's environment: the pod's, with the tree's directories put in front of the
//! search paths and the manifest's defaults added where the pod set nothing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use infera_facts::envvars::{self as ev, Env};
use infera_facts::finding::Finding;
use infera_overlay::overlay::Tree;

pub(super) struct ChildEnv {
    /// Complete: what the child's environment will be.
    pub env: BTreeMap<OsString, OsString>,
    /// The names the launcher set or changed, in the order it did.
    pub set: Vec<String>,
}

impl ChildEnv {
    pub(super) fn put(&mut self, k: &str, v: OsString) {
        self.env.insert(k.into(), v);
        if !self.set.iter().any(|x| x == k) {
            self.set.push(k.to_string());
        }
    }
}

/// `dirs` joined with `:`, then what was there.
fn prepend(dirs: &[PathBuf], old: Option<&OsString>) -> OsString {
    let mut v = OsString::new();
    for d in dirs.iter().map(|d| d.as_os_str()).chain(old.map(OsString::as_os_str)) {
        if !v.is_empty() {
            v.push(":");
        }
        v.push(d);
    }
    v
}

/// `caps`: the capability directories the child imports from (the tree's copies).
pub(super) fn child_env(tree: &Tree, caps: &[PathBuf], env: &Env, findings: &mut Vec<Finding>) -> ChildEnv {
    let mut out = ChildEnv { env: env.clone(), set: Vec::new() };
    let p = &tree.paths;
    let site: Vec<PathBuf> = p.site.iter().chain(caps).cloned().collect();
    if !site.is_empty() {
        out.put(ev::PYTHONPATH, prepend(&site, ev::get_nonempty(env, ev::PYTHONPATH)));
    }
    if !p.lib.is_empty() {
        out.put(ev::LD_LIBRARY_PATH, prepend(&p.lib, ev::get_nonempty(env, ev::LD_LIBRARY_PATH)));
    }
    if !p.bin.is_empty() {
        let default = OsString::from(ev::DEFAULT_PATH);
        let old = ev::get_nonempty(env, ev::PATH).unwrap_or(&default);
        out.put(ev::PATH, prepend(&p.bin, Some(old)));
    }
    // The payload is read-only: no .pyc may be written into it.
    if ev::get_nonempty(env, ev::PYTHONDONTWRITEBYTECODE).is_none()
        && ev::get_nonempty(env, ev::PYTHONPYCACHEPREFIX).is_none()
    {
        out.put(ev::PYTHONDONTWRITEBYTECODE, "1".into());
    }
    out.put(ev::INFERA_TREE, tree.dir.clone().into_os_string());
    out.put(ev::INFERA_TREE_FAMILY, tree.family.clone().into());
    let tree_dir = tree.dir.to_string_lossy();
    for (k, v) in &tree.manifest.env {
        if ev::get(env, k).is_some() {
            findings
                .push(Finding::info("env-kept", format!("{k} kept as the pod set it (the tree's default is `{v}`)")));
        } else {
            out.put(k, v.replace("{tree}", &tree_dir).into());
        }
    }
    out
}
