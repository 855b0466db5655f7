//! The planner as a function: inputs built in memory, no file anywhere.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use super::{plan, Inputs, Plan};
use crate::choices::Role;
use crate::cli::Output;
use crate::plan::select::TreeChoice;
use crate::request::{Request, Required, Target, Verify};
use crate::spec::{InitSpec, Privileges};
use infera_core::error::Refusal;
use infera_core::exe::ExecFile;
use infera_core::exe::Header;
use infera_core::rootfs::Root;
use infera_facts::engines::Engine;
use infera_facts::envvars::Env;
use infera_facts::gpus::GpuSource;
use infera_facts::gpus::Gpus;
use infera_facts::model::{Model, ModelFacts};
use infera_facts::python::Python;
use infera_facts::rocm::Rocm;
use infera_facts::rocm::{Hip, Release};
use infera_facts::site::EngineInstall;
use infera_facts::site::SiteIndex;
use infera_facts::Facts;
use infera_overlay::manifest;
use infera_overlay::overlay::Problem;
use infera_overlay::overlay::{Integrity, Layout, Mount, Overlay, OverlayError, Paths, Presence, Tree, TreeFacts};

/// The minimal manifest with a bound on the engine version.
fn py312() -> String {
    manifest::MINIMAL
        .replace("module = \"infera.engine.vllm\"", "module = \"infera.engine.vllm\"\nversions = \">=0.10, <0.18\"")
}

const SITE: &str = "/usr/local/lib/python3.12/dist-packages";

fn python() -> Python {
    Python {
        executable: "/usr/bin/python3.12".into(),
        resolved: "/usr/bin/python3.12".into(),
        version: "3.12".into(),
        minor: (3, 12),
        evidence: vec!["interpreter name `/usr/bin/python3.12`".into()],
        venv: None,
        site_dirs: vec![SITE.into()],
    }
}

fn kimi() -> ModelFacts {
    ModelFacts::Known(Box::new(Model {
        reference: "/models/kimi-k3".into(),
        config: "/models/kimi-k3/config.json".into(),
        model_type: Some("kimi_k3".into()),
        mla: true,
        multimodal: true,
        hybrid: true,
        attention_heads: Some(64),
        heads_unusable: None,
        model_type_unusable: None,
        evidence: vec!["MLA: model_type kimi_k3 with kv_lora_rank 512".into()],
        quantization: None,
        dtype: None,
        weights: None,
        filesystem: None,
    }))
}

/// The image's facts, the image's copies of the selected tree's modules, and the model's.
struct World {
    image: Facts,
    site: SiteIndex,
    models: BTreeMap<OsString, ModelFacts>,
    /// The GPUs the pod's environment gives (no node: an image root).
    gpus: Result<Gpus, infera_facts::gpus::GpuError>,
}

impl std::ops::Deref for World {
    type Target = Facts;
    fn deref(&self) -> &Facts {
        &self.image
    }
}

impl std::ops::DerefMut for World {
    fn deref_mut(&mut self) -> &mut Facts {
        &mut self.image
    }
}

/// A vLLM ROCm 7 image unpacked at /image (not the host root: no process facts), with the
/// Kimi-K3 model.
fn facts() -> World {
    World {
        image: image_facts(),
        site: SiteIndex::default(),
        models: BTreeMap::from([(OsString::from("/models/kimi-k3"), kimi())]),
        gpus: Ok(Gpus {
            count: Some(8),
            source: GpuSource::VisibleDevices {
                var: "HIP_VISIBLE_DEVICES",
                value: "0,1,2,3,4,5,6,7".into(),
                read: None,
            },
        }),
    }
}

