//! infera-facts: what is true of an image and a node, read from files under a root, and the
//! engines' argv as their own parsers read it. Reading only; never importing torch, never
//! writing, no Python spawned on the normal path. The launcher plans from these values.

#![forbid(unsafe_code)]

pub mod blockdev;
pub mod devices;
pub mod dialect;
pub mod engine_args;
pub mod engine_config;
pub mod engines;
pub mod envvars;
pub mod fatbin;
pub mod finding;
pub mod fleet;
pub mod gpu_code;
pub mod gpus;
pub mod host;
pub mod ionic;
pub mod kube;
pub mod model;
pub mod mounts;
pub mod net;
pub mod node;
pub mod pyscan;
pub mod python;
pub mod rocm;
pub mod router_args;
pub mod ser;
pub mod site;
pub mod storage;
pub mod suggest;
pub mod torch;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::envvars::{self as ev, get, Env};
use crate::finding::Finding;
use crate::gpus::GpuError;
use crate::gpus::Gpus;
use crate::python::Python;
use crate::python::PythonError;
use crate::rocm::Rocm;
use crate::rocm::RocmError;
use crate::site::EngineInstall;
use crate::site::SiteIndex;
use crate::torch::Torch;
use infera_core::exe::{self, ExecFile};
use infera_core::rootfs::{self, Place, Root};

#[derive(Debug, Clone)]
pub struct Facts {
    /// Where the image is (for the host paths a plan names); the facts were read through it.
    pub root: Place,
    pub python: Result<Python, PythonError>,
    pub torch: Option<Torch>,
    pub rocm: Result<Rocm, RocmError>,
    pub engines: Vec<EngineInstall>,
    /// The GPU targets of torch's, the engines' and their kernels' libraries.
    pub gpu_code: Vec<gpu_code::GpuLib>,
    /// The running process: its limits, capabilities and device access (root `/` only).
    pub host: Option<host::Host>,
    /// The interpreter file the run would exec (when the interpreter was found).
    pub interpreter_file: Option<ExecFile>,
    /// The program of the command form, when it is not a Python module run.
    pub program: Option<Program>,
    /// The working directory the run changes to, resolved inside the root (or why not).
    pub workdir: Option<Result<PathBuf, String>>,
    /// The host's RoCE provider build, when the pod mounts one.
    pub ionic: Option<ionic::Ionic>,
    /// This network namespace's interfaces (a multi-node run names them; `--root /` only).
    pub interfaces: Option<Vec<net::Iface>>,
    /// The RDMA devices (a PD run uses them), with the GIDs at `MC_GID_INDEX`.
    pub infiniband: Option<Vec<net::IbDevice>>,
    /// Evidence that disagreed or could not be read.
    pub findings: Vec<Finding>,
}

/// A program of the command form, looked up like the shell would, inside the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Found: the container path (as found on PATH), resolved inside the root, and its file.
    Found {
        path: PathBuf,
        resolved: PathBuf,
        file: ExecFile,
    },
    NotFound {
        name: OsString,
        path: String,
    },
}

/// What the request wants to know about the image besides what every run needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wanted<'a> {
    /// The interpreter the request names (INFERA_PYTHON or the command's).
    pub interpreter: Option<&'a OsStr>,
    /// The program of the command form (not a Python module run).
    pub program: Option<&'a OsStr>,
    /// The working directory the run changes to.
    pub chdir: Option<&'a Path>,
    /// The engine the request names (`--engine`, or the module of the command form): only
    /// it is looked for. None: every engine of the table (`--engine auto` must know them all).
    pub engine: Option<crate::engines::Engine>,
    /// A multi-node group or a named socket interface: read the interfaces.
    pub network: bool,
    /// RDMA devices named (`--disaggregation-ib-device`) or a GID index set: read them.
    pub infiniband: bool,
    /// An engine will run (a worker, or `check`): read the GPU code of its libraries.
    pub gpu_code: bool,
}

