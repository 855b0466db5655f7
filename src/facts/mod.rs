//! Facts: what is true of the container, read from files under a root.
//! Reading only; never importing torch, never writing, no Python spawned on the normal path.

pub mod exe;
pub mod gpus;
pub mod host;
pub mod model;
pub mod python;
pub mod rocm;
pub mod site;
pub mod torch;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::envvars::{self as ev, get, Env};
use crate::finding::Finding;
use crate::rootfs::Root;

pub use exe::ExecFile;
pub use gpus::{GpuError, GpuSource, Gpus};
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
    pub gpus: Result<Gpus, GpuError>,
    /// The running process and the node's devices (root `/` only).
    pub host: Option<host::Host>,
    /// Model facts per model reference named in the args.
    pub models: BTreeMap<String, model::ModelFacts>,
    /// The interpreter file the run would exec (when the interpreter was found).
    pub interpreter_file: Option<ExecFile>,
    /// Evidence that disagreed or could not be read.
    pub findings: Vec<Finding>,
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
        let interpreter_file = python.as_ref().ok().map(|p| exe::inspect(&root, &p.executable));
        Facts { root, python, torch, rocm, engines, site, gpus, host, models, interpreter_file, findings }
    }

    pub fn engine(&self, e: crate::engines::Engine) -> Option<&EngineInstall> {
        self.engines.iter().find(|x| x.engine == e)
    }

    pub fn view(&self) -> FactsView<'_> {
        FactsView {
            python: self.python.as_ref().ok(),
            rocm: self.rocm.as_ref().ok(),
            torch: self.torch.as_ref(),
            engines: &self.engines,
            gpus: self.gpus.as_ref().ok().and_then(|g| g.count),
            gpus_source: match &self.gpus {
                Ok(g) => g.source.to_string(),
                Err(e) => e.to_string(),
            },
            models: self.models.values().collect(),
            host: self.host.as_ref(),
        }
    }
}

/// The JSON shape of facts in a plan (DESIGN.md stable fields plus a few more).
#[derive(Debug, Clone, Serialize)]
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
