//! The real Infera stack end to end (tests/stack/e2e.py): real etcd and NATS, the real router
//! and the real vLLM/sglang wrappers from the Infera sources, each started by this launcher
//! as the container command in an engine image root, in front of the stand-in engines.

use std::process::Command;

use crate::support::{repo, BIN};

#[test]
fn completions_through_the_real_router_groups_refusal_and_drain() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(repo().join("tests/stack/e2e.py")).arg(BIN).arg(work.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "e2e failed:\n{stdout}\n{stderr}");
    for check in [
        "ok: the router discovered all four workers through etcd",
        "ok: tiny-vllm: /v1/chat/completions through the router answered by the stand-in vllm 0.28.0",
        "ok: tiny-sglang: /v1/chat/completions through the router answered by the stand-in sglang 0.5.23",
        "ok: tiny-vllm-group: served by the 2-node group",
        "ok: tiny-sglang-group: served by the 2-node group",
        "ok: tiny-vllm: a streamed chat completion",
        "ok: vLLM rank 1 joined the leader's rendezvous address",
        "ok: the refused worker exits 69 and says why, in its log and its termination message",
        "ok: the router still serves the other workers",
        "ok: SIGTERM while the engine loads: the launcher (--init) exits 143 and its engine is gone",
        "ok: the vLLM worker deregistered on SIGTERM",
        "ok: every container exited within 60 s of SIGTERM",
        "ok: no process is left behind",
        "e2e: all checks passed",
    ] {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }
}