impl Facts {
    pub fn gather(root: &Root, env: &Env, w: &Wanted) -> Facts {
        let mut findings = Vec::new();
        let python = python::detect(root, get(env, ev::PATH), get(env, ev::PYTHONPATH), w.interpreter, &mut findings);
        let site_dirs = python.as_ref().map(|p| p.site_dirs.clone()).unwrap_or_default();
        let torch = torch::detect(root, &site_dirs, &mut findings);
        let places = rocm::Where {
            rocm_path: get(env, ev::ROCM_PATH),
            rocm_home: get(env, ev::ROCM_HOME),
            hip_path: get(env, ev::HIP_PATH),
            site_dirs: &site_dirs,
        };
        let rocm = rocm::detect(root, &places, torch.as_ref(), &mut findings);
        let minor = python.as_ref().map(|p| p.minor).unwrap_or((3, 0));
        let mut engines = site::engines(root, &site_dirs, minor, w.engine);
        for e in &mut engines {
            (e.argparse_deprecated, e.argparse_unread) = site::argparse_deprecated(root, &site_dirs, e);
        }
        let found: Vec<crate::engines::Engine> = engines.iter().map(|e| e.engine).collect();
        let gpu_code = if w.gpu_code { gpu_code::gather(root, &site_dirs, minor, &found) } else { Vec::new() };
        let host = host::gather(root);
        let interpreter_file = python.as_ref().ok().map(|p| exe::inspect(root, &p.executable));
        let program = w.program.map(|name| find_program(root, env, name, w.chdir));
        let ionic = ionic::detect(root);
        let interfaces = (w.network && root.is_host_root()).then(net::interfaces).flatten();
        let gid_index = get(env, ev::MC_GID_INDEX).and_then(|v| v.to_str()?.trim().parse().ok());
        let infiniband = w.infiniband.then(|| net::infiniband(root, gid_index));
        let workdir = w.chdir.map(|d| match root.stat(d) {
            Ok((resolved, m)) if m.is_dir() => Ok(resolved),
            Ok(_) => Err("not a directory".to_string()),
            Err(e) => Err(rootfs::io_reason(&e)),
        });
        Facts {
            root: root.place().clone(),
            python,
            torch,
            rocm,
            engines,
            gpu_code,
            host,
            interpreter_file,
            program,
            workdir,
            ionic,
            interfaces,
            infiniband,
            findings,
        }
    }

    /// The image's copies of these top-level modules (the selected tree's own, which the
    /// image could shadow or share), with the distributions that installed them.
    pub fn site_of(&self, root: &Root, probe: &BTreeSet<String>) -> SiteIndex {
        let mut index = SiteIndex::default();
        if let Ok(py) = &self.python {
            site::probe(root, &py.site_dirs, py.minor, probe, &mut index);
        }
        index
    }

    pub fn engine(&self, e: crate::engines::Engine) -> Option<&EngineInstall> {
        self.engines.iter().find(|x| x.engine == e)
    }

    /// The JSON shape, with the facts of the model the args name.
    pub fn view<'a>(
        &'a self,
        models: &'a BTreeMap<OsString, model::ModelFacts>,
        node: Option<&'a node::NodeFacts>,
        gpus: &'a Result<Gpus, GpuError>,
    ) -> FactsView<'a> {
        FactsView {
            image: self.root.image(),
            python: self.python.as_ref().ok(),
            rocm: match &self.rocm {
                Ok(r) => Some(r),
                Err(RocmError::Cuda { found, .. }) => found.as_deref(),
                Err(_) => None,
            },
            torch: self.torch.as_ref(),
            engines: &self.engines,
            gpu_code: &self.gpu_code,
            gpus: gpus.as_ref().ok().and_then(|g| g.count),
            gpus_source: match gpus {
                Ok(g) => g.source.to_string(),
                Err(e) => e.to_string(),
            },
            models: models.values().collect(),
            host: self.host.as_ref(),
            node,
        }
    }
}