fn image_facts() -> Facts {
    Facts {
        root: Root::new("/image").place().clone(),
        python: Ok(python()),
        torch: None,
        rocm: Ok(Rocm {
            hip: Hip { major: 7, version: Some("7.0.51831".into()), source: "/opt/rocm/lib/libamdhip64.so.7".into() },
            release: Some(Release {
                version: "7.0.0".into(),
                major: 7,
                minor: 0,
                source: "/opt/rocm/.info/version".into(),
            }),
            install: None,
        }),
        engines: vec![EngineInstall {
            engine: Engine::Vllm,
            version: "0.11.0".into(),
            record: PathBuf::from(SITE).join("vllm-0.11.0.dist-info"),
            argparse_deprecated: None,
            argparse_unread: None,
        }],
        gpu_code: Vec::new(),
        host: None,
        interpreter_file: Some(ExecFile::Ok { mode: 0o755, header: Header::Elf }),
        program: None,
        workdir: Some(Ok("/".into())),
        ionic: None,
        interfaces: None,
        infiniband: None,
        findings: Vec::new(),
    }
}

fn tree(text: &str, family: &str) -> Tree {
    let manifest = manifest::parse(text, family).unwrap();
    let dir = PathBuf::from("/opt/infera/trees").join(family);
    let mut modules = BTreeMap::new();
    for m in ["infera.engine.vllm", "infera.server", "mooncake", "hipfile"] {
        modules.insert(m.to_string(), Presence::Present);
    }
    Tree {
        family: family.into(),
        python: manifest.python_minor(),
        hip: Some(manifest.hip_major()),
        paths: Paths {
            site: vec![dir.join("site-packages")],
            lib: vec![dir.join("lib")],
            bin: Vec::new(),
            parts: vec![dir.clone()],
            caps: ["mooncake", "hipfile"].iter().map(|c| (c.to_string(), dir.join("capabilities").join(c))).collect(),
            contain: dir.clone(),
        },
        facts: TreeFacts {
            top_modules: [("infera".to_string(), dir.join("site-packages"))].into_iter().collect(),
            cap_modules: ["mooncake", "hipfile"].iter().map(|c| (c.to_string(), vec![c.to_string()])).collect(),
            modules,
            mount: Mount { read_only: true, noexec: false, nosuid: true },
            ..TreeFacts::default()
        },
        dir,
        manifest,
    }
}

fn overlay() -> Result<Overlay, Refusal> {
    Ok(Overlay {
        dir: "/opt/infera".into(),
        layout: Layout::Ours,
        trees: vec![tree(&py312(), "rocm7-py312")],
        patches: Vec::new(),
        rdma: BTreeMap::new(),
    })
}

/// What the router cannot start without.
const ROUTER_TOK: &str = "--router-tokenizer-path=Qwen/Qwen3-0.6B";

fn request(role: Role, args: &[&str]) -> Request {
    Request {
        role,
        target: Target::RoleModule,
        engine: None,
        require: Vec::new(),
        require_all_native: false,
        family: None,
        fail_on: crate::choices::FailOn::Refusal,
        allow: Vec::new(),
        args: args.iter().map(OsString::from).collect(),
        root: "/image".into(),
        volumes: Vec::new(),
        image_env: Vec::new(),
        image_env_said: "--image-env".into(),
        env_files: Vec::new(),
        pod_env: Vec::new(),
        overlay: Some("/opt/infera".into()),
        python: None,
        chdir: Some("/".into()),
        skip_engine_patches: false,
        engine_patch_timeout: 60,
        dry_run: true,
        output: Output::Json,
        init: None,
        privileges: Privileges::default(),
        group: None,
        wait_model: None,
        prefetch: crate::choices::Prefetch::Auto,
        image: Default::default(),
        node: Vec::new(),
        worker_pod: Default::default(),
        allow_why: Default::default(),
        verify: Verify::Off,
    }
}

/// The pod's environment: with the NATS its wrapper's transports use (`plan::transport`).
fn env() -> Env {
    Env::from([
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("HF_TOKEN".into(), "hf_secret".into()),
        ("NATS_SERVER".into(), "nats://nats:4222".into()),
    ])
}

