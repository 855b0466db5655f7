//! Real containers with podman (docker-compatible CLI): the overlay image built from
//! Dockerfile.overlay, mounted read-only into stand-in engine images that run real
//! CPython; the pod specs validated and run with `podman kube play`.
//! `scripts/test` installs podman, runc and kubernetes-validate on a fresh machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

const OVERLAY: &str = "localhost/infera-overlay:test";
const VLLM: &str = "localhost/infera-standin-vllm:test";
/// A ROCm 7.2 vLLM image (vLLM 0.28 on rocm/dev-ubuntu-22.04:7.2.3): one hipFile runs on.
const VLLM72: &str = "localhost/infera-standin-vllm-rocm72:test";
const SGLANG: &str = "localhost/infera-standin-sglang:test";
const VLLM_ROCM10: &str = "localhost/infera-standin-vllm-rocm10:test";
const SEED: [&str; 6] = ["--model", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-num-seqs", "128"];
const GPUS8: &str = "HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7";

/// podman's settings for this machine and the tests' own store under target/
/// (tests/containers/store): nothing the tests build lands in the machine's store.
fn podman_env(c: &mut Command) -> &mut Command {
    static STORE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let store = STORE.get_or_init(|| {
        let o = Command::new(repo().join("tests/containers/store")).output().unwrap();
        assert!(o.status.success(), "tests/containers/store: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    });
    c.env("CONTAINERS_CONF", repo().join("tests/containers/containers.conf")).env("CONTAINERS_STORAGE_CONF", store)
}

/// `podman ARGS`; a container it runs has the NATS server its pod's spec would give infera's
/// wrappers (as `support::infera` gives the launcher), unless its args say otherwise.
fn podman(args: &[&str]) -> Command {
    let mut c = Command::new("podman");
    podman_env(&mut c).stdin(Stdio::null());
    match args.split_first() {
        Some((&"run", rest)) => c.args(["run", "-e", &format!("NATS_SERVER={}", crate::support::POD_NATS)]).args(rest),
        _ => c.args(args),
    };
    c
}

fn out(mut c: Command) -> Out {
    let o = c.output().unwrap_or_else(|e| panic!("cannot run podman ({e}); scripts/test installs it"));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Build (or refresh) the images once at a time; the script skips what is up to date.
fn images() {
    let mut c = Command::new("flock");
    let st = podman_env(&mut c)
        .arg(repo().join("target/e2e.lock"))
        .arg(repo().join("examples/images/build"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "examples/images/build failed");
}

/// `podman run` with the overlay as a read-only image mount and the example models.
fn run_in(image: &str, env: &[&str], cmd: &[&str]) -> Out {
    images();
    let models = repo().join("examples/models");
    let mut c = podman(&["run", "--rm", "--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
    c.args(["-v", &format!("{}:/models:ro", models.display())]);
    for e in env {
        c.args(["-e", e]);
    }
    c.arg(image).args(cmd);
    out(c)
}

/// As [`run_in`], with the overlay a directory of this host (read-only) instead of the image.
fn run_in_overlay(image: &str, overlay: &Path, env: &[&str], cmd: &[&str]) -> Out {
    images();
    let models = repo().join("examples/models");
    let mut c = podman(&["run", "--rm", "-v", &format!("{}:/opt/infera:ro", overlay.display())]);
    c.args(["-v", &format!("{}:/models:ro", models.display())]);
    for e in env {
        c.args(["-e", e]);
    }
    c.arg(image).args(cmd);
    out(c)
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

#[test]
fn overlay_image_layout_labels_and_static_binary() {
    images();
    let labels = out(podman(&["image", "inspect", "--format", "{{json .Labels}}", OVERLAY]));
    assert_eq!(labels.code, 0, "{}", labels.stderr);
    let l: serde_json::Value = serde_json::from_str(&labels.stdout).unwrap();
    assert_eq!(l["ai.infera.overlay.families"], "rocm7-py310 rocm7-py312");
    assert_eq!(l["ai.infera.overlay.version"], env!("CARGO_PKG_VERSION"));

    let dir = tempfile::tempdir().unwrap();
    let cid = out(podman(&["create", OVERLAY, "--version"]));
    assert_eq!(cid.code, 0, "{}", cid.stderr);
    let cid = cid.stdout.trim().to_string();
    let tar = dir.path().join("overlay.tar");
    let ex = out(podman(&["export", "-o", tar.to_str().unwrap(), &cid]));
    let _ = out(podman(&["rm", &cid]));
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    let list = Command::new("tar").arg("-tvf").arg(&tar).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for want in [
        "bin/infera-exec",
        "trees/rocm7-py312/manifest.toml",
        "trees/rocm7-py312/payload.json",
        "trees/rocm7-py312/capabilities/hipfile/hipfile/__init__.py",
        "trees/rocm7-py310/site-packages/infera/engine/sglang.py",
        "opt/infera -> ..",
    ] {
        assert!(list.contains(want), "{want} not in the image:\n{list}");
    }
    assert!(!list.contains("rocm7-py310/capabilities/hipfile"), "py310 ships no hipfile");
    assert!(!list.contains("__pycache__"), "no bytecode in the payload");
    let st =
        Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(dir.path()).arg("bin/infera-exec").status().unwrap();
    assert!(st.success());
    let bytes = std::fs::read(dir.path().join("bin/infera-exec")).unwrap();
    let elf = goblin::elf::Elf::parse(&bytes).unwrap();
    assert_eq!(elf.interpreter, None, "the launcher must be static (no ELF interpreter)");
    assert!(elf.libraries.is_empty(), "no shared libraries: {:?}", elf.libraries);
}

#[test]
fn vllm_image_execs_the_engine_as_pid1_from_the_read_only_overlay() {
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--"];
    cmd.extend(SEED);
    let o = run_in(VLLM, &[GPUS8, "MC_FORCE_TCP=1"], &cmd);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let r = o.standin();
    assert_eq!(r["pid"], 1, "the engine must be PID 1's exec, not a child");
    assert_eq!(r["standin"], "infera.engine.vllm");
    assert_eq!(r["python"], "3.12");
    assert_eq!(r["executable"], "/usr/bin/python3.12");
    let mut want: Vec<String> = SEED.map(String::from).to_vec();
    want.extend(KIMI_TP8_ADDED.map(String::from));
    assert_eq!(strings(&r["argv"]), want);
    let t = "/opt/infera/trees/rocm7-py312";
    assert_eq!(
        r["env"]["PYTHONPATH"],
        format!("{t}/site-packages:{t}/capabilities/hipfile:{t}/capabilities/mooncake"),
        "this image ships no mooncake: the tree's copy is on the path"
    );
    assert_eq!(r["env"]["LD_LIBRARY_PATH"], "/opt/infera/trees/rocm7-py312/lib");
    assert_eq!(r["env"]["PYTHONDONTWRITEBYTECODE"], "1");
    for m in ["mooncake", "hipfile"] {
        assert_eq!(r["imports"][m]["file"], format!("{t}/capabilities/{m}/{m}/__init__.py"), "{m}");
    }
    assert_eq!(r["tree_writable"], false, "the overlay is mounted read-only");

    // The dry run inside the container plans exactly what the real run received.
    let mut dry =
        vec!["/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--dry-run", "--output", "json", "--"];
    dry.extend(SEED);
    let d = run_in(VLLM, &[GPUS8, "MC_FORCE_TCP=1"], &dry);
    assert_eq!(d.code, 0, "{}", d.stderr);
    let plan = d.json();
    assert_eq!(plan["family"], "rocm7-py312");
    assert_eq!(plan["exec"]["program"], "/usr/bin/python3.12");
    assert_eq!(strings(&plan["exec"]["argv"])[3..], strings(&r["argv"])[..]);
    for (k, v) in plan["exec"]["env"].as_object().unwrap() {
        if r["env"].get(k).is_some() {
            assert_eq!(&r["env"][k], v, "{k}");
        }
    }

    // Nothing was written into the payload: every tree still matches its record.
    let v = run_in(VLLM, &[], &["/opt/infera/bin/infera-exec", "manifest", "verify", "--digest", "/opt/infera"]);
    v.assert(0, "ok: 2 trees");
}

/// vLLM's default ROCm image today (TheRock ROCm 10 wheels: no /opt/rocm, HIP 7.15) ships
/// Mooncake: the router and a worker run, and import the image's Mooncake, not the tree's.
#[test]
fn vllm_rocm10_image_runs_the_router_and_a_worker_with_its_own_mooncake() {
    let image_mooncake = "/usr/local/lib/python3.12/dist-packages/mooncake/__init__.py";
    let router = run_in(
        VLLM_ROCM10,
        &[],
        &["/opt/infera/bin/infera-exec", "server", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B", "--port", "8000"],
    );
    assert_eq!(router.code, 0, "{}\n{}", router.stdout, router.stderr);
    let r = router.standin();
    assert_eq!((r["pid"].as_i64(), r["standin"].as_str()), (Some(1), Some("infera.server")));
    assert_eq!(r["imports"]["mooncake"]["file"], image_mooncake);

    // vLLM 0.33 is outside this release's range (the Infera snapshot's wrapper imports a module
    // it moved), refused whatever --allow says; the capabilities are the point here, made by an
    // overlay release built for it: the image's overlay, its manifests saying so.
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--"];
    cmd.extend(SEED);
    let o = run_in(VLLM_ROCM10, &[GPUS8, "MC_FORCE_TCP=1", "INFERA_ALLOW=engine-version"], &cmd);
    o.assert(69, "on which tree rocm7-py312's infera.engine.vllm fails: vLLM 0.29 moved make_arg_parser");
    let next = tempfile::tempdir().unwrap();
    let cp = Command::new("cp").arg("-a").arg(repo().join("target/e2e/overlay")).arg(next.path().join("o")).status();
    assert!(cp.unwrap().success());
    let next = next.path().join("o");
    built_for(&next, "vllm", ">=0.9, <0.34");
    let run_in = |image: &str, env: &[&str], cmd: &[&str]| run_in_overlay(image, &next, env, cmd);
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--require", "mooncake,hipfile", "--"];
    cmd.extend(SEED);
    let o = run_in(VLLM_ROCM10, &[GPUS8, "MC_FORCE_TCP=1"], &cmd);
    // No /dev/kfd here: hipFile is refused as unusable on this node, after the ROCm 10.0.0
    // release passed its >= 7.2 check.
    o.assert(
        69,
        "capability `hipfile` is provided by the tree but cannot work on this node: /dev/kfd is not in the container",
    );
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--"];
    cmd.extend(SEED);
    let o = run_in(VLLM_ROCM10, &[GPUS8, "MC_FORCE_TCP=1"], &cmd);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let r = o.standin();
    assert_eq!(r["standin"], "infera.engine.vllm");
    assert_eq!(r["imports"]["mooncake"]["file"], image_mooncake, "the image's own build");
    assert_eq!(
        r["imports"]["hipfile"]["file"],
        "/opt/infera/trees/rocm7-py312/capabilities/hipfile/hipfile/__init__.py"
    );
    assert_eq!(
        r["env"]["PYTHONPATH"],
        "/opt/infera/trees/rocm7-py312/site-packages:/opt/infera/trees/rocm7-py312/capabilities/hipfile"
    );
    // The dry run says which copy, and why.
    let mut dry =
        vec!["/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--dry-run", "--output", "json", "--"];
    dry.extend(SEED);
    let d = run_in(VLLM_ROCM10, &[GPUS8, "MC_FORCE_TCP=1"], &dry);
    assert_eq!(d.code, 0, "{}", d.stderr);
    let plan = d.json();
    assert_eq!(plan["facts"]["rocm"]["version"], "10.0.0");
    assert_eq!(plan["facts"]["rocm"]["hip"]["major"], 7);
    assert_eq!(plan["exec"]["env"]["PYTHONPATH"], r["env"]["PYTHONPATH"]);
    let mc = plan["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "mooncake").unwrap().clone();
    assert_eq!(mc["import"]["copy"], "base");
    assert_eq!(mc["import"]["from"], "/usr/local/lib/python3.12/dist-packages");
}

#[test]
fn sglang_image_selects_py310_and_refuses_hipfile() {
    let args = ["--model-path", "/models/kimi-k3", "--max-running-requests", "128"];
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--"];
    cmd.extend(args);
    let o = run_in(SGLANG, &[GPUS8], &cmd);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let r = o.standin();
    assert_eq!(r["pid"], 1);
    assert_eq!(r["standin"], "infera.engine.sglang");
    assert_eq!(r["python"], "3.10");
    assert_eq!(r["executable"], "/opt/venv/bin/python3");
    assert_eq!(r["env"]["INFERA_TREE_FAMILY"], "rocm7-py310");
    let mut want: Vec<String> = args.map(String::from).to_vec();
    want.extend(["--tp-size", "8", "--kv-cache-dtype", "auto", "--host", "0.0.0.0"].map(String::from));
    assert_eq!(strings(&r["argv"]), want);
    assert_eq!(r["imports"]["hipfile"]["ok"], false);
    assert!(r["sys_path"].to_string().contains("/opt/venv/lib/python3.10/site-packages"), "the venv is active");

    let o = run_in(
        SGLANG,
        &[],
        &["/opt/infera/bin/infera-exec", "worker", "--require", "hipfile", "--", "--model-path", "/models/kimi-k3"],
    );
    o.assert(69, "capability `hipfile` (requested by --require) cannot be supplied: tree rocm7-py310 does not declare it; trees that provide it: rocm7-py312 (for vllm)");
}

/// `kubectl kustomize` of an overlay of examples/k8s (the base plus how the overlay reaches
/// the pods).
fn kustomize(overlay: &str) -> String {
    let mut c = Command::new("kubectl");
    c.args(["kustomize"]).arg(repo().join("examples/k8s/overlays").join(overlay));
    let o = out(c);
    assert_eq!(o.code, 0, "kubectl kustomize {overlay}: {}", o.stderr);
    o.stdout
}

/// One document of a multi-document YAML text, by kind and name.
fn document(text: &str, kind: &str, name: &str) -> String {
    let o = Command::new("python3")
        .args([
            "-c",
            "import sys, yaml\nfor d in yaml.safe_load_all(sys.stdin):\n  if d and d['kind'] == sys.argv[1] and d['metadata']['name'] == sys.argv[2]: print(yaml.safe_dump(d))",
            kind,
            name,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(text.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let doc = String::from_utf8(o.stdout).unwrap();
    assert!(!doc.trim().is_empty(), "{kind}/{name} not in the kustomize output");
    doc
}

/// Both overlays build, and what they build is valid for Kubernetes 1.33 (strict), follows the
/// seed's topology, and is deployable on a single-node k3s as written.
#[test]
fn k8s_kustomize_overlays_validate_against_kubernetes_1_33() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for overlay in ["image-volume", "initcontainer"] {
        let text = kustomize(overlay);
        let f = dir.path().join(format!("{overlay}.yaml"));
        std::fs::write(&f, &text).unwrap();
        files.push(f);
        let server = document(&text, "Deployment", "kimi-k3-server");
        let router = document(&text, "Deployment", "kimi-k3-router");
        for (what, want) in [
            ("strategy", "  strategy:\n    type: Recreate\n"),
            ("startup probe", "        startupProbe:\n          failureThreshold: 1560\n          httpGet:\n            path: /health\n            port: http\n          periodSeconds: 10\n          timeoutSeconds: 10\n"),
            ("downward API", "        - name: POD_IP\n          valueFrom:\n            fieldRef:\n              fieldPath: status.podIP\n"),
            ("service account", "      serviceAccountName: infera-worker\n"),
            ("termination message", "        terminationMessagePolicy: FallbackToLogsOnError\n"),
            ("service links", "      enableServiceLinks: false\n"),
            ("shm", "      - emptyDir:\n          medium: Memory\n          sizeLimit: 64Gi\n        name: dshm\n"),
            ("model cache read-only", "      - name: models\n        persistentVolumeClaim:\n          claimName: model-cache\n          readOnly: true\n"),
            // MC_FORCE_TCP=1: Mooncake pins nothing, so no IPC_LOCK (Pod Security baseline).
            ("capabilities", "          capabilities:\n            drop:\n            - ALL\n"),
            ("model wait", "        - name: INFERA_WAIT_MODEL\n          value: '14400'\n"),
            ("template labels", "      labels:\n        app.kubernetes.io/component: worker\n        app.kubernetes.io/instance: kimi-k3\n        app.kubernetes.io/name: kimi-k3-server\n        app.kubernetes.io/part-of: infera\n"),
        ] {
            assert!(server.contains(want), "{overlay}: {what}:\n{server}");
        }
        // The real router finds the workers itself and needs the model's tokenizer.
        assert!(
            router.contains("- --k8s-label-selector\n        - app.kubernetes.io/name=kimi-k3-server\n"),
            "{router}"
        );
        assert!(router.contains("- --router-tokenizer-path\n        - /models/kimi-k3\n"), "{router}");
        assert!(router.contains("      serviceAccountName: infera-router\n"), "{router}");
        assert!(router.contains("      enableServiceLinks: false\n"));
        let svc = document(&text, "Service", "kimi-k3-server");
        assert!(svc.contains("  - name: http\n    port: 8000\n    targetPort: http\n"), "{svc}");
        let pvc = document(&text, "PersistentVolumeClaim", "model-cache");
        assert!(pvc.contains("  accessModes:\n  - ReadWriteOnce\n"), "{pvc}");
        let job = document(&text, "Job", "model-download");
        // Downloaded beside the path the worker waits for, renamed into place when complete.
        // (The script is one long YAML string, which the dump may wrap: compare its words.)
        let words = job.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("--local-dir /models/.kimi-k3.partial && mv /models/.kimi-k3.partial /models/kimi-k3"),
            "{job}"
        );
        assert!(job.contains("  ttlSecondsAfterFinished: 3600\n"), "{job}");
        // The Job and the router follow the GPU worker to the node the RWO cache binds on.
        let follow = |labels: &str| {
            format!(
                "          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector:\n              \
                 matchLabels:\n{labels}            topologyKey: kubernetes.io/hostname\n"
            )
        };
        let worker = "                app.kubernetes.io/component: worker\n                app.kubernetes.io/instance: kimi-k3\n";
        assert!(job.contains(&follow(worker)), "{job}");
        assert!(server.contains("app.kubernetes.io/component: worker\n        app.kubernetes.io/instance: kimi-k3\n"));
        assert!(router.contains(&follow("                app.kubernetes.io/name: kimi-k3-server\n")), "{router}");
        assert!(
            job.contains("app.kubernetes.io/component: model-download\n        app.kubernetes.io/instance: kimi-k3\n"),
            "{job}"
        );
        for d in [&server, &router] {
            let infera = if overlay == "image-volume" {
                "      - image:\n          pullPolicy: IfNotPresent\n          reference: registry.example.com/infera/overlay:0.1.0\n        name: infera\n"
            } else {
                "      - emptyDir:\n          sizeLimit: 4Gi\n        name: infera\n"
            };
            assert!(d.contains(infera), "{overlay}: the infera volume:\n{d}");
            assert_eq!(d.contains("initContainers:"), overlay == "initcontainer", "{d}");
        }
    }
    files.push(repo().join("examples/k8s/stack-form/worker.yaml"));
    let o = out({
        let mut c = Command::new("python3");
        c.args(["-m", "kubernetes_validate", "--strict", "-k", "1.33.0"]).args(&files);
        c
    });
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let text = o.stdout + &o.stderr;
    for f in &files[..2] {
        for res in [
            "deployment/kimi-k3-server",
            "deployment/kimi-k3-router",
            "service/kimi-k3-server",
            "service/kimi-k3",
            "persistentvolumeclaim/model-cache",
            "job/model-download",
        ] {
            assert!(text.contains(&format!("{} passed for resource {res}", f.display())), "{res}: {text}");
        }
    }
    assert!(text.contains("passed for resource deployment/kimi-k3-stack-worker"), "{text}");
    // The validator is strict: an unknown field fails (so the pass above means something).
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, std::fs::read_to_string(&files[1]).unwrap().replace("startupProbe:", "startupProbes:"))
        .unwrap();
    let mut c = Command::new("python3");
    c.args(["-m", "kubernetes_validate", "--strict", "-k", "1.33.0"]).arg(&bad);
    assert_ne!(out(c).code, 0);
}

/// Every pod of every example at the Pod Security level the README gives it, judged by
/// tests/k8s/pod-security (the admission controller's checks, themselves checked against
/// the controller's own fixtures first).
#[test]
fn k8s_examples_pod_security_levels() {
    let script = repo().join("tests/k8s/pod-security");
    let mut c = Command::new(&script);
    c.arg("--fixtures").arg(repo().join("tests/k8s/pss-fixtures"));
    out(c).assert(0, "128/128 fixtures judged as pod-security-admission judges them");

    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for overlay in ["initcontainer", "image-volume"] {
        let f = dir.path().join(format!("{overlay}.yaml"));
        std::fs::write(&f, kustomize(overlay)).unwrap();
        files.push(f);
    }
    for f in [
        "lws/vllm/kimi-k3-vllm.yaml",
        "lws/sglang/kimi-k3-sglang.yaml",
        "lws/pd/kimi-k3-pd.yaml",
        "stack-form/worker.yaml",
        "inferadeployment/kimi-k3.yaml",
    ] {
        files.push(repo().join("examples/k8s").join(f));
    }
    let mut c = Command::new(&script);
    c.args(&files);
    let o = out(c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let got: Vec<(String, String)> = o
        .stdout
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().to_string(), w.next().unwrap().to_string())
        })
        .collect();
    let want = [
        // initcontainer overlay, then image-volume
        ("restricted", "Deployment/kimi-k3-router"),
        ("baseline", "Deployment/kimi-k3-server"),
        ("restricted", "Job/model-download"),
        ("restricted", "Deployment/kimi-k3-router"),
        ("baseline", "Deployment/kimi-k3-server"),
        ("restricted", "Job/model-download"),
        ("baseline", "LeaderWorkerSet/kimi-k3/leader"),
        ("baseline", "LeaderWorkerSet/kimi-k3/worker"),
        ("baseline", "LeaderWorkerSet/kimi-k3-sglang/leader"),
        ("baseline", "LeaderWorkerSet/kimi-k3-sglang/worker"),
        // RDMA: the node's network for its RoCE GIDs, IPC_LOCK to pin memory.
        ("privileged", "LeaderWorkerSet/kimi-k3-prefill/leader"),
        ("privileged", "LeaderWorkerSet/kimi-k3-prefill/worker"),
        ("privileged", "LeaderWorkerSet/kimi-k3-decode/leader"),
        ("privileged", "LeaderWorkerSet/kimi-k3-decode/worker"),
        // The stack's kvd mlocks its arena (IPC_LOCK).
        ("privileged", "Deployment/kimi-k3-stack-worker"),
        ("baseline", "InferaDeployment/kimi-k3/server"),
        ("baseline", "InferaDeployment/kimi-k3/worker"),
    ];
    let want: Vec<(String, String)> = want.iter().map(|(l, p)| (l.to_string(), p.to_string())).collect();
    assert_eq!(got, want, "{}", o.stdout);
    // The deployment guide says the same, pod by pod.
    let guide = std::fs::read_to_string(repo().join("docs/deploying.md")).unwrap();
    for (level, pod) in &want {
        assert!(guide.contains(&format!("| `{pod}` | {level} |")), "docs/deploying.md: `{pod}` at {level}");
    }
    // The checker is not a rubber stamp: IPC_LOCK back on the worker is not baseline.
    let worker = std::fs::read_to_string(&files[0]).unwrap().replace(
        "          capabilities:\n            drop:\n            - ALL\n        startupProbe",
        "          capabilities:\n            add:\n            - IPC_LOCK\n            drop:\n            - ALL\n        startupProbe",
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, worker).unwrap();
    let mut c = Command::new(&script);
    c.arg(&bad);
    out(c).assert(0, "privileged  Deployment/kimi-k3-server  (container worker: capabilities.add ['IPC_LOCK'])");
}

/// The initContainer variant (podman 4.3 has no image volumes) run by `podman kube play`.
/// The Deployment's pod template is played as a Pod with restartPolicy OnFailure: podman
/// 4.3 restarts init containers under `Always`.
#[test]
fn kube_play_runs_the_worker_pod_spec() {
    images();
    let spec = document(&kustomize("initcontainer"), "Deployment", "kimi-k3-server");
    let spec = spec
        .replace("vllm/vllm-openai-rocm:kimi-k3", VLLM)
        .replace("registry.example.com/infera/overlay:0.1.0", OVERLAY);
    // The init container (removed by podman once it succeeded) copied the overlay: the
    // worker found and imported it from the emptyDir mounted at /opt/infera.
    let r = kube_play(&spec, "kimi-k3-server-worker");
    assert_eq!(r["pid"], 1);
    assert_eq!(r["standin"], "infera.engine.vllm");
    // One worker moves no KV: no Mooncake required, none forced over TCP.
    assert_eq!(r["env"]["MC_FORCE_TCP"], serde_json::Value::Null);
    // No GPUs in this pod: no TP default; Kimi-K3 is MLA: kv auto; the spec's args first.
    let want = [
        "--model",
        "/models/kimi-k3",
        "--served-model-name",
        "kimi-k3",
        "--trust-remote-code",
        "--max-num-seqs",
        "128",
        "--port",
        "8000",
        "--request-transport",
        "http",
        "--kv-event-transport",
        "zmq",
        "--kv-cache-dtype",
        "auto",
        "--host",
        "0.0.0.0",
    ];
    assert_eq!(strings(&r["argv"]), want);
    assert_eq!(
        r["imports"]["mooncake"]["file"],
        "/opt/infera/trees/rocm7-py312/capabilities/mooncake/mooncake/__init__.py"
    );
    assert_eq!(r["tree_writable"], false);
}

/// The router's pod as the example writes it, at Pod Security "restricted": the overlay
/// copied by the init container and the router run as uid 1000, every capability dropped.
#[test]
fn kube_play_runs_the_router_pod_spec_as_non_root() {
    images();
    let spec = document(&kustomize("initcontainer"), "Deployment", "kimi-k3-router");
    assert!(spec.contains("runAsUser: 1000"), "{spec}");
    let spec = spec
        .replace("vllm/vllm-openai-rocm:kimi-k3", VLLM)
        .replace("registry.example.com/infera/overlay:0.1.0", OVERLAY);
    let r = kube_play(&spec, "kimi-k3-router-router");
    assert_eq!(r["standin"], "infera.server");
    assert_eq!((r["uid"].as_u64(), r["gid"].as_u64()), (Some(1000), Some(1000)));
    assert_eq!(r["pid"], 1);
    assert_eq!(r["tree_writable"], false);
}

/// Play a Deployment's pod (with the example model in the model-cache volume), wait for
/// `container`, and return the stand-in's report from its logs.
fn kube_play(spec: &str, container: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let (deploy, pod) = (dir.path().join("deploy.yaml"), dir.path().join("pod.yaml"));
    std::fs::write(&deploy, spec).unwrap();
    deployment_to_pod(&deploy, &pod);
    let _ = out(podman(&["kube", "down", pod.to_str().unwrap()]));
    model_cache_volume();
    let play = out(podman(&["kube", "play", pod.to_str().unwrap()]));
    assert_eq!(play.code, 0, "{}\n{}", play.stdout, play.stderr);
    let wait = out(podman(&["wait", container]));
    let logs = out(podman(&["logs", container]));
    let _ = out(podman(&["kube", "down", pod.to_str().unwrap()]));
    let _ = out(podman(&["volume", "rm", "-f", "model-cache"]));
    assert_eq!(wait.stdout.trim(), "0", "{container} exit code; logs:\n{}{}", logs.stdout, logs.stderr);
    // podman logs interleaves the container's stdout and stderr on stdout.
    let report = logs
        .stdout
        .lines()
        .chain(logs.stderr.lines())
        .find_map(|l| l.strip_prefix("INFERA-STANDIN "))
        .expect("stand-in report");
    serde_json::from_str(report).unwrap()
}

/// kube play runs a Deployment's pod template as a Pod, with restartPolicy OnFailure
/// (podman 4.3 restarts init containers under `Always`) and without the downward-API
/// `metadata.namespace` and `status.podIP` variables (podman 4.3 cannot set them).
fn deployment_to_pod(deploy: &std::path::Path, pod: &std::path::Path) {
    let conv = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, yaml\nd = yaml.safe_load(open(sys.argv[1]))\nt = d['spec']['template']\nt['spec']['restartPolicy'] = 'OnFailure'\n\
             for c in t['spec']['containers']: c['env'] = [e for e in c.get('env', []) if e.get('valueFrom', {}).get('fieldRef', {}).get('fieldPath') not in ('metadata.namespace', 'status.podIP')]\n\
             yaml.safe_dump({'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': d['metadata']['name'], 'labels': t['metadata']['labels']}, 'spec': t['spec']}, open(sys.argv[2], 'w'))",
        )
        .arg(deploy)
        .arg(pod)
        .status()
        .unwrap();
    assert!(conv.success());
}

/// The model-cache PVC is a podman volume of that name, filled with the example model.
fn model_cache_volume() {
    let _ = out(podman(&["volume", "rm", "-f", "model-cache"]));
    assert_eq!(out(podman(&["volume", "create", "model-cache"])).code, 0);
    let fill = out(podman(&[
        "run",
        "--rm",
        "-v",
        "model-cache:/models",
        "-v",
        &format!("{}:/src:ro", repo().join("examples/models").display()),
        VLLM,
        "python3",
        "-c",
        "import shutil; shutil.copytree('/src', '/models', dirs_exist_ok=True)",
    ]));
    assert_eq!(fill.code, 0, "{}", fill.stderr);
}

/// The local dry run against an image: the image's root read with `--root`, as mounted by
/// `podman image mount`, gives the same plan as inside the container.
#[test]
fn local_dry_run_against_the_image_root() {
    images();
    let m = out(podman(&["image", "mount", VLLM]));
    assert_eq!(m.code, 0, "{}", m.stderr);
    let root = m.stdout.trim().to_string();
    let overlay = repo().join("target/e2e/overlay");
    let host = infera(&["worker", "--dry-run", "--output", "json", "--root", &root, "--"])
        .args(SEED)
        .overlay(&overlay)
        .env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
        .env("MC_FORCE_TCP", "1")
        .run();
    let _ = out(podman(&["image", "unmount", VLLM]));
    assert_eq!(host.code, 0, "{}", host.stderr);
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--dry-run", "--output", "json", "--"];
    cmd.extend(SEED);
    let inside = run_in(VLLM, &[GPUS8, "MC_FORCE_TCP=1"], &cmd);
    assert_eq!(inside.code, 0, "{}", inside.stderr);
    let (h, i) = (host.json(), inside.json());
    assert_eq!(h["family"], i["family"]);
    assert_eq!(h["facts"]["python"], i["facts"]["python"]);
    assert_eq!(h["facts"]["rocm"], i["facts"]["rocm"]);
    assert_eq!(h["exec"]["program"], i["exec"]["program"], "the plan names container paths");
    assert_eq!(h["exec"]["host_program"], format!("{root}/usr/bin/python3.12"));
    assert!(i["exec"].get("host_program").is_none());
    assert_eq!(
        strings(&h["exec"]["argv"])[3..11],
        strings(&i["exec"]["argv"])[3..11],
        "user args, then TP from the GPUs"
    );
    // The model is a volume in the pod, not part of the image: the host run says so and
    // skips the model rules instead of guessing; inside, the model is read.
    assert!(h["findings"].to_string().contains("`/models/kimi-k3` is not in the image root (a volume in the pod?)"));
    assert_eq!(i["exec"]["added_args"], serde_json::json!(KIMI_TP8_ADDED));
}

/// The README's form for an image whose CPython is only on its own PATH (sglang's venv):
/// `podman image mount` for the files, `podman image inspect` for the environment
/// (`--image-env`): the same interpreter and plan as inside the container. Without the
/// image's environment the host's PATH finds no python3 in that image.
#[test]
fn local_dry_run_with_the_images_environment() {
    images();
    let m = out(podman(&["image", "mount", SGLANG]));
    assert_eq!(m.code, 0, "{}", m.stderr);
    let root = m.stdout.trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let inspect = dir.path().join("image.json");
    let i = out(podman(&["image", "inspect", SGLANG]));
    assert_eq!(i.code, 0, "{}", i.stderr);
    std::fs::write(&inspect, &i.stdout).unwrap();
    let overlay = repo().join("target/e2e/overlay");
    let args = ["--model-path", "/models/kimi-k3"];
    let with = infera(&["worker", "--dry-run", "--output", "json", "--root", &root, "--image-env"])
        .args([inspect.as_os_str(), std::ffi::OsStr::new("--")])
        .args(args)
        .overlay(&overlay)
        .env("HIP_VISIBLE_DEVICES", "0,1")
        .run();
    let without = infera(&["worker", "--dry-run", "--root", &root, "--"])
        .args(args)
        .overlay(&overlay)
        .env("HIP_VISIBLE_DEVICES", "0,1")
        .run();
    let _ = out(podman(&["image", "unmount", SGLANG]));
    assert_eq!(with.code, 0, "{}", with.stderr);
    assert_eq!(without.code, 66, "{}", without.stderr);
    assert!(without.stderr.starts_with("error[python-missing]: no `python3` or `python` on the container's PATH"));
    let mut cmd = vec!["/opt/infera/bin/infera-exec", "worker", "--dry-run", "--output", "json", "--"];
    cmd.extend(args);
    let inside = run_in(SGLANG, &["HIP_VISIBLE_DEVICES=0,1"], &cmd);
    assert_eq!(inside.code, 0, "{}", inside.stderr);
    let (h, i) = (with.json(), inside.json());
    assert_eq!(h["facts"]["python"], i["facts"]["python"]);
    assert_eq!(h["facts"]["python"]["executable"], "/opt/venv/bin/python3");
    assert_eq!(h["family"], i["family"]);
    assert_eq!(h["exec"]["program"], i["exec"]["program"]);
    // The image's PATH after the tree's bin/ (the overlay's directory differs: the host's
    // staged copy, /opt/infera inside).
    let after_tree = |v: &serde_json::Value| v.as_str().unwrap().split_once(':').unwrap().1.to_string();
    assert_eq!(after_tree(&h["exec"]["env"]["PATH"]), after_tree(&i["exec"]["env"]["PATH"]));
    assert!(after_tree(&h["exec"]["env"]["PATH"]).starts_with("/opt/venv/bin:"));
}

/// `--init` as the container's PID 1: `podman stop` sends SIGTERM, the launcher forwards
/// it, the engine dies of it, the container exits 143, and the orphans it left were reaped.
#[test]
fn init_mode_is_pid1_and_podman_stop_exits_143() {
    images();
    let name = format!("infera-init-{}", std::process::id());
    let mut c =
        podman(&["run", "-d", "--name", &name, "--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
    c.args([
        "-e",
        "INFERA_STANDIN_WAIT=120",
        "-e",
        "INFERA_STANDIN_SIGNALS=default",
        "-e",
        "INFERA_STANDIN_ORPHANS=20",
    ]);
    c.args([VLLM, "/opt/infera/bin/infera-exec", "server", "--init", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"]);
    let started = out(c);
    assert_eq!(started.code, 0, "{}", started.stderr);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut logs = out(podman(&["logs", &name]));
    while !logs.stdout.contains("INFERA-STANDIN ") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        logs = out(podman(&["logs", &name]));
    }
    // PID 1's children and the zombies, until the orphans (0.2 s) have exited and been reaped:
    // only the engine is left under the init (a zombie would stay, and fail below).
    let scan = "import os\nz=[];k=[]\nfor p in os.listdir('/proc'):\n  if p.isdigit():\n    try: s=open('/proc/%s/stat'%p).read()\n    except OSError: continue\n    r=s.rsplit(')',1)[1].split()\n    if r[0]=='Z': z.append(p)\n    if r[1]=='1': k.append(p)\nprint('ZOMBIES', len(z))\nprint('CHILDREN', len(k))\nprint('PID1', open('/proc/1/cmdline').read().split(chr(0))[0])";
    let mut z = out(podman(&["exec", &name, "python3", "-c", scan]));
    while !z.stdout.contains("CHILDREN 1\n")
        && std::time::Instant::now() < deadline + std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
        z = out(podman(&["exec", &name, "python3", "-c", scan]));
    }
    let stop = out(podman(&["stop", "-t", "20", &name]));
    let code = out(podman(&["inspect", "--format", "{{.State.ExitCode}}", &name]));
    let _ = out(podman(&["rm", "-f", &name]));
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    let r = logs.standin();
    assert_ne!(r["pid"], 1, "the engine is init's child");
    assert!(z.stdout.contains("PID1 /opt/infera/bin/infera-exec"), "{}{}", z.stdout, z.stderr);
    assert!(z.stdout.contains("ZOMBIES 0"), "{}{}", z.stdout, z.stderr);
    assert_eq!(code.stdout.trim(), "143", "the engine died of the forwarded SIGTERM");
}

/// `podman run` with the overlay mounted and CAP_IPC_LOCK added.
fn with_ipc_lock() -> Command {
    podman(&[
        "run",
        "--rm",
        "--cap-add",
        "IPC_LOCK",
        "--mount",
        &format!("type=image,source={OVERLAY},target=/opt/infera"),
    ])
}

/// A real lowered memlock limit (setrlimit by the runtime) with an RDMA device node present:
/// Mooncake cannot register memory, and the launcher refuses before the engine starts.
#[test]
fn mooncake_refused_under_a_low_memlock_limit() {
    // Explicit --ulimit replaces containers.conf defaults: restate the ones this sandbox allows.
    let dev = [
        "--device",
        "/dev/null:/dev/infiniband/uverbs0",
        "--ulimit",
        "memlock=65536:65536",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ];
    images();
    let mut c = podman(&["run", "--rm", "--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
    c.args(dev).args([VLLM, "/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--", "--model", "/m"]);
    let o = out(c);
    o.assert(69, "capability `mooncake` is provided by the tree but cannot work on this node: the memlock limit is 64 KiB and CAP_IPC_LOCK is not effective");
    assert!(o.stderr.contains("hint: set MC_FORCE_TCP=1"), "{}", o.stderr);
    // With CAP_IPC_LOCK it is usable; `check` shows the whole table and the process facts.
    let mut c = with_ipc_lock();
    c.args(dev).args(["-e", GPUS8, VLLM, "/opt/infera/bin/infera-exec", "check", "--require", "mooncake"]);
    let o = out(c);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    for want in [
        "memlock   64 KiB",
        "CAP_IPC_LOCK",
        "bounding  ",
        "1 RDMA devices",
        "mooncake     yes        yes       yes     tree",
        "hipfile      no         yes       no      tree   ROCm 7.0.0",
    ] {
        assert!(o.stdout.contains(want), "{want:?} in:\n{}", o.stdout);
    }
    assert!(o.stdout.contains("[gpus-not-present] 8 GPUs expected"), "{}", o.stdout);
    // ...but not once --drop-caps takes CAP_IPC_LOCK away: the plan judges the engine's process.
    let mut c = with_ipc_lock();
    c.args(dev).args([
        VLLM,
        "/opt/infera/bin/infera-exec",
        "worker",
        "--require",
        "mooncake",
        "--drop-caps",
        "net_bind_service",
        "--dry-run",
    ]);
    out(c).assert(69, "the memlock limit is 64 KiB and CAP_IPC_LOCK is not effective");
    // Without the device: no RDMA.
    let mut c = podman(&["run", "--rm", "--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
    c.args([VLLM, "/opt/infera/bin/infera-exec", "worker", "--require", "mooncake", "--", "--model", "/m"]);
    out(c).assert(69, "no RDMA devices (/dev/infiniband/uverbs*) in the container");
}

/// The download Job and the worker start together: with INFERA_WAIT_MODEL the worker waits
/// for the model volume to be filled (the Job renames the finished download into place)
/// instead of crash-looping on `model-missing`, then plans with the model's facts (Kimi-K3
/// is MLA: `--kv-cache-dtype auto`). Without the model in time: 66, saying it waited.
#[test]
fn the_worker_waits_for_the_model_the_download_job_fills() {
    images();
    let vol = "infera-wait-model-test";
    let _ = out(podman(&["volume", "rm", "-f", vol]));
    assert_eq!(out(podman(&["volume", "create", vol])).code, 0);
    let worker = |env: &str, extra: &[&str]| {
        let mut c = podman(&["run", "--rm", "--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
        c.args(["-v", &format!("{vol}:/models:ro"), "-e", env, "-e", "MC_FORCE_TCP=1", VLLM]);
        c.args(["/opt/infera/bin/infera-exec", "worker"]).args(extra).arg("--").args(SEED);
        c
    };
    // The dry run does not wait, and says what the real run would do.
    let d = out(worker("INFERA_WAIT_MODEL=600", &["--dry-run"]));
    d.assert(66, "error[model-missing]: the model path `/models/kimi-k3` does not exist in this container (a real run in the pod waits up to 600 s for it: INFERA_WAIT_MODEL)");
    // Too short a wait: refused, saying how long it waited.
    let t = out(worker("INFERA_WAIT_MODEL=1", &[]));
    t.assert(66, "does not exist in this container after waiting 1 s for it (INFERA_WAIT_MODEL)");
    assert!(
        t.stderr.contains(
            "[model-wait] `/models/kimi-k3` does not exist yet: waiting up to 1 s for it (INFERA_WAIT_MODEL)"
        ),
        "{}",
        t.stderr
    );
    // The real wait: once the worker says it waits, the "Job" writes beside the path and
    // renames it into place.
    let mut w = worker("INFERA_WAIT_MODEL=120", &[]);
    let mut child = w.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (waiting, said) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if line.contains("[model-wait]") {
                let _ = waiting.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    said.recv_timeout(std::time::Duration::from_secs(60)).expect("the worker never said it waits for the model");
    let models = repo().join("examples/models");
    let fill = out(podman(&[
        "run", "--rm", "-v", &format!("{vol}:/models"), "-v", &format!("{}:/src:ro", models.display()), VLLM,
        "python3", "-c",
        "import os, shutil; shutil.copytree('/src/kimi-k3', '/models/.kimi-k3.partial'); os.rename('/models/.kimi-k3.partial', '/models/kimi-k3')",
    ]));
    assert_eq!(fill.code, 0, "{}", fill.stderr);
    let o = child.wait_with_output().unwrap();
    let _ = out(podman(&["volume", "rm", "-f", vol]));
    let o = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: stderr.join().unwrap(),
    };
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(
            "[model-wait] `/models/kimi-k3` does not exist yet: waiting up to 120 s for it (INFERA_WAIT_MODEL)"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("[model-appeared] `/models/kimi-k3` appeared after "), "{}", o.stderr);
    let r = o.standin();
    assert_eq!(r["pid"], 1);
    let argv = strings(&r["argv"]);
    assert!(argv.windows(2).any(|p| p == ["--kv-cache-dtype", "auto"]), "the MLA rule saw the model: {argv:?}");
}

// ---- The Infera stack's own form: its payload image, its initContainer copy, its commands ----

const PAYLOAD: &str = "localhost/infera-payload:test";

/// What the stack's initContainer does: the payload image copies /payload into a fresh
/// volume (`sh -c "cp -a /payload/. /overlay/"`), which the engine container mounts read-only.
fn stack_volume(name: &str) -> String {
    images();
    let _ = out(podman(&["volume", "rm", "-f", name]));
    assert_eq!(out(podman(&["volume", "create", name])).code, 0);
    let cp = out(podman(&[
        "run",
        "--rm",
        "-v",
        &format!("{name}:/overlay"),
        PAYLOAD,
        "sh",
        "-c",
        "cp -a /payload/. /overlay/",
    ]));
    assert_eq!(cp.code, 0, "{}", cp.stderr);
    name.to_string()
}

fn run_stack(image: &str, volume: &str, extra: &[&str], env: &[&str], cmd: &[&str]) -> Out {
    let models = repo().join("examples/models");
    let mut c = podman(&["run", "--rm", "-v", &format!("{volume}:/overlay:ro")]);
    c.args(["-v", &format!("{}:/models:ro", models.display())]).args(extra);
    for e in env {
        c.args(["-e", e]);
    }
    c.arg(image).args(cmd);
    out(c)
}

/// The dry run (INFERA_DRY_RUN, as a pod spec would set it) plans what the real run received.
fn dry_matches(plan: &serde_json::Value, r: &serde_json::Value) {
    let argv = &plan["exec"]["argv"].as_array().unwrap();
    let skip = argv.iter().position(|a| a == "-m").map_or(1, |m| m + 2);
    assert_eq!(serde_json::Value::Array(argv[skip..].to_vec()), r["argv"]);
    assert_eq!(plan["exec"]["cwd"], r["cwd"]);
    for (k, v) in r["environ"].as_object().unwrap() {
        if k != "HOSTNAME" && k != "INFERA_DRY_RUN" && k != "INFERA_OUTPUT" {
            assert_eq!(&plan["exec"]["env"][k], v, "{k}");
        }
    }
}

#[test]
fn the_stacks_pod_spec_commands_run_as_written() {
    let vol = stack_volume("infera-stack-test");
    let launcher = "/overlay/bin/infera-exec";
    let workers: [(&str, &[&str], &[&str], &str); 4] = [
        (
            VLLM,
            &[
                "python3",
                "-m",
                "infera.engine.vllm",
                "--host",
                "0.0.0.0",
                "--port",
                "30000",
                "--model",
                "/models/kimi-k3",
                "--served-model-name",
                "kimi-k3",
                "--tensor-parallel-size",
                "8",
                "--kv-event-transport",
                "zmq",
                "--request-transport",
                "http",
            ],
            &[GPUS8],
            "infera.engine.vllm",
        ),
        (
            SGLANG,
            &[
                "python3",
                "-m",
                "infera.engine.sglang",
                "--host",
                "0.0.0.0",
                "--port",
                "30000",
                "--disaggregation-mode",
                "prefill",
                "--model-path",
                "/models/kimi-k3",
                "--tp-size",
                "1",
                "--attention-backend",
                "aiter",
                "--trust-remote-code",
                "--mem-fraction-static",
                "0.8",
                "--kv-event-transport",
                "zmq",
                "--request-transport",
                "http",
                "--disaggregation-transfer-backend",
                "mooncake",
            ],
            // POD_IP from the downward API, as the stack's pod specs set it.
            &["INFERA_REQUIRE_NATIVE=mooncake", "MC_FORCE_TCP=1", "POD_IP=10.88.0.5"],
            "infera.engine.sglang",
        ),
        (
            VLLM,
            &[
                "python3",
                "-m",
                "infera.server",
                "--host",
                "0.0.0.0",
                "--port",
                "8000",
                "--router-tokenizer-path",
                "/models/kimi-k3",
                "--request-transport",
                "http",
                "--kv-event-transport",
                "zmq",
            ],
            &[],
            "infera.server",
        ),
        (
            VLLM,
            &[
                "python3",
                "-m",
                "infera.kvd",
                "--socket",
                "/kvd/kvd.sock",
                "--max-bytes",
                "34359738368",
                "--long-path",
                "/l3/long",
                "--long-bytes",
                "107374182400",
            ],
            &[],
            "infera.kvd",
        ),
    ];
    for (image, cmd, env, module) in workers {
        let mut full = vec![launcher];
        full.extend(cmd);
        let o = run_stack(image, &vol, &[], env, &full);
        assert_eq!(o.code, 0, "{module}: {}\n{}", o.stdout, o.stderr);
        let r = o.standin();
        assert_eq!(r["pid"], 1, "{module}: the program is the container's PID 1");
        assert_eq!(r["standin"], module);
        assert_eq!(r["cwd"], "/", "{module}: never the image's WORKDIR");
        assert_eq!(
            serde_json::Value::Array(r["argv"].as_array().unwrap()[..cmd.len() - 3].to_vec()),
            serde_json::json!(cmd[3..])
        );
        let (py, native) = if image == SGLANG { ("py310", "rocm7-py310") } else { ("py312", "rocm7-py312") };
        assert_eq!(r["env"]["PYTHONPATH"], format!("/overlay/native/{native}:/overlay/{py}"), "{module}");
        assert_eq!(
            r["imports"]["mooncake"]["file"],
            format!("/overlay/native/{native}/mooncake/__init__.py"),
            "{module}"
        );
        assert_eq!(r["tree_writable"], false);
        match module {
            "infera.engine.vllm" => {
                assert_eq!(r["patched"]["vllm"], serde_json::json!(["10_standin_marker.py cwd=/"]));
                let added = &r["argv"].as_array().unwrap()[cmd.len() - 3..];
                assert_eq!(
                    serde_json::Value::Array(added.to_vec()),
                    serde_json::json!(["--mm-encoder-tp-mode", "data", "--kv-cache-dtype", "auto"])
                );
            }
            "infera.engine.sglang" => {
                // WORKDIR /sgl-workspace holds the sglang checkout, installed editable: run from
                // there it would be a namespace package; from / the editable finder's real one.
                assert_eq!(r["origins"]["sglang"], "/sgl-workspace/sglang/python/sglang/__init__.py");
                assert_eq!(r["patched"]["sglang"], serde_json::json!(["10_standin_marker.py cwd=/"]));
            }
            // Patches are for runs that load engine code; a generic run (kvd, Ray) may.
            "infera.kvd" => assert_eq!(r["patched"]["vllm"], serde_json::json!(["10_standin_marker.py cwd=/"])),
            _ => assert_eq!(r["patched"]["vllm"], serde_json::json!([]), "{module}: the router patches nothing"),
        }
        let mut denv: Vec<&str> = env.to_vec();
        denv.extend(["INFERA_DRY_RUN=1", "INFERA_OUTPUT=json"]);
        let d = run_stack(image, &vol, &[], &denv, &full);
        assert_eq!(d.code, 0, "{module}: {}", d.stderr);
        dry_matches(&d.json(), &r);
    }
    // Refused the same way inside: hipFile is not in the sglang tree.
    let o = run_stack(
        SGLANG,
        &vol,
        &[],
        &["INFERA_REQUIRE_NATIVE=hipfile"],
        &[launcher, "python3", "-m", "infera.engine.sglang"],
    );
    o.assert(69, "capability `hipfile` (requested by INFERA_REQUIRE_NATIVE) cannot be supplied: tree rocm7-py310 does not declare it");
    let _ = out(podman(&["volume", "rm", "-f", &vol]));
}

/// The host's RoCE provider, mounted as the stack's pod specs mount it, is what libibverbs
/// would load first (RDMAV_DRIVERS through the payload's link), with nothing written.
#[test]
fn the_host_libionic_is_reached_through_the_payloads_link() {
    let vol = stack_volume("infera-stack-ionic");
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("libionic.so");
    std::fs::write(&host, b"\x7fELF host build 54.0-187").unwrap();
    let providers = dir.path().join("providers");
    std::fs::create_dir(&providers).unwrap();
    std::fs::write(providers.join("libmlx5-rdmav34.so"), b"").unwrap();
    let extra = [
        "-v",
        &format!("{}:/host-libionic/libionic.so:ro", host.display()),
        "-v",
        &format!("{}:/usr/lib/x86_64-linux-gnu/libibverbs:ro", providers.display()),
    ];
    let o = run_stack(
        VLLM,
        &vol,
        &extra,
        &[],
        &["/overlay/bin/infera-exec", "python3", "-m", "infera.server", "--router-tokenizer-path=Qwen/Qwen3-0.6B"],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let r = o.standin();
    assert_eq!(r["environ"]["RDMAV_DRIVERS"], "/overlay/rdma/libionic");
    assert_eq!(r["rdma_drivers"]["/overlay/rdma/libionic"]["34"]["realpath"], "/host-libionic/libionic.so");
    assert_eq!(r["rdma_drivers"]["/overlay/rdma/libionic"]["34"]["size"], 24);
    let _ = out(podman(&["volume", "rm", "-f", &vol]));
}

/// The stack's pod spec form (the overlay image installing itself into an emptyDir at
/// /overlay, the command form) run by `podman kube play`.
#[test]
fn kube_play_runs_the_stack_form_pod_spec() {
    images();
    let spec = std::fs::read_to_string(repo().join("examples/k8s/stack-form/worker.yaml")).unwrap();
    // The example's image (the stack's kimi-k3 build, ROCm 7.x) as its stand-in: a ROCm >= 7.2 vLLM image.
    let image = "vllm/vllm-openai-rocm:kimi-k3@sha256:5aa7e626ff73672f5ca7aae46754570488c23d33ca1ac90756a1d2d1a3fe099b";
    assert!(spec.contains(image), "the example names its image");
    let spec = spec.replace(image, VLLM72).replace("registry.example.com/infera/overlay:0.1.0", OVERLAY);
    // As written the pod requires hipFile. Its ROCm is one hipFile runs on, so what is
    // missing is only what a GPU node has: /dev/kfd (the stack's reason for setting it).
    let mut c = podman(&[
        "run",
        "--rm",
        "-v",
        &format!("{}:/overlay:ro", stack_volume("infera-stack-form-test")),
        "-e",
        "INFERA_REQUIRE_NATIVE=hipfile",
        VLLM72,
    ]);
    c.args(["/overlay/bin/infera-exec", "python3", "-m", "infera.engine.vllm", "--model", "/m"]);
    let refused = out(c);
    refused.assert(69, "hipfile");
    assert!(refused.stderr.contains("/dev/kfd"), "refused for the GPU, not the image: {}", refused.stderr);
    assert!(!refused.stderr.contains("older than 7.2"), "{}", refused.stderr);
    let required = "{name: INFERA_REQUIRE_NATIVE, value: hipfile}";
    assert_eq!(spec.matches(required).count(), 2, "the engine and kvd both require hipfile");
    let spec = spec.replace(required, "{name: INFERA_REQUIRE_NATIVE, value: \"\"}");
    let r = kube_play(&spec, "kimi-k3-stack-worker-main");
    assert_eq!(r["pid"], 1);
    assert_eq!(r["standin"], "infera.engine.vllm");
    // The overlay image installed itself into the emptyDir (no shell in it): its trees layout.
    assert_eq!(
        r["env"]["PYTHONPATH"],
        "/overlay/trees/rocm7-py312/site-packages:/overlay/trees/rocm7-py312/capabilities/hipfile"
    );
    assert_eq!(r["cwd"], "/");
    assert_eq!(r["tree_writable"], false);
}

/// The README's way to get the overlay image: `scripts/build-overlay-image` from a clone gives
/// one image with the real infera package, which as an initContainer installs itself into
/// an empty volume (`infera-exec install`, no shell in a FROM scratch image), and from which
/// a stock engine image runs the launcher. (The name is a private one here: the test must not
/// retag what a user built under the examples' name.)
#[test]
fn the_overlay_image_from_a_clone_installs_itself_and_runs() {
    images();
    let name = "localhost/infera/overlay:clone-test";
    let archive = tempfile::tempdir().unwrap();
    let tar = archive.path().join("overlay.tar");
    let mut c = Command::new("flock");
    let built = podman_env(&mut c)
        .arg(repo().join("target/e2e.lock"))
        .arg(repo().join("scripts/build-overlay-image"))
        .args(["--tag", name, "--save", tar.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(built.status.success(), "{stdout}{}", String::from_utf8_lossy(&built.stderr));
    assert!(
        stdout.contains(&format!("built {name} (rocm7-py310 rocm7-py312; Mooncake and hipFile are stand-ins)")),
        "{stdout}"
    );
    assert!(std::fs::metadata(&tar).unwrap().len() > 1 << 20, "the archive holds the image");
    let labels = out(podman(&["image", "inspect", "--format", "{{json .Labels}}", name]));
    let l: serde_json::Value = serde_json::from_str(&labels.stdout).unwrap();
    assert_eq!(l["ai.infera.overlay.version"], env!("CARGO_PKG_VERSION"));
    // The real infera package, not the stand-in tree of the other container tests.
    let root = out(podman(&["image", "mount", name]));
    assert_eq!(root.code, 0, "{}", root.stderr);
    let site = PathBuf::from(root.stdout.trim()).join("trees/rocm7-py312/site-packages");
    for f in ["infera/server/args.py", "infera/engine/vllm/args.py", "infera/kvd/__init__.py"] {
        assert!(site.join(f).is_file(), "{f} in the image");
    }
    let _ = out(podman(&["image", "unmount", name]));

    // The initContainer of the examples: the image's own launcher copies the overlay.
    let vol = "infera-clone-test";
    let _ = out(podman(&["volume", "rm", "-f", vol]));
    assert_eq!(out(podman(&["volume", "create", vol])).code, 0);
    let inst = out(podman(&["run", "--rm", "-v", &format!("{vol}:/overlay"), name, "install", "/overlay"]));
    assert_eq!(inst.code, 0, "{}{}", inst.stdout, inst.stderr);
    assert!(inst.stdout.starts_with("installed the overlay into /overlay ("), "{}", inst.stdout);
    assert!(inst.stdout.ends_with("files); trees match their records\n"), "{}", inst.stdout);
    // The engine container: the stock image with that volume read-only at /overlay.
    let models = repo().join("examples/models");
    let mut c = podman(&["run", "--rm", "-v", &format!("{vol}:/overlay:ro")]);
    c.args(["-v", &format!("{}:/models:ro", models.display()), "-e", GPUS8, VLLM72]);
    c.args(["/overlay/bin/infera-exec", "check", "--", "--model", "/models/kimi-k3"]);
    let o = out(c);
    let _ = out(podman(&["volume", "rm", "-f", vol]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("tree      rocm7-py312 (/overlay/trees/rocm7-py312)"), "{}", o.stdout);
    assert!(o.stdout.contains("added     --tensor-parallel-size 8"), "{}", o.stdout);
}

/// What a kustomize output's pods name and what it defines: claimed PVCs and their access
/// modes, ServiceAccounts named and defined (JSON, by a walk over every document).
fn unit_facts(text: &str) -> serde_json::Value {
    const WALK: &str = r#"
import json, sys, yaml
claims, sas, pvcs, defined_sas, kinds, shm = set(), set(), {}, set(), [], []
def pod(spec):
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec.get("containers", []):
        gpus = int(c.get("resources", {}).get("limits", {}).get("amd.com/gpu", 0))
        mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"), None)
        ed = (vols.get(mount["name"], {}) if mount else {}).get("emptyDir") or {}
        shm.append([c["name"], gpus, ed.get("medium"), ed.get("sizeLimit")])
def walk(x):
    if isinstance(x, dict):
        if isinstance(x.get("containers"), list): pod(x)
        pvc = x.get("persistentVolumeClaim")
        if isinstance(pvc, dict): claims.add(pvc["claimName"])
        if isinstance(x.get("serviceAccountName"), str): sas.add(x["serviceAccountName"])
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
for d in yaml.safe_load_all(sys.stdin):
    if not d: continue
    kinds.append(d["kind"])
    if d["kind"] == "PersistentVolumeClaim": pvcs[d["metadata"]["name"]] = d["spec"]["accessModes"]
    elif d["kind"] == "ServiceAccount": defined_sas.add(d["metadata"]["name"])
    else: walk(d)
print(json.dumps({"claims": sorted(claims), "sas": sorted(sas), "pvcs": pvcs, "defined_sas": sorted(defined_sas), "kinds": kinds, "shm": shm}))
"#;
    let mut c =
        Command::new("python3").args(["-c", WALK]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The node-profile DaemonSet validates (Kubernetes 1.33, strict) and runs the launcher where
/// the overlay image has it (`bin/infera-exec`, overlay-layout/README.md).
#[test]
fn the_node_profile_daemonset_validates() {
    let file = repo().join("examples/k8s/node-profile/daemonset.yaml");
    let valid = out({
        let mut c = Command::new(repo().join("tests/k8s/validate-lws"));
        c.arg(&file);
        c
    });
    assert_eq!(valid.code, 0, "{}{}", valid.stdout, valid.stderr);
    let said = format!("{}{}", valid.stdout, valid.stderr);
    assert!(said.contains("passed for resource daemonset/infera-node-profile"), "{said}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(r#"command: ["/bin/infera-exec", "node", "-o", "json"]"#));
    let layout = std::fs::read_to_string(repo().join("overlay-layout/README.md")).unwrap();
    assert!(layout.contains("  bin/infera-exec "), "the overlay image holds the launcher at bin/infera-exec");
}

/// Every scenario of examples/k8s/README.md's index deploys as a unit: `kubectl kustomize` of
/// its directory validates (the real CRDs, Kubernetes 1.33 strict), defines every PVC and
/// ServiceAccount its pods name (the operator's InferaDeployment brings its own accounts),
/// the multi-node groups' model volume is ReadWriteMany by construction, and a kustomize
/// `images:` rename reaches every place an image is named, image volumes included.
#[test]
fn every_k8s_scenario_deploys_as_a_unit() {
    let k8s = repo().join("examples/k8s");
    let index = std::fs::read_to_string(k8s.join("README.md")).unwrap();
    let dirs: Vec<&str> = index
        .split("kubectl apply -k ")
        .skip(1)
        .map(|rest| rest.split(|c: char| c == '`' || c.is_whitespace()).next().unwrap())
        .collect();
    assert_eq!(
        dirs,
        [
            "overlays/initcontainer",
            "overlays/image-volume",
            "stack-form",
            "inferadeployment",
            "lws/vllm",
            "lws/sglang",
            "lws/pd"
        ]
    );
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&k8s, tmp.path().join("k8s")).unwrap();
    for dir in dirs {
        let built = out({
            let mut c = Command::new("kubectl");
            c.arg("kustomize").arg(k8s.join(dir));
            c
        });
        assert_eq!(built.code, 0, "{dir}: {}", built.stderr);
        let file = tmp.path().join(dir.replace('/', "-") + ".yaml");
        std::fs::write(&file, &built.stdout).unwrap();
        let valid = out({
            let mut c = Command::new(repo().join("tests/k8s/validate-lws"));
            c.arg(&file);
            c
        });
        assert_eq!(valid.code, 0, "{dir}: {}{}", valid.stdout, valid.stderr);

        let f = unit_facts(&built.stdout);
        for claim in f["claims"].as_array().unwrap() {
            let modes = &f["pvcs"][claim.as_str().unwrap()];
            assert!(modes.is_array(), "{dir}: PVC {claim} is named but not defined");
            if dir.starts_with("lws/") {
                assert_eq!(modes, &serde_json::json!(["ReadWriteMany"]), "{dir}: {claim} is read from several nodes");
            }
        }
        if dir != "inferadeployment" {
            for sa in f["sas"].as_array().unwrap() {
                assert!(f["defined_sas"].as_array().unwrap().contains(sa), "{dir}: ServiceAccount {sa} is not defined");
            }
        }
        assert!(f["kinds"].as_array().unwrap().contains(&"Job".into()), "{dir}: the model download comes with it");
        // Every GPU container of more than one GPU has a memory-backed /dev/shm of at least the
        // preflight's estimate (128 MiB a rank): the 64 MiB default would be refused.
        let mut gpu_pods = 0;
        for c in f["shm"].as_array().unwrap() {
            let gpus = c[1].as_u64().unwrap();
            if gpus > 1 {
                gpu_pods += 1;
                assert_eq!(c[2], "Memory", "{dir}: {c}: /dev/shm is an emptyDir of medium Memory");
                let gi: u64 =
                    c[3].as_str().and_then(|s| s.strip_suffix("Gi")).and_then(|n| n.parse().ok()).unwrap_or(0);
                assert!(gi << 30 >= gpus * (128 << 20), "{dir}: {c}: sizeLimit");
            }
        }
        assert!(gpu_pods > 0, "{dir}: a GPU pod");

        // A rename as a user writes it, beside the scenario.
        let user = tmp.path().join(format!("user-{}", dir.replace('/', "-")));
        std::fs::create_dir(&user).unwrap();
        std::fs::write(
            user.join("kustomization.yaml"),
            format!(
                "resources: [../k8s/{dir}]\nimages:\n  - {{name: registry.example.com/infera/overlay, newName: my.registry/infera/overlay}}\n  \
                 - {{name: vllm/vllm-openai-rocm, newName: my.registry/vllm-openai-rocm}}\n  \
                 - {{name: lmsysorg/sglang, newName: my.registry/sglang}}\n"
            ),
        )
        .unwrap();
        let renamed = out({
            let mut c = Command::new("kubectl");
            c.arg("kustomize").arg(&user);
            c
        });
        assert_eq!(renamed.code, 0, "{dir}: {}", renamed.stderr);
        let names = built.stdout.matches("registry.example.com/infera/overlay:0.1.0").count();
        assert!(names > 0, "{dir} names the overlay image");
        assert_eq!(renamed.stdout.matches("my.registry/infera/overlay:0.1.0").count(), names, "{dir}");
        for old in ["registry.example.com/", "vllm/vllm-openai-rocm:", "lmsysorg/sglang:"] {
            assert!(!renamed.stdout.contains(old), "{dir}: `{old}` left after the rename");
        }
    }
}

/// docs/walkthrough.md's commands, run as written where they can run here: the overlay image
/// built from the clone, the engine image asked before any GPU (a stand-in of the same layout
/// for `docker.io/vllm/vllm-openai-rocm:kimi-k3`, the example model for /data/models), the
/// slip refused, the push (to an OCI layout for the registry), the kustomization built (the
/// apply and what follows need a cluster: the quickstart runs them on this machine's stack).
#[test]
fn walkthrough_commands_run_as_written() {
    images();
    let doc = std::fs::read_to_string(repo().join("docs/walkthrough.md")).unwrap();
    let blocks: Vec<&str> = doc.split("```sh\n").skip(1).map(|b| b.split("```").next().unwrap().trim()).collect();
    assert_eq!(blocks.len(), 7, "{blocks:?}");
    let pushed = tempfile::tempdir().unwrap();
    let here = |cmd: &str| {
        cmd.replace("docker.io/vllm/vllm-openai-rocm:kimi-k3", VLLM72)
            .replace("/data/models", repo().join("examples/models").to_str().unwrap())
            .replace("docker://my.registry/infera/overlay:0.1.0", &format!("oci:{}:0.1.0", pushed.path().display()))
            .replace(" | kubectl apply -f -", "")
    };
    let sh = |cmd: &str| {
        let mut c = Command::new("flock");
        c.arg(repo().join("target/e2e.lock")).args(["sh", "-c", cmd]).current_dir(repo());
        podman_env(&mut c);
        out(c)
    };
    let build = sh(&here(blocks[0]));
    assert_eq!(build.code, 0, "{}", build.stderr);
    assert!(build.stdout.starts_with("built registry.example.com/infera/overlay:0.1.0 (rocm7-py310 rocm7-py312; "));
    let version = "podman run --rm registry.example.com/infera/overlay:0.1.0 --version";
    assert!(doc.contains(&format!("`{version}`")));
    let v = sh(version);
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(v.stdout.contains("\n  vllm/vllm-openai-rocm:kimi-k3\n"), "{}", v.stdout);

    let check = sh(&here(blocks[1]));
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    for line in doc.split("```text\n").nth(1).unwrap().split("```").next().unwrap().lines() {
        assert!(check.stdout.contains(line), "`{line}` not in:\n{}", check.stdout);
    }
    assert!(check.stdout.contains("[gpus-not-present]"), "{}", check.stdout);
    let slip = sh(&here(blocks[2]));
    assert_eq!(slip.code, 78, "{}{}", slip.stdout, slip.stderr);
    assert!(slip.stderr.contains("error[kv-fp8-mla]") && slip.stderr.contains("\nhint: "), "{}", slip.stderr);
    let typo = sh(&here(blocks[2]).replace("--kv-cache-dtype fp8", "--max-nums-seqs 128"));
    assert_eq!(typo.code, 2, "{}", typo.stderr);
    assert!(typo.stderr.contains("--max-num-seqs"), "{}", typo.stderr);

    let push = sh(&here(blocks[3]));
    assert_eq!(push.code, 0, "{}", push.stderr);
    assert!(pushed.path().join("index.json").is_file());
    // Your kustomization, kept under target/ here (the doc makes `deploy/` in the clone).
    let deploy = repo().join("target/walkthrough-deploy");
    let _ = std::fs::remove_dir_all(&deploy);
    let step = here(blocks[4]).replace("deploy", "target/walkthrough-deploy").replace("../examples", "../../examples");
    let kustomize = sh(&step);
    assert_eq!(kustomize.code, 0, "{}", kustomize.stderr);
    assert!(kustomize.stdout.contains("name: kimi-k3-server"));
    assert!(kustomize.stdout.contains("image: my.registry/infera/overlay:0.1.0"), "{}", kustomize.stdout);
    assert!(!kustomize.stdout.contains("registry.example.com/infera/overlay"), "the placeholder is renamed");
}

/// /dev/shm as a container runtime gives it by default (64 MiB) is refused for a TP 8 worker,
/// before anything loads, with the pod-spec fix; a memory-backed one of a few GiB is planned.
#[test]
fn a_64_mib_dev_shm_is_refused_for_a_tp8_worker() {
    images();
    let models = repo().join("examples/models");
    let run = |shm: &str| {
        let mut c = podman(&["run", "--rm", "--shm-size", shm]);
        c.args(["--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
        c.args(["-v", &format!("{}:/models:ro", models.display()), "-e", GPUS8, VLLM72]);
        c.args(["/opt/infera/bin/infera-exec", "check", "--", "--model", "/models/kimi-k3"]);
        out(c)
    };
    let small = run("64m");
    assert_eq!(small.code, 69, "{}{}", small.stdout, small.stderr);
    assert!(small.stdout.contains("  shm       /dev/shm 64 MiB (64 MiB free)"), "{}", small.stdout);
    assert!(
        small.stderr.starts_with(
            "error[shm-too-small]: /dev/shm is 64 MiB but this pod runs 8 GPU ranks that share memory through it \
             (vLLM's message queues, RCCL's transport; about 1.0 GiB at this size): they would die with `Bus error` \
             or RCCL's `Error while creating shared memory segment` after the load\nhint: mount a memory-backed \
             volume at /dev/shm"
        ),
        "{}",
        small.stderr
    );
    let one_rank = {
        let mut c = podman(&["run", "--rm", "--shm-size", "64m"]);
        c.args(["--mount", &format!("type=image,source={OVERLAY},target=/opt/infera")]);
        c.args(["-v", &format!("{}:/models:ro", models.display()), "-e", "HIP_VISIBLE_DEVICES=0", VLLM72]);
        c.args(["/opt/infera/bin/infera-exec", "check", "--", "--model", "/models/kimi-k3"]);
        out(c)
    };
    assert_eq!(one_rank.code, 0, "one rank shares nothing: {}", one_rank.stderr);
    let big = run("4g");
    assert_eq!(big.code, 0, "{}{}", big.stdout, big.stderr);
    assert!(!big.stdout.contains("shm-"), "{}", big.stdout);
}

/// `check --image` reads the image from its archive — oci-archive, docker-archive, an OCI
/// layout with zstd layers — and plans exactly what `check --root` plans on `podman image
/// mount` of the same image with its config's environment (`--image-env`), the model's files
/// given to both with `--volume` (so its rules run); only the host paths of `--root` have no
/// counterpart.
#[test]
fn check_image_plans_as_check_root_on_the_mounted_image() {
    images();
    let t = tempfile::tempdir().unwrap();
    let tp = t.path().display().to_string();
    let overlay = repo().join("target/e2e/overlay");
    let volume = format!("/models={}", repo().join("examples/models").display());
    // The pod's variables, as its spec sets them: the NATS of infera's wrappers.
    let nats = format!("NATS_SERVER={}", crate::support::POD_NATS);
    for (image, args) in [(VLLM, &SEED[..2]), (SGLANG, &["--model-path", "/models/kimi-k3"][..])] {
        let m = out(podman(&["image", "mount", image]));
        assert_eq!(m.code, 0, "{}", m.stderr);
        let inspect = t.path().join("inspect.json");
        std::fs::write(&inspect, out(podman(&["image", "inspect", image])).stdout).unwrap();
        let mut root =
            infera(&["check", "--output", "json", "--volume", &volume, "--root", m.stdout.trim(), "--image-env"])
                .args([&inspect])
                .args(["--env", &nats, "--"])
                .args(args)
                .overlay(&overlay)
                .run()
                .json();
        let _ = out(podman(&["image", "unmount", image]));
        for k in ["host_cwd", "host_program", "host_argv0"] {
            root["exec"].as_object_mut().unwrap().remove(k);
        }
        assert_eq!(root["facts"]["models"][0]["status"], "known", "the model's rules run: {root}");
        let saved = [("oci-archive", format!("{tp}/i.oci.tar")), ("docker-archive", format!("{tp}/i.docker.tar"))];
        for (format, path) in &saved {
            assert_eq!(out(podman(&["save", "-q", "--format", format, "-o", path, image])).code, 0);
        }
        let dir = format!("oci:{tp}/dir:v1");
        assert_eq!(out(podman(&["push", "-q", "--compression-format", "zstd", image, &dir])).code, 0);
        // As podman wrote them, and as skopeo names them (`oci:DIR:TAG`).
        let references = [saved[0].1.clone(), saved[1].1.clone(), format!("{tp}/dir:v1"), dir.clone()];
        for reference in references {
            let o = infera(&["check", "--output", "json", "--volume", &volume, "--image", &reference])
                .args(["--env", &nats, "--"])
                .args(args)
                .overlay(&overlay)
                .run();
            assert_eq!(o.code, 0, "{reference}: {}", o.stderr);
            let mut got = o.json();
            let identity = got["facts"].as_object_mut().unwrap().remove("image").unwrap();
            assert_eq!(identity["reference"], reference.as_str());
            assert!(identity["config_digest"].as_str().unwrap().starts_with("sha256:"), "{identity}");
            let layers = identity["layers"].as_array().unwrap().len();
            let said = format!("[image-layer] {reference}: layer {layers} of {layers} read");
            assert!(o.stderr.contains(&said), "{}", o.stderr);
            assert_eq!(got, root, "{image} as {reference}");
        }
        for p in [&saved[0].1, &saved[1].1] {
            std::fs::remove_file(p).unwrap();
        }
        std::fs::remove_dir_all(format!("{tp}/dir")).unwrap();
    }
}

/// The README's CI recipe (`check --image … --family all --output junit --volume …`) on real
/// archives: the vLLM image (CPython 3.12) and the sglang image (3.10) each run with their own
/// tree, the other's does not apply (skipped, never failed): exit 0, no failure. Adding vLLM
/// 0.33 (outside the trees' engine bound) gives exit 1 with exactly one failure,
/// `engine-version`; an archive that is not one is unreadable (65) in every column; text, JSON
/// and JUnit say the same, each JUnit report valid against Jenkins' schema; and one image × one
/// tree exits with the cell's own code.
#[test]
fn check_images_against_every_tree_as_a_matrix() {
    images();
    let t = tempfile::tempdir().unwrap();
    let path = |n: &str| t.path().join(n);
    let (vllm, sglang, v033, bad) = (path("vllm.tar"), path("sglang.tar"), path("vllm033.tar"), path("bad.tar"));
    for (image, path) in [(VLLM, &vllm), (SGLANG, &sglang), (VLLM_ROCM10, &v033)] {
        let saved = out(podman(&["save", "-q", "--format", "oci-archive", "-o", path.to_str().unwrap(), image]));
        assert_eq!(saved.code, 0, "{}", saved.stderr);
    }
    std::fs::write(&bad, b"not an archive").unwrap();
    let models = path("models");
    std::fs::create_dir_all(models.join("kimi-k3")).unwrap();
    std::fs::copy(repo().join("examples/models/kimi-k3/config.json"), models.join("kimi-k3/config.json")).unwrap();
    let volume = format!("/models={}", models.display());
    let overlay = repo().join("target/e2e/overlay");
    let (v, s, n, b) =
        (vllm.to_str().unwrap(), sglang.to_str().unwrap(), v033.to_str().unwrap(), bad.to_str().unwrap());
    let check = |images: &[&str], extra: &[&str]| {
        let mut a = vec!["check", "--family", "all"];
        a.extend(images.iter().flat_map(|i| ["--image", i]));
        a.extend(["--volume", &volume]);
        a.extend(extra);
        a.extend(["--", "--model", "/models/kimi-k3"]);
        infera(&a).overlay(&overlay).env("PYTHONPATH", "/ci/site").run()
    };
    let text = check(&[v, s], &[]);
    assert_eq!(text.code, 0, "{}{}", text.stdout, text.stderr);
    let table: Vec<&str> = text.stdout.lines().take(5).collect();
    assert_eq!(table[0], "infera-exec check: 2 images (2 trees): 0 of 2 applicable cells refused");
    let cells =
        |line: &str| line.split("   ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>();
    assert_eq!(cells(table[2]), ["IMAGE", "verdict"]);
    // Each image with the tree that applies to it; the other tree is not a column of n/a.
    assert_eq!(cells(table[3])[0], format!("{v} (rocm7-py312)"));
    assert!(cells(table[3])[1].starts_with("ok"), "{}", text.stdout);
    assert_eq!(cells(table[4])[0], format!("{s} (rocm7-py310)"));
    assert!(cells(table[4])[1].starts_with("ok"), "{}", text.stdout);
    assert!(text.stdout.contains(&format!("  {v}: config sha256:")), "{}", text.stdout);
    assert!(text.stdout.contains("; python 3.12; HIP ABI 7, ROCm 7.0.0; vllm 0.17.1+rocm700\n"), "{}", text.stdout);
    assert!(!text.stdout.contains("refusals:"), "{}", text.stdout);
    assert!(!text.stdout.contains("host-env"), "information, not a warning of the table: {}", text.stdout);
    // One argument list that one of the engines refuses (`--max-num-seqs` is vLLM's): one check
    // per engine, said with the commands to run.
    let a = ["check", "--image", v, "--image", s, "--volume", &volume, "--", "--model", "/models/kimi-k3"];
    let both = infera(&a).args(["--max-num-seqs", "128"]).overlay(&overlay).run();
    assert_eq!(both.code, 2, "{}{}", both.stdout, both.stderr);
    assert!(
        both.stderr.contains(&format!(
            "error[matrix-engines-differ]: `{v}` runs vllm and `{s}` runs sglang, and the args after `--` are one list \
             for every image, which sglang's parser refuses: `--max-num-seqs` (arg 3) is not an option of sglang"
        )),
        "{}",
        both.stderr
    );
    assert!(both.stderr.contains(&format!("hint: one check per engine, each with its own args: `infera-exec check --image {v} … -- ARGS` with vllm's options")), "{}", both.stderr);
    assert!(both.stdout.is_empty(), "no matrix for a refused argument list: {}", both.stdout);

    let json = check(&[v, s, n], &["--output", "json"]);
    let verdicts_of = |j: &serde_json::Value| {
        j["images"]
            .as_array()
            .map(|a| a.iter().map(|i| (i["image"].to_string(), i["families"].to_string())).collect::<Vec<_>>())
    };
    assert_eq!(json.code, 1, "{:?}\n{}", verdicts_of(&json.json()), json.stderr);
    assert!(json.stderr.contains("check: 1 of 3 applicable cells refused (exit 1)"), "{}", json.stderr);
    let j = json.json();
    assert_eq!(j["schema_version"], 1);
    assert_eq!(j["columns"], serde_json::json!(["rocm7-py310", "rocm7-py312"]));
    assert_eq!(j["exit_code"], 1);
    let verdicts = |i: usize| {
        j["images"][i]["families"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["verdict"].as_str().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        (verdicts(0), verdicts(1), verdicts(2)),
        (vec!["not-applicable", "ok"], vec!["ok", "not-applicable"], vec!["not-applicable", "refused"])
    );
    assert_eq!(j["images"][2]["families"][1]["error"]["code"], "engine-version");
    assert_eq!(j["images"][0]["names"], serde_json::json!([VLLM]), "the archive's own name");
    assert_eq!(j["images"][0]["facts"]["python"]["version"], "3.12");
    assert!(j["images"][0]["config_digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(j["images"][1]["families"][0]["plan"]["family"], "rocm7-py310");
    assert_eq!(j["images"][1]["families"][0]["plan"]["exec"]["argv"][2], "infera.engine.sglang");
    assert_eq!(j["images"][1]["families"][1]["error"]["code"], "family-mismatch");
    let env = j["images"][0]["families"][1]["plan"]["exec"]["env"].to_string();
    assert!(!env.contains("/ci/site"), "the runner's PYTHONPATH is not the pod's: {env}");
    // The runner's variables are not the pod's: named, and not planned with.
    let said = j["images"][0]["families"][1]["plan"]["findings"].to_string();
    assert!(said.contains(r#""code":"host-env-left-out","level":"info","message":"this shell's"#), "{said}");
    assert!(said.contains("PYTHONPATH"), "{said}");

    let junit = check(&[v, s, n], &["--output", "junit"]);
    assert_eq!(junit.code, 1, "{}", junit.stderr);
    let doc = roxmltree::Document::parse(&junit.stdout).unwrap();
    let top = doc.root_element();
    let attrs = ["tests", "failures", "errors"].map(|a| top.attribute(a));
    assert_eq!(attrs, [Some("6"), Some("1"), Some("0")], "{}", junit.stdout);
    let skipped: Vec<_> = top.children().filter_map(|s| s.attribute("skipped")).collect();
    assert_eq!(skipped, ["1", "1", "1"], "{}", junit.stdout);
    let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(failure.attribute("type"), Some("engine-version"));
    assert_eq!(doc.root_element().first_element_child().unwrap().attribute("name"), Some(VLLM));
    assert_eq!(as_ci_tools_read(&junit.stdout), "cases 6, failures 1, errors 0, skipped 3");

    // The user's volume is the truth about its paths: a case typo is refused, named.
    let mut a = vec!["check", "--image", v, "--volume", &volume, "--", "--model", "/models/Kimi-K3"];
    a.extend(["--kv-cache-dtype", "fp8"]);
    let typo = infera(&a).overlay(&overlay).run();
    assert_eq!(typo.code, 66, "{}{}", typo.stdout, typo.stderr);
    assert!(
        typo.stderr.contains("error[model-missing]: the model path `/models/Kimi-K3` is not in the volume"),
        "{}",
        typo.stderr
    );
    assert!(typo.stderr.contains("did you mean `/models/kimi-k3`?"), "{}", typo.stderr);
    // The pod's own variables: --env reaches the plan.
    let mut a = vec!["check", "--image", v, "--env", "PYTHONPATH=/pod/site", "--env", "NATS_SERVER=nats://nats:4222"];
    a.extend(["--output", "json", "--"]);
    a.extend(["--model", "/models/kimi-k3"]);
    let pod = infera(&a).overlay(&overlay).env("PYTHONPATH", "/ci/site").run();
    let env = pod.json()["exec"]["env"].to_string();
    assert!(env.contains("/pod/site") && !env.contains("/ci/site"), "{env}");

    // Another archive that is no image: 65 wins over the other cells.
    let mut a = vec!["check", "--family", "all", "--image", v, "--image", b, "--output", "junit", "--"];
    a.extend(["--model", "/models/kimi-k3"]);
    let junit = infera(&a).overlay(&overlay).run();
    assert_eq!(junit.code, 65, "{}", junit.stderr);
    let doc = roxmltree::Document::parse(&junit.stdout).unwrap();
    let top = doc.root_element();
    assert_eq!(
        [top.attribute("tests"), top.attribute("failures"), top.attribute("errors")],
        [Some("4"), Some("0"), Some("2")]
    );
    let suites: Vec<_> = top.children().filter(|n| n.has_tag_name("testsuite")).collect();
    assert_eq!(suites.iter().map(|s| s.attribute("name").unwrap()).collect::<Vec<_>>(), [VLLM, b]);
    let case = |s: usize, c: usize| suites[s].children().filter(|n| n.has_tag_name("testcase")).nth(c).unwrap();
    assert_eq!(case(0, 0).attribute("name"), Some("rocm7-py310"));
    assert_eq!(case(0, 0).first_element_child().unwrap().tag_name().name(), "skipped");
    let warned = case(0, 1).first_element_child().unwrap();
    assert_eq!(warned.tag_name().name(), "system-out", "vllm with its tree passes, its warnings said");
    assert!(warned.text().unwrap().starts_with("tree: rocm7-py312\n"), "{}", junit.stdout);
    assert!(warned.text().unwrap().contains("warn[model-unreadable]"), "{}", junit.stdout);
    let error = case(1, 1).first_element_child().unwrap();
    assert_eq!((error.tag_name().name(), error.attribute("type")), ("error", Some("image-format")));
    assert_eq!(as_ci_tools_read(&junit.stdout), "cases 4, failures 0, errors 2, skipped 1");

    // One image × one tree: the cell's own code (sglang's tree ships no hipfile: 69).
    let one = infera(&["check", "--image", s, "--require", "hipfile", "--output", "junit", "--", "--model-path", "/m"])
        .overlay(&overlay)
        .run();
    assert_eq!(one.code, 69, "{}", one.stderr);
    let doc = roxmltree::Document::parse(&one.stdout).unwrap();
    let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(failure.attribute("type"), Some("capability-unavailable"), "{}", one.stdout);
    let case = doc.descendants().find(|n| n.has_tag_name("testcase")).unwrap();
    assert_eq!(case.attribute("name"), Some("rocm7-py310"), "the tree the image's ABI selects");
    assert_eq!(as_ci_tools_read(&one.stdout), "cases 1, failures 1, errors 0, skipped 0");
}

/// The README's CI recipe as written — the image as an OCI layout (`oci:vllm:kimi-k3`), the
/// model's files as a volume, `--family all --output junit` — with `--node mi210`: Kimi-K3's
/// config and its checkpoint index (examples/models/kimi-k3) refuse the 8 × 64 GiB node
/// (`weights-exceed-vram`, on the case named `rocm7-py312 on mi210`); with the config alone the
/// weights are said unjudged (`weights-unknown`), which fails `--fail-on warn`; accepted
/// (`--allow weights-unknown`), it stays in the report and fails nothing.
#[test]
fn the_readme_recipe_judges_the_weights_on_the_fleet() {
    images();
    let t = tempfile::tempdir().unwrap();
    let pushed = out(podman(&["push", "-q", VLLM, &format!("oci:{}/vllm:kimi-k3", t.path().display())]));
    assert_eq!(pushed.code, 0, "{}", pushed.stderr);
    let models = t.path().join("models/kimi-k3");
    std::fs::create_dir_all(&models).unwrap();
    for f in ["config.json", "model.safetensors.index.json"] {
        std::fs::copy(repo().join("examples/models/kimi-k3").join(f), models.join(f)).unwrap();
    }
    let overlay = repo().join("target/e2e/overlay");
    let recipe = |extra: &[&str]| {
        let mut a = vec!["check", "--image", "vllm:kimi-k3", "--family", "all", "--output", "junit"];
        a.extend(["--overlay", overlay.to_str().unwrap(), "--volume", "/models=./models", "--node", "mi210"]);
        a.extend(extra);
        a.extend(["--", "--model", "/models/kimi-k3", "--request-transport", "http", "--kv-event-transport", "zmq"]);
        infera(&a).cwd(t.path()).run()
    };
    let o = recipe(&[]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let doc = roxmltree::Document::parse(&o.stdout).unwrap();
    let case = doc.descendants().find(|n| n.attribute("name") == Some("rocm7-py312 on mi210")).expect(&o.stdout);
    let failure = case.first_element_child().unwrap();
    assert_eq!((failure.tag_name().name(), failure.attribute("type")), ("failure", Some("weights-exceed-vram")));
    assert!(
        failure.attribute("message").unwrap().contains("more than a GPU's 64.0 GiB (--node mi210)"),
        "{}",
        o.stdout
    );
    assert_eq!(as_ci_tools_read(&o.stdout), "cases 2, failures 1, errors 0, skipped 1");
    // The README's own nodes: on MI300X no KV room at vLLM's 0.9 (the hint: 16 GPUs); MI355X holds it.
    let mut a = vec!["check", "--image", "vllm:kimi-k3", "--overlay", overlay.to_str().unwrap()];
    a.extend(["--volume", "/models=./models", "--node", "mi300x", "--node", "mi355x", "--shm-size", "16Gi"]);
    a.extend(["--", "--model", "/models/kimi-k3", "--request-transport", "http", "--kv-event-transport", "zmq"]);
    let o = infera(&a).cwd(t.path()).run();
    assert_eq!(o.code, 1, "{}", o.stderr);
    let row = o.stdout.lines().nth(3).unwrap_or_default();
    assert!(row.contains("refused: kv-cache-no-room") && row.trim_end().ends_with("ok"), "{}", o.stdout);
    assert!(o.stdout.contains("spread the weights over more GPUs (at least 16 at this size"), "{}", o.stdout);
    // The config alone: not judged, and said so; a gate on warnings fails.
    std::fs::remove_file(models.join("model.safetensors.index.json")).unwrap();
    let o = recipe(&["--shm-size", "16Gi"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("warn[weights-unknown]: the weights of /models/kimi-k3 are not judged against the node&apos;s GPUs: `/models/kimi-k3` has config.json but no model.safetensors.index.json"), "{}", o.stdout);
    let o = recipe(&["--shm-size", "16Gi", "--fail-on", "warn"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stdout.contains("<failure type=\"weights-unknown\" message=\"1 warning(s) and --fail-on warn"),
        "{}",
        o.stdout
    );
    let o = recipe(&["--shm-size", "16Gi", "--fail-on", "warn", "--allow", "weights-unknown"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("accepted[weights-unknown] by --allow: the weights of /models/kimi-k3"), "{}", o.stdout);
}

/// The README's dry run before anything reaches a GPU, as written: `check` in the image with
/// the overlay image mounted, then `worker --dry-run` on the image's root read in place with
/// the overlay `scripts/build-overlay-image` staged (`target/overlay-image`) — the engine image
/// a stand-in of the same layout, the models the example's, the launcher this build's.
#[test]
fn the_readme_dry_run_runs_as_written() {
    images();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let after = readme.split("**As a dry run before anything reaches a GPU**").nth(1).unwrap();
    let block = after.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let here = block
        .replace("docker.io/vllm/vllm-openai-rocm:kimi-k3", VLLM72)
        .replace("/data/models", repo().join("examples/models").to_str().unwrap())
        .replace("\ninfera-exec worker", &format!("\n{} worker", crate::support::BIN));
    let sh = |cmd: &str| {
        let mut c = Command::new("flock");
        c.arg(repo().join("target/e2e.lock")).args(["sh", "-c", cmd]).current_dir(repo());
        podman_env(&mut c);
        out(c)
    };
    let build = sh("scripts/build-overlay-image");
    assert_eq!(build.code, 0, "{}", build.stderr);
    assert!(build.stdout.contains("the overlay as a directory: target/overlay-image"), "{}", build.stdout);
    let o = sh(&format!("set -e\n{here}\npodman image unmount {VLLM72} >/dev/null"));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // The check's table, then the dry run's JSON plan: each with the pod's transports.
    let (text, json) = o.stdout.split_at(o.stdout.find("\n{").expect(&o.stdout) + 1);
    assert!(text.contains("  tree      rocm7-py312 (/opt/infera/trees/rocm7-py312)"), "{text}");
    assert!(text.contains("--request-transport http --kv-event-transport zmq"), "{text}");
    let plan: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(plan["family"], "rocm7-py312", "{plan}");
    assert!(plan["exec"]["argv"].to_string().contains(r#""--request-transport","http""#), "{plan}");
}
