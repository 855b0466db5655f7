//! Facts: what is true of the container, read from files under a root.
//! Reading only; never importing torch, never writing, no Python spawned on the normal path.

pub mod gpus;
pub mod host;
pub mod model;
pub mod python;
pub mod rocm;
pub mod site;
pub mod torch;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;

use serde::Serialize;

use crate::envvars as ev;
use crate::finding::Finding;
use crate::rootfs::Root;
use crate::Env;

pub use gpus::Gpus;
pub use python::{Python, PythonError};
pub use rocm::{Rocm, RocmError};
pub use site::{EngineInstall, SiteIndex};
pub use torch::Torch;

#[derive(Debug, Clone)]
pub struct Facts {
    pub root: Root,
    pub python: Result<Python, PythonError>,
    pub torch: Option<Torch>,
    pub rocm: Result<Rocm, RocmError>,
    pub engines: Vec<EngineInstall>,
    pub site: SiteIndex,
    pub gpus: Result<Gpus, String>,
    /// The running process and the node's devices (root `/` only).
    pub host: Option<host::Host>,
    /// Model facts per model reference named in the args.
    pub models: BTreeMap<String, model::ModelFacts>,
    /// Evidence that disagreed or could not be read.
    pub findings: Vec<Finding>,
}

fn get<'a>(env: &'a Env, k: &str) -> Option<&'a OsString> {
    env.get(&OsString::from(k))
}

impl Facts {
    /// `probe`: top-level module names to look for in the image (the overlay trees' own),
    /// so shadowing can be judged without listing every package of the image.
    pub fn gather(root: Root, env: &Env, model_refs: &[String], probe: &BTreeSet<String>) -> Facts {
        let mut findings = Vec::new();
        let python = python::detect(&root, get(env, ev::PATH), get(env, ev::PYTHONPATH), &mut findings);
        let site_dirs = python.as_ref().map(|p| p.site_dirs.clone()).unwrap_or_default();
        let torch = torch::detect(&root, &site_dirs);
        let rocm = rocm::detect(&root, get(env, ev::ROCM_PATH), get(env, ev::ROCM_HOME), torch.as_ref(), &mut findings);
        let minor = python.as_ref().map(|p| p.minor).unwrap_or((3, 0));
        let (site, engines) = site::scan(&root, &site_dirs, minor, probe);
        let gpus = gpus::detect(&root, env);
        let s = |k: &str| get(env, k).and_then(|v| v.to_str());
        let hf = model::HfEnv { hub_cache: s(ev::HF_HUB_CACHE), hf_home: s(ev::HF_HOME), home: s(ev::HOME) };
        let models = model_refs.iter().map(|r| (r.clone(), model::detect(&root, r, &hf))).collect();
        let host = host::gather(&root);
        Facts { root, python, torch, rocm, engines, site, gpus, host, models, findings }
    }

    pub fn engine(&self, name: &str) -> Option<&EngineInstall> {
        self.engines.iter().find(|e| e.name == name)
    }

    pub fn view(&self) -> FactsView<'_> {
        FactsView {
            python: self.python.as_ref().ok(),
            rocm: self.rocm.as_ref().ok(),
            torch: self.torch.as_ref(),
            engines: &self.engines,
            gpus: self.gpus.as_ref().ok().and_then(|g| g.count),
            gpus_source: self.gpus.as_ref().map(|g| g.source.clone()).unwrap_or_else(|e| e.clone()),
            models: self.models.values().collect(),
            host: self.host.as_ref(),
        }
    }
}

/// The JSON shape of facts in a plan (DESIGN.md stable fields plus a few more).
#[derive(Debug, Serialize)]
pub struct FactsView<'a> {
    pub python: Option<&'a Python>,
    pub rocm: Option<&'a Rocm>,
    pub torch: Option<&'a Torch>,
    pub engines: &'a [EngineInstall],
    pub gpus: Option<u32>,
    pub gpus_source: String,
    pub models: Vec<&'a model::ModelFacts>,
    /// Process capability sets, memlock limit and devices; null when --root is not `/`.
    pub host: Option<&'a host::Host>,
}