/// The plan of `req`, its inputs made as the launch makes them (the values a plan only
/// borrows while it is made are leaked: a test's lifetime).
fn run<'a>(req: &'a Request, w: &'a World, ov: &'a Result<Overlay, Refusal>, env: &'a Env) -> Plan<'a> {
    let engine: &'a _ = Box::leak(Box::new(super::select::engine(req, &w.image).map_err(Refusal::from)));
    let args = engine.as_ref().ok().copied().flatten().map(|e| {
        let version = w.image.engine(e).map(|i| i.version.as_str());
        let read = infera_facts::engine_args::EngineArgs::read(e, version, &req.args, &Root::new("/image"), None);
        &*Box::leak(Box::new(read))
    });
    let selected = match (&w.image.python, &w.image.rocm, ov) {
        (Ok(py), Ok(rocm), Ok(o)) => Some(&*Box::leak(Box::new(
            super::select::tree(&TreeChoice::of(req.family.as_deref()), py, rocm, o)
                .map(|s| super::Selected { tree: s.tree.clone(), site: w.site.clone(), findings: s.findings })
                .map_err(Refusal::from),
        ))),
        _ => None,
    };
    let router = (req.role == crate::choices::Role::Server)
        .then(|| &*Box::leak(Box::new(infera_facts::router_args::RouterArgs::read(&req.args))));
    let models = &w.models;
    let (node, gpus) = (None, &w.gpus);
    plan(&Inputs { req, facts: &w.image, engine, args, router, models, overlay: ov, selected, env, node, gpus })
}

