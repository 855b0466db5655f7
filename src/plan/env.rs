//! The child's environment: the pod's, with the tree's directories put in front of the
//! search paths and the manifest's defaults added where the pod set nothing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use crate::envvars::{self as ev, Env};
use crate::finding::Finding;
use crate::overlay::Tree;

pub struct ChildEnv {
    /// Complete: what the child's environment will be.
    pub env: BTreeMap<OsString, OsString>,
    /// The names the launcher set or changed, in the order it did.
    pub set: Vec<String>,
}

impl ChildEnv {
    fn put(&mut self, k: &str, v: OsString) {
        self.env.insert(k.into(), v);
        if !self.set.iter().any(|x| x == k) {
            self.set.push(k.to_string());
        }
    }
}

fn prepend(dir: &Path, old: Option<&OsString>) -> OsString {
    let mut v = dir.as_os_str().to_os_string();
    if let Some(old) = old {
        v.push(":");
        v.push(old);
    }
    v
}

pub fn child_env(tree: &Tree, env: &Env, findings: &mut Vec<Finding>) -> ChildEnv {
    let mut out = ChildEnv { env: env.clone(), set: Vec::new() };
    let f = &tree.facts;
    if f.site_dir {
        out.put(ev::PYTHONPATH, prepend(&tree.site_packages(), ev::get_nonempty(env, ev::PYTHONPATH)));
    }
    if f.lib_dir {
        out.put(ev::LD_LIBRARY_PATH, prepend(&tree.lib(), ev::get_nonempty(env, ev::LD_LIBRARY_PATH)));
    }
    if f.bin_dir {
        let default = OsString::from(ev::DEFAULT_PATH);
        let old = ev::get_nonempty(env, ev::PATH).unwrap_or(&default);
        out.put(ev::PATH, prepend(&tree.bin(), Some(old)));
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