/// Every container of every example (both Kustomize overlays, `lws/` at every rank,
/// `stack-form/`, the InferaDeployment), planned by the launcher against the overlay with the
/// real infera trees, then parsed by the real parser of the module it execs
/// (tests/stack/parse-planned.py): the router's, infera.engine.vllm's and
/// infera.engine.sglang's (over the stand-in engines' recorded parsers), and for a vLLM rank
/// > 0 vLLM's own `serve` parser on what the wrapper passes on.
#[test]
fn every_example_container_and_rank_plans_what_the_real_parsers_accept() {
    let r = repo();
    let work = tempfile::tempdir().unwrap();
    let overlay = work.path().join("overlay");
    let st = Command::new(r.join("examples/stage-overlay")).arg(&overlay).arg(BIN).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let (vllm, sglang) = (crate::support::image("vllm-0.28"), crate::support::image("sglang-rocm724"));

    // The examples' pod specs, as files (the Kustomize overlays built first).
    let mut files = vec![
        r.join("examples/k8s/stack-form/worker.yaml"),
        r.join("examples/k8s/inferadeployment/kimi-k3.yaml"),
        r.join("examples/k8s/lws/vllm/kimi-k3-vllm.yaml"),
        r.join("examples/k8s/lws/sglang/kimi-k3-sglang.yaml"),
        r.join("examples/k8s/lws/pd/kimi-k3-pd.yaml"),
    ];
    for o in ["initcontainer", "image-volume"] {
        let out =
            Command::new("kubectl").arg("kustomize").arg(r.join("examples/k8s/overlays").join(o)).output().unwrap();
        assert!(out.status.success(), "kustomize {o}: {}", String::from_utf8_lossy(&out.stderr));
        let f = work.path().join(format!("{o}.yaml"));
        std::fs::write(&f, out.stdout).unwrap();
        files.push(f);
    }
    let out = Command::new(r.join("tests/k8s/validate-lws")).arg("--commands").args(&files).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let containers: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let mut planned = Vec::new();
    for c in containers.as_array().unwrap() {
        let cmd: Vec<String> = c["command"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().into()).collect();
        if !cmd.first().is_some_and(|p| p.ends_with("/bin/infera-exec")) || cmd.get(1).is_some_and(|a| a == "install") {
            continue;
        }
        let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        let what = format!("{} {}/{} rank {}", field("kind"), field("lws"), field("container"), c["ranks"][0]);
        let img = if cmd.iter().any(|a| a.contains("sglang")) { &sglang } else { &vllm };
        let mut run = crate::support::infera(&cmd[1..].iter().map(String::as_str).collect::<Vec<_>>())
            .root(img)
            .overlay(&overlay)
            .env("INFERA_DRY_RUN", "1")
            .env("INFERA_OUTPUT", "json")
            .env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
            .env("MC_FORCE_TCP", "1");
        let size = c["size"].as_u64().unwrap();
        if c["kind"] == "LeaderWorkerSet" {
            run = run.env("LWS_GROUP_SIZE", size.to_string()).env("LWS_WORKER_INDEX", c["ranks"][0].to_string()).env(
                "LWS_LEADER_ADDRESS",
                format!("{}-0.{}.infera", c["lws"].as_str().unwrap(), c["lws"].as_str().unwrap()),
            );
        }
        for (k, v) in c["env"].as_object().unwrap() {
            run = run.env(k, v.as_str().unwrap());
        }
        for dev in ["mlx5_0", "mlx5_1"] {
            img.file(
                &format!("/sys/class/infiniband/{dev}/ports/1/gids/3"),
                "0000:0000:0000:0000:0000:ffff:0a04:0007\n",
            );
        }
        let o = run.run();
        assert_eq!(o.code, 0, "{what}: {}\n{}", o.stderr, o.stdout);
        planned.push(serde_json::json!({"what": what, "argv": o.json()["exec"]["argv"]}));
    }
    // Kustomize: router + worker per overlay; stack-form: worker + kvd; the CR: router +
    // worker; lws/: 4 groups × 2 ranks.
    assert_eq!(planned.len(), 16, "{planned:#?}");

    let tree = overlay.join("trees/rocm7-py312/site-packages");
    let vsite = vllm.p("/usr/local/lib/python3.12/dist-packages/vllm");
    let ssite = sglang.p("/sgl-workspace/sglang/python/sglang");
    // Only the stand-in engine packages beside the tree (not the image roots' other stand-ins).
    let engines = work.path().join("engines");
    std::fs::create_dir_all(&engines).unwrap();
    std::os::unix::fs::symlink(&vsite, engines.join("vllm")).unwrap();
    std::os::unix::fs::symlink(&ssite, engines.join("sglang")).unwrap();
    let mut p = Command::new(crate::support::real_python("3.12"))
        .arg(r.join("tests/stack/parse-planned.py"))
        .env("PYTHONPATH", format!("{}:{}", tree.display(), engines.display()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    p.stdin.take().unwrap().write_all(serde_json::to_string(&planned).unwrap().as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("parsed: ")).count(), planned.len(), "{text}");
    for must in ["infera.server)", "(infera.engine.vllm)", "(infera.engine.sglang)", "(vllm follower)"] {
        assert!(text.contains(must), "no `{must}` in:\n{text}");
    }
}

/// The option lists the launcher judges infera's own parsers by (the router's and each
/// wrapper's own options, `crates/infera-facts/src/engines/options/infera.*.txt`) are those
/// parsers', read from the real modules by `scripts/infera-option-names.py`; the sglang
/// wrapper imports sglang, here the stand-in whose parser is sglang 0.5.23's recorded one.
#[test]
fn the_recorded_infera_option_lists_are_the_real_parsers() {
    let r = repo();
    let trees = Command::new(r.join("scripts/build-infera-trees")).output().unwrap();
    assert!(trees.status.success(), "{}", String::from_utf8_lossy(&trees.stderr));
    let trees = std::path::PathBuf::from(String::from_utf8(trees.stdout).unwrap().trim());
    // The stand-in sglang package as an image lays it out (its `_standin` module beside it).
    let engines = tempfile::tempdir().unwrap();
    let sgl = engines.path().join("sglang");
    let cp = Command::new("cp").arg("-r").arg(r.join("examples/standin/engines/sglang")).arg(&sgl).status().unwrap();
    assert!(cp.success());
    std::fs::copy(r.join("examples/standin/engines/standin_engine.py"), sgl.join("_standin.py")).unwrap();
    for (module, tree, minor) in [
        ("infera.server", "py312", "3.12"),
        ("infera.engine.vllm", "py312", "3.12"),
        ("infera.engine.sglang", "py310", "3.10"),
    ] {
        let path = format!("{}:{}", engines.path().display(), trees.join(tree).display());
        let out = Command::new(crate::support::real_python(minor))
            .arg(r.join("scripts/infera-option-names.py"))
            .arg(module)
            .env("PYTHONPATH", path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{module}: {}", String::from_utf8_lossy(&out.stderr));
        let recorded =
            std::fs::read_to_string(r.join(format!("crates/infera-facts/src/engines/options/{module}.txt"))).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            recorded,
            "{module}: the recorded list differs from the parser's"
        );
    }
    // The wrappers' defaults the launcher judges by (their transports: NATS; their discovery:
    // kubernetes) are the real parsers'.
    for (engine, module, tree, minor) in [
        (infera_facts::engines::Engine::Vllm, "infera.engine.vllm", "py312", "3.12"),
        (infera_facts::engines::Engine::Sglang, "infera.engine.sglang", "py310", "3.10"),
    ] {
        let path = format!("{}:{}", engines.path().display(), trees.join(tree).display());
        let out = Command::new(crate::support::real_python(minor))
            .arg(r.join("scripts/infera-option-names.py"))
            .args(["--defaults", module])
            .env("PYTHONPATH", path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{module}: {}", String::from_utf8_lossy(&out.stderr));
        let real = String::from_utf8_lossy(&out.stdout);
        let wrapper: Vec<&str> = engine.wrapper_options().collect();
        let mut judged = 0;
        for o in infera_facts::engines::Opt::ALL {
            let (Some(v), Some(s)) = (engine.default_of(*o), engine.spelling(*o)) else { continue };
            if wrapper.contains(&s.primary()) {
                assert!(
                    real.lines().any(|l| l == format!("{}={v}", s.primary())),
                    "{module}: {}={v} not in\n{real}",
                    s.primary()
                );
                judged += 1;
            }
        }
        assert_eq!(judged, 3, "{module}: the discovery backend and the two transports");
    }
    // The router's options that take no value: what tells its positional args from values.
    let path = trees.join("py312");
    let out = Command::new(crate::support::real_python("3.12"))
        .arg(r.join("scripts/infera-option-names.py"))
        .args(["--flags", "infera.server"])
        .env("PYTHONPATH", path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let flags: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    assert_eq!(flags, infera_facts::router_args::FLAGS, "infera.server's flags");
}