fn strs(v: &[OsString]) -> Vec<String> {
    v.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

#[test]
fn kimi_k3_plan_is_complete() {
    let (f, ov, e) = (facts(), overlay(), env());
    let mut req = request(Role::Worker, &["--model", "/models/kimi-k3", "--max-num-seqs", "128"]);
    req.init = Some(InitSpec { group: true, grace_seconds: Some(5.0) });
    req.privileges = Privileges { keep_caps: Some(vec![caps::Capability::CAP_KILL]), no_new_privs: true };
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none(), "{:?}", p.error);
    assert_eq!(p.family.as_deref(), Some("rocm7-py312"));
    let x = p.exec.as_ref().unwrap();
    assert_eq!(
        strs(&x.added_args),
        [
            "--tensor-parallel-size",
            "8",
            "--mm-encoder-tp-mode",
            "data",
            "--kv-cache-dtype",
            "auto",
            "--host",
            "0.0.0.0"
        ]
    );
    assert_eq!(strs(&x.argv[..5]), ["/usr/bin/python3.12", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3"]);
    assert_eq!(x.host_program.as_deref(), Some(std::path::Path::new("/image/usr/bin/python3.12")));
    // The complete environment: the pod's variables kept, the launcher's set and named.
    assert_eq!(x.env[&OsString::from("HF_TOKEN")], "hf_secret");
    let t = "/opt/infera/trees/rocm7-py312";
    assert_eq!(
        x.env[&OsString::from("PYTHONPATH")],
        format!("{t}/site-packages:{t}/capabilities/hipfile:{t}/capabilities/mooncake").as_str(),
        "the capabilities' own directories after the tree's packages: the image has no copy of them"
    );
    assert_eq!(x.env[&OsString::from("PATH")], "/usr/bin:/bin", "no bin/ in the tree: PATH unchanged");
    assert_eq!(
        x.env_set,
        ["PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE", "INFERA_TREE", "INFERA_TREE_FAMILY"]
    );
    // Every step of the real run is in the plan.
    assert_eq!(x.init, req.init);
    assert_eq!(x.privileges, req.privileges);
    // The JSON plan shows all of it, secrets redacted.
    let j = serde_json::to_value(&p).unwrap();
    assert_eq!(j["exec"]["env"]["HF_TOKEN"], "<redacted>");
    assert_eq!(j["exec"]["init"], serde_json::json!({"group": true, "grace_seconds": 5.0}));
    assert_eq!(j["exec"]["privileges"], serde_json::json!({"keep_caps": ["CAP_KILL"], "no_new_privs": true}));
    assert_eq!(j["facts"]["gpus"], 8);
    assert_eq!(j["facts"]["gpus_source"], "HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7");
}

#[test]
fn an_argument_with_nul_is_refused() {
    let (f, ov, e) = (facts(), overlay(), env());
    let mut req = request(Role::Server, &["--ok"]);
    req.args.push(OsString::from_vec(b"a\0b".to_vec()));
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!((err.exit.code(), err.code.as_str()), (2, "arg-nul"));
    assert_eq!(err.message, "argument 2 after `--` contains a NUL byte");
}

#[test]
fn no_tree_for_the_image() {
    let (mut f, ov, e) = (facts(), overlay(), env());
    let mut py = python();
    py.minor = (3, 11);
    py.version = "3.11".into();
    f.python = Ok(py);
    let err = run(&request(Role::Worker, &[]), &f, &ov, &e).error.unwrap();
    assert_eq!((err.exit.code(), err.code.as_str()), (69, "no-tree"));
    assert!(err.message.contains("python 3.11 at /usr/bin/python3.12"), "{}", err.message);
    assert!(err.message.ends_with("trees: rocm7-py312 (python 3.12, HIP ABI 7)"), "{}", err.message);
}

#[test]
fn tree_facts_decide_presence_noexec_and_integrity() {
    let (f, e) = (facts(), env());
    let req = request(Role::Server, &[ROUTER_TOK]);
    let with = |change: &dyn Fn(&mut TreeFacts)| {
        let mut t = tree(&py312(), "rocm7-py312");
        change(&mut t.facts);
        Ok(Overlay {
            dir: "/opt/infera".into(),
            layout: Layout::Ours,
            trees: vec![t],
            patches: Vec::new(),
            rdma: BTreeMap::new(),
        })
    };
    let ov = with(&|t| {
        t.modules.insert("infera.server".into(), Presence::Missing);
    });
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!((err.exit.code(), err.code.as_str()), (65, "module-missing"));
    let escape = OverlayError::Escapes { path: "/x/mooncake".into(), target: "/etc".into(), tree: "/x".into() };
    let ov = with(&|t| {
        t.modules.insert("mooncake".into(), Presence::Escapes(escape.clone()));
    });
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!((err.exit.code(), err.code.as_str()), (65, "path-escapes-tree"));
    let ov = with(&|t| {
        t.mount.noexec = true;
        t.shared_objects = true;
    });
    assert_eq!(run(&req, &f, &ov, &e).error.unwrap().code, "overlay-noexec");
    let ov = with(&|t| t.mount.noexec = true);
    assert!(run(&req, &f, &ov, &e).error.is_none(), "noexec without shared objects is fine");
    let ov = with(&|t| {
        t.integrity = Some(Integrity {
            digest: true,
            result: Err(vec![Problem { path: "trees/rocm7-py312/lib/x.so".into(), what: "content changed".into() }]),
        });
    });
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!(err.code, "integrity");
    assert!(err.message.contains("trees/rocm7-py312/lib/x.so: content changed"), "{}", err.message);
}

#[test]
fn the_interpreter_file_decides_126_and_127() {
    let (mut f, ov, e) = (facts(), overlay(), env());
    let req = request(Role::Server, &[ROUTER_TOK]);
    for (file, code, exit) in [
        (ExecFile::NoexecMount, "exec-noexec", 126),
        (ExecFile::NotExecutable { mode: 0o644 }, "exec-not-executable", 126),
        (ExecFile::Missing { reason: "not found".into() }, "exec-not-found", 127),
    ] {
        f.interpreter_file = Some(file);
        let p = run(&req, &f, &ov, &e);
        let err = p.error.as_ref().unwrap();
        assert_eq!((err.code.as_str(), err.exit.code()), (code, exit));
        assert!(p.exec.is_some(), "the refused plan still shows what it would exec");
    }
}

#[test]
fn capabilities_requested_implied_and_unavailable() {
    let (f, ov, e) = (facts(), overlay(), env());
    let mut req = request(Role::Worker, &["--model", "/models/kimi-k3"]);
    req.require = vec![Required { name: "nixl".into(), by: "--require" }];
    let p = run(&req, &f, &ov, &e);
    let err = p.error.unwrap();
    // A name no tree knows is a usage error listing the known ones, not "unavailable".
    assert_eq!((err.exit.code(), err.code.as_str()), (2, "capability-unknown"));
    assert_eq!(
        err.message,
        "--require names the capability `nixl`, which no tree of this overlay knows; known: hipfile, mooncake"
    );
    assert_eq!(err.hint, None);
    assert_eq!(p.capabilities.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["hipfile", "mooncake", "nixl"]);
    req.require = vec![Required { name: "moonckae".into(), by: "INFERA_REQUIRE" }];
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!((err.exit.code(), err.code.as_str()), (2, "capability-unknown"));
    assert_eq!(
        err.message,
        "INFERA_REQUIRE names the capability `moonckae`, which no tree of this overlay knows; known: hipfile, mooncake"
    );
    assert_eq!(err.hint.as_deref(), Some("did you mean `mooncake`?"));
    // A Mooncake connector implies mooncake; the tree provides it; usability is unknown
    // without the node's facts.
    let req =
        request(Role::Worker, &["--model", "/m", "--kv-transfer-config", r#"{"kv_connector":"MooncakeConnector"}"#]);
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none(), "{:?}", p.error);
    let mc = p.capabilities.iter().find(|c| c.name == "mooncake").unwrap();
    assert_eq!(mc.requested_by.as_deref(), Some("--kv-transfer-config kv_connector=MooncakeConnector"));
    assert_eq!((mc.provided, mc.usable), (true, None));
}

#[test]
fn rules_refuse_and_allow() {
    let (f, ov, e) = (facts(), overlay(), env());
    let mut req = request(Role::Worker, &["--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"]);
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!((err.exit.code(), err.code.as_str()), (78, "kv-fp8-mla"));
    req.allow = vec!["kv-fp8-mla".into()];
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none());
    assert!(p.findings.iter().any(|x| x.code == "kv-fp8-mla" && x.message.starts_with("allowed by")));
}

/// vLLM's ROCm images ship mooncake-transfer-engine-rocm.
fn image_ships_mooncake(f: &mut World) {
    f.site.modules.insert("mooncake".into(), SITE.into());
    f.site.dists.push(infera_core::names::Dist {
        dir: SITE.into(),
        name: "mooncake_transfer_engine_rocm".into(),
        version: "0.3.13.post1".into(),
    });
}

#[test]
fn a_capability_the_image_ships_is_imported_from_the_image() {
    let (mut f, ov, e) = (facts(), overlay(), env());
    image_ships_mooncake(&mut f);
    for (role, args) in [(Role::Server, [ROUTER_TOK, "--port=8000"]), (Role::Worker, ["--model", "/models/kimi-k3"])] {
        let req = request(role, &args);
        let p = run(&req, &f, &ov, &e);
        assert!(p.error.is_none(), "{role:?}: {:?}", p.error);
        let x = p.exec.as_ref().unwrap();
        let t = "/opt/infera/trees/rocm7-py312";
        assert_eq!(
            x.env[&OsString::from("PYTHONPATH")],
            format!("{t}/site-packages:{t}/capabilities/hipfile").as_str()
        );
        let mc = p.capabilities.iter().find(|c| c.name == "mooncake").unwrap();
        let import = mc.import.as_ref().unwrap();
        assert_eq!((import.copy, import.from.to_str()), (super::caps::Copy::Base, Some(SITE)));
        assert_eq!(import.dist.as_deref(), Some("mooncake_transfer_engine_rocm 0.3.13.post1"));
        // The router imports no capability: which copy one would be is not said to it.
        let note = p.findings.iter().find(|x| x.code == "capability-from-image");
        if role == Role::Server {
            assert!(note.is_none(), "{note:?}");
            continue;
        }
        let note = note.unwrap();
        assert_eq!(
            note.message,
            "mooncake: the image's `mooncake` (mooncake_transfer_engine_rocm 0.3.13.post1, \
             `/usr/local/lib/python3.12/dist-packages/mooncake`) is imported; the tree's copy \
             (version not recorded) stays off the path (prefer = \"base\")"
        );
    }
}

#[test]
fn a_capability_the_tree_prefers_replaces_the_images_with_a_warning() {
    let (mut f, mut ov, e) = (facts(), overlay(), env());
    image_ships_mooncake(&mut f);
    let text = py312().replace("modules = [\"mooncake\"]", "modules = [\"mooncake\"]\nprefer = \"tree\"");
    ov.as_mut().unwrap().trees = vec![tree(&text, "rocm7-py312")];
    let req = request(Role::Server, &[ROUTER_TOK]);
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none(), "{:?}", p.error);
    let t = "/opt/infera/trees/rocm7-py312";
    let x = p.exec.as_ref().unwrap();
    assert_eq!(
        x.env[&OsString::from("PYTHONPATH")],
        format!("{t}/site-packages:{t}/capabilities/hipfile:{t}/capabilities/mooncake").as_str()
    );
    let w = p.findings.iter().find(|x| x.code == "capability-replaces-image").unwrap();
    assert_eq!(w.level, infera_facts::finding::Level::Warn);
    assert!(
        w.message.contains("ahead of the image's own (mooncake_transfer_engine_rocm 0.3.13.post1, `/usr/local/lib/python3.12/dist-packages/mooncake`)"),
        "{}",
        w.message
    );
    let mc = p.capabilities.iter().find(|c| c.name == "mooncake").unwrap();
    assert_eq!(mc.import.as_ref().map(|i| i.copy), Some(super::caps::Copy::Tree));
}

#[test]
fn shadowing_the_image() {
    // The tree's copy sits in its always-on site-packages: the image's cannot be used.
    let (mut f, mut ov, e) = (facts(), overlay(), env());
    image_ships_mooncake(&mut f);
    let t = &mut ov.as_mut().unwrap().trees[0];
    t.paths.caps.remove("mooncake");
    t.facts.cap_modules.remove("mooncake");
    t.facts.top_modules.insert("mooncake".into(), t.dir.join("site-packages"));
    let err = run(&request(Role::Server, &[ROUTER_TOK]), &f, &ov, &e).error.unwrap();
    assert_eq!((err.code.as_str(), err.exit.code()), ("shadows-base", 65));
    assert!(err.message.contains("`mooncake` (base: `/usr/local/lib/python3.12/dist-packages/mooncake`)"));
    assert!(err.hint.unwrap().contains("capabilities/mooncake/"));
}

#[test]
fn numbers_are_read_as_the_engine_reads_them() {
    let (f, ov, e) = (facts(), overlay(), env());
    // 8 GPUs: `' 16'` and `1_6` are 16 for the engine's int(), so the TP rule applies.
    for tp in ["--tensor-parallel-size= 16", "-tp=1_6", "--tensor-parallel-size=\t16\n"] {
        let req = request(Role::Worker, &["--model", "/models/kimi-k3", tp]);
        let err = run(&req, &f, &ov, &e).error.unwrap();
        assert_eq!((err.code.as_str(), err.exit.code()), ("tp-exceeds-gpus", 78), "{tp}");
        assert!(err.message.starts_with("tensor parallel size 16 is larger than the 8 GPUs"), "{}", err.message);
    }
    for (arg, code, exit, msg) in [
        ("-tp=0", "parallel-size-invalid", 78, "--tensor-parallel-size 0: a tensor parallel size must be at least 1"),
        ("-tp=-1", "parallel-size-invalid", 78, "--tensor-parallel-size -1: a tensor parallel size must be at least 1"),
        (
            "--max-num-seqs=0",
            "parallel-size-invalid",
            78,
            "--max-num-seqs 0: a number of concurrent sequences must be at least 1",
        ),
        ("-tp=abc", "arg-not-an-int", 2, "--tensor-parallel-size `abc`: invalid int value; the vllm parser exits"),
        ("-pp=1.5", "arg-not-an-int", 2, "--pipeline-parallel-size `1.5`: invalid int value"),
    ] {
        let req = request(Role::Worker, &["--model", "/models/kimi-k3", arg]);
        let err = run(&req, &f, &ov, &e).error.unwrap();
        assert_eq!((err.code.as_str(), err.exit.code()), (code, exit), "{arg}");
        assert!(err.message.starts_with(msg), "{arg}: {}", err.message);
    }
    // Digits of another script: not guessed, said.
    let req = request(Role::Worker, &["--model", "/models/kimi-k3", "-tp=\u{0661}\u{0666}"]);
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none(), "{:?}", p.error);
    assert!(p.findings.iter().any(|x| x.code == "arg-unread"));
}