/// Find a program as execvp would, inside the root: a path with a `/` as it is (relative
/// to the working directory the run changes to), a bare name on the image's PATH.
fn find_program(root: &Root, env: &Env, name: &OsStr, chdir: Option<&Path>) -> Program {
    let p = Path::new(name);
    let candidates: Vec<PathBuf> = if name.to_string_lossy().contains('/') {
        vec![chdir.unwrap_or(Path::new("/")).join(p)]
    } else {
        let path = get(env, ev::PATH).map_or_else(|| ev::DEFAULT_PATH.to_string(), |v| rootfs::os_to_string(v));
        path.split(':').filter(|d| d.starts_with('/')).map(|d| Path::new(d).join(p)).collect()
    };
    for c in candidates {
        if let Ok((resolved, m)) = root.stat(&c) {
            if m.is_file() {
                let file = exe::inspect(root, &c);
                return Program::Found { path: c, resolved, file };
            }
        }
    }
    let path = get(env, ev::PATH).map_or_else(|| ev::DEFAULT_PATH.to_string(), |v| rootfs::os_to_string(v));
    Program::NotFound { name: name.to_os_string(), path }
}

/// The JSON shape of facts in a plan (the README's stable fields plus a few more).
#[derive(Debug, Clone, Serialize)]
pub struct FactsView<'a> {
    /// `check --image`: the image read from its archive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<&'a infera_core::image::Identity>,
    pub python: Option<&'a Python>,
    pub rocm: Option<&'a Rocm>,
    pub torch: Option<&'a Torch>,
    pub engines: &'a [EngineInstall],
    /// The GPU targets of the image's GPU libraries.
    pub gpu_code: &'a [gpu_code::GpuLib],
    pub gpus: Option<u32>,
    pub gpus_source: String,
    pub models: Vec<&'a model::ModelFacts>,
    /// Process capability sets, memlock limit and devices; null when --root is not `/`.
    pub host: Option<&'a host::Host>,
    /// The node judged against: this node at root `/`, or `--node`'s; null when neither.
    pub node: Option<&'a node::NodeFacts>,
}

/// What `check --image` keeps of an image's files as it streams the layers (the rest is
/// only their names and types): the whole of the small files the facts read — os-release,
/// dist-info and egg records, `.pth` files, the engines' and torch's version files, a
/// venv's `pyvenv.cfg`, ROCm's version files and header —, the parts of the GPU libraries
/// that the offload-bundle reader reads (`fatbin::Capture`), and the header of every
/// executable (its format: ELF, a script's `#!`).
pub fn image_keep(path: &std::path::Path, size: u64, mode: u32) -> infera_core::image::layer::Want {
    use infera_core::image::layer::Want;
    if gpu_code::is_gpu_library(path) {
        return Want::Capture(Box::new(fatbin::Capture::new()));
    }
    Want::Head(keep_head(path, size, mode))
}

fn keep_head(path: &std::path::Path, size: u64, mode: u32) -> u64 {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let in_dir = |d: &str| path.parent().and_then(|p| p.file_name()).is_some_and(|p| p == d);
    let read = matches!(
        name,
        "os-release"
            | "pyvenv.cfg"
            | "METADATA"
            | "PKG-INFO"
            | "version.py"
            | "_version.py"
            | "version"
            | "rocm_version.h"
    ) || name.ends_with(".pth")
        || (name == "__init__.py" && crate::engines::TABLE.iter().any(|i| in_dir(i.name)))
        || memchr::memmem::find(path.as_os_str().as_encoded_bytes(), b"/.info/").is_some();
    let parser = crate::engines::TABLE.iter().flat_map(|i| i.parser_sources).any(|f| path.ends_with(f));
    if (read && size <= infera_core::rootfs::SMALL_FILE_LIMIT) || (parser && size <= site::PARSER_SOURCE_LIMIT) {
        size
    } else if mode & 0o111 != 0 {
        infera_core::exe::HEADER
    } else {
        0
    }
}