#[test]
fn odd_head_counts_are_said_not_skipped() {
    let (mut f, ov, e) = (facts(), overlay(), env());
    if let Some(ModelFacts::Known(m)) = f.models.get_mut(&OsString::from("/models/kimi-k3")) {
        m.attention_heads = None;
        m.heads_unusable = Some("-8".into());
    }
    let req = request(Role::Worker, &["--model", "/models/kimi-k3", "-tp", "3"]);
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none(), "{:?}", p.error);
    let w = p.findings.iter().find(|x| x.code == "model-heads-unusable").unwrap();
    assert!(w.message.starts_with("num_attention_heads = -8 in `/models/kimi-k3/config.json` is not a positive count"));
}

/// The TP default is the largest size the visible GPUs allow that the heads accept: never a
/// default the launcher then refuses.
#[test]
fn tp_default_fits_the_heads() {
    use crate::plan::defaults::default_tp;
    assert_eq!(default_tp(8, Some(64)), 8);
    assert_eq!(default_tp(6, Some(16)), 4);
    assert_eq!(default_tp(6, Some(12)), 6);
    assert_eq!(default_tp(7, Some(28)), 7);
    assert_eq!(default_tp(5, Some(7)), 1);
    assert_eq!(default_tp(6, None), 6);
    let (mut f, ov, e) = (facts(), overlay(), env());
    if let Some(ModelFacts::Known(m)) = f.models.get_mut(&OsString::from("/models/kimi-k3")) {
        m.attention_heads = Some(16);
    }
    f.gpus = Ok(Gpus {
        count: Some(6),
        source: GpuSource::VisibleDevices { var: "HIP_VISIBLE_DEVICES", value: "0,1,2,3,4,5".into(), read: None },
    });
    let req = request(Role::Worker, &["--model", "/models/kimi-k3"]);
    let p = run(&req, &f, &ov, &e);
    assert!(p.error.is_none(), "{:?}", p.error);
    let x = p.exec.as_ref().unwrap();
    assert_eq!(x.added_args[..2], [OsString::from("--tensor-parallel-size"), OsString::from("4")]);
    let tp = p.findings.iter().find(|x| x.code == "tp-default").unwrap();
    assert_eq!(
        tp.message,
        "added --tensor-parallel-size 4: 6 GPUs are visible (HIP_VISIBLE_DEVICES=0,1,2,3,4,5) but the model's 16 \
         attention heads divide into at most 4 of them; 2 stay idle (set --tensor-parallel-size or \
         --pipeline-parallel-size to use them otherwise)"
    );
    // Set by the user: the user's size, and the rule refuses it as before.
    let req = request(Role::Worker, &["--model", "/models/kimi-k3", "-tp", "6"]);
    let err = run(&req, &f, &ov, &e).error.unwrap();
    assert_eq!(err.code, "tp-does-not-divide-heads");
}
