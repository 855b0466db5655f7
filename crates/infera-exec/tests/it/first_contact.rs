//! What a platform engineer meets first: the CLI's help and errors, `--version`, the logs of
//! a start, refusals in the termination message, `--root` with the image's environment, and
//! `--allow engine-version`.

use std::os::unix::fs::PermissionsExt;

use crate::support::*;

const KIMI: &str = include_str!("../../../../examples/models/kimi-k3/config.json");

/// `worker --dry-run --output json -- ARGS` on an image with these GPUs visible.
fn dry_json(img: &Fx, ov: &Fx, gpus: &str, args: &[&str]) -> Out {
    infera(&["worker", "--dry-run", "--output", "json", "--"])
        .args(args)
        .root(img)
        .overlay(&ov.overlay())
        .env("HIP_VISIBLE_DEVICES", gpus)
        .run()
}

fn stderr_of(args: &[&str]) -> (i32, String) {
    let out = infera(args).run();
    assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    (out.code, out.stderr)
}

#[test]
fn typos_and_options_of_other_roles_are_usage_errors_that_say_what_to_do() {
    assert_eq!(
        stderr_of(&["worker", "--dryrun"]),
        (
            2,
            "error: unexpected argument '--dryrun' found\n\n  hint: a similar argument exists: '--dry-run'\n\n\
             Usage: infera-exec worker --dry-run [-- <ARGS>...]\n\nFor more information, try '--help'.\n"
                .into()
        )
    );
    // The command form: the same suggestion, and the command form's usage.
    assert_eq!(
        stderr_of(&["--dryrun", "python3", "-m", "infera.engine.vllm"]),
        (
            2,
            "error: unexpected argument '--dryrun' found\n\n  hint: a similar argument exists: '--dry-run'\n\n\
             Usage: infera-exec [OPTIONS] PROGRAM [ARGS]...\n\nFor more information, try '--help'.\n"
                .into()
        )
    );
    assert_eq!(
        stderr_of(&["server", "--engine", "vllm"]),
        (
            2,
            "error: unexpected argument '--engine' found\n\n  hint: `--engine` is an option of worker and check, not of \
             `server`; the router runs no engine\n\nUsage: infera-exec server [OPTIONS] [-- <ARGS>...]\n\n\
             For more information, try '--help'.\n"
                .into()
        )
    );
    assert_eq!(
        stderr_of(&["check", "--init"]),
        (
            2,
            "error: unexpected argument '--init' found\n\n  hint: `--init` is an option of worker and server, not of \
             `check`; check execs nothing\n\nUsage: infera-exec check [OPTIONS] [-- <ARGS>...]\n\n\
             For more information, try '--help'.\n"
                .into()
        )
    );
    assert_eq!(
        stderr_of(&["wroker", "--", "--model", "/m"]),
        (
            2,
            "error: `wroker` is not a subcommand, and a PROGRAM this close to `worker` is taken for a typo\n\n  \
             hint: did you mean `infera-exec worker`? A program of that name runs as `infera-exec -- wroker ...`\n\n\
             Usage: infera-exec [OPTIONS] PROGRAM [ARGS]...\n\nFor more information, try '--help'.\n"
                .into()
        )
    );
    // An engine's option before `--` (the most common slip): where it goes, with the command
    // line as it should be, not a launcher option that looks like it (`--nnodes`).
    assert_eq!(
        stderr_of(&["worker", "--dry-run", "--model", "/models/x"]),
        (
            2,
            "error: unexpected argument '--model' found\n\n  hint: the engine's args go after `--`: \
             infera-exec worker --dry-run -- --model /models/x\n\n\
             Usage: infera-exec worker [OPTIONS] [-- <ARGS>...]\n\nFor more information, try '--help'.\n"
                .into()
        )
    );
    let (code, err) = stderr_of(&["server", "--max-model-len", "4096"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("hint: `--max-model-len` is an engine's option, not the router's: give it to the workers (`infera-exec worker -- --max-model-len ...`)"),
        "{err}"
    );
    // The JSON answer carries the tip as its hint.
    let out = infera(&["worker", "--output", "json", "-tp", "2"]).run();
    assert_eq!(out.code, 2);
    assert_eq!(
        out.json()["error"]["hint"],
        "the engine's args go after `--`: infera-exec worker --output json -- -tp 2"
    );
    // A value from a variable names the variable.
    let out = infera(&["worker", "--dry-run", "--", "--model", "/models/m"]).env("INFERA_ENGINE", "vlm").run();
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            2,
            "error: invalid value 'vlm' for INFERA_ENGINE (the variable of '--engine <ENGINE>')\n  \
             [possible values: auto, vllm, sglang]\n\n  hint: a similar value exists: 'vllm'\n\n\
             For more information, try '--help'.\n"
        )
    );
    // No arguments: the help, as a usage error.
    let out = infera(&[]).run();
    assert_eq!(out.code, 2);
    assert!(out.stderr.starts_with("Container command for infera pods"), "{}", out.stderr);
}

#[test]
fn help_lists_every_variable_the_launcher_reads() {
    let out = infera(&["worker", "--help"]).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let src = std::fs::read_to_string(repo().join("crates/infera-facts/src/envvars.rs")).unwrap();
    let reference = std::fs::read_to_string(repo().join("docs/command-line.md")).unwrap();
    // Every INFERA_* the launcher reads (not the ones it sets for the program) is in the
    // worker's help and in the command-line reference.
    let set_for_program = ["INFERA_TREE", "INFERA_TREE_FAMILY", "INFERA_ARGS_DIGEST"];
    // The names declared in envvars.rs's `ours! { ... }` (comments left out).
    let block = src.split("\nours! {").nth(1).unwrap().split("\n}").next().unwrap();
    let code = block.lines().filter(|l| !l.trim_start().starts_with("//"));
    let read: Vec<String> = code
        .flat_map(|l| l.split([',', ' ']).filter(|w| w.starts_with("INFERA_")).map(String::from).collect::<Vec<_>>())
        .collect();
    assert!(read.len() >= 25, "{read:?}");
    // `node`'s own variable is in its help.
    let node_only = ["INFERA_NODE_NAME"];
    let node_help = infera(&["node", "--help"]).run();
    for v in &read {
        if node_only.contains(&v.as_str()) {
            assert!(node_help.stdout.contains(v.as_str()), "{v} not in `node --help`");
            assert!(reference.contains(v.as_str()), "{v} not in docs/command-line.md");
            continue;
        }
        assert!(out.stdout.contains(v.as_str()), "{v} not in `worker --help`");
        assert!(reference.contains(v.as_str()), "{v} not in docs/command-line.md");
        if set_for_program.contains(&v.as_str()) {
            assert!(out.stdout.contains("Set for the program: INFERA_TREE, INFERA_TREE_FAMILY"));
        }
    }
    for v in ["LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "LWS_LEADER_ADDRESS"] {
        assert!(out.stdout.contains(v), "{v}");
    }
    // The router's help lists only what the router reads: no GPUs, KV dtype or group.
    let server = infera(&["server", "--help"]).run();
    assert_eq!(server.code, 0, "{}", server.stderr);
    for v in ["INFERA_GPUS", "INFERA_DEFAULT_KV_FP8", "LWS_", "INFERA_ARGS_DIGEST", "INFERA_NNODES"] {
        assert!(!server.stdout.contains(v), "{v} in `server --help`:\n{}", server.stdout);
    }
    // The router waits for its tokenizer path as a worker waits for its model.
    for v in ["INFERA_LOG_FORMAT", "INFERA_TERMINATION_LOG", "INFERA_VERIFY", "INFERA_DROP_CAPS", "INFERA_WAIT_MODEL"] {
        assert!(server.stdout.contains(v), "{v} not in `server --help`");
    }
}

#[test]
fn version_names_the_commit_and_the_overlays_families() {
    let ov = shipped_overlay();
    let out = infera(&["--version"]).overlay(&ov.overlay()).run();
    let commit = std::process::Command::new("git")
        .args(["log", "-1", "--format=%h %cs"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    assert_eq!(out.code, 0);
    // The support matrix: each tree of the overlay at hand with what it runs, then the images
    // this release was judged on (manifests/images.toml, checked in detect.rs).
    let head = format!(
        "infera-exec {} (commit {commit})\noverlay {}:\n\
         \x20 rocm7-py310   CPython 3.10, HIP ABI 7: sglang >=0.4.6.post5, <0.6; router\n\
         \x20               capabilities: kvd, mooncake\n\
         \x20 rocm7-py312   CPython 3.12, HIP ABI 7: sglang >=0.4.6.post5, <0.6; vllm >=0.9, <0.29; router\n\
         \x20               capabilities: hipfile, kvd, mooncake\n\
         images this release was judged on (verdict: the tree selected, or the refusal):\n\
         \x20 vllm/vllm-openai-rocm:kimi-k3\n\
         \x20     vllm, a build of commit g5f76ae224: its version reads 0.1.devN (untagged); CPython 3.12; ROCm 7.x (not recorded) → rocm7-py312\n",
        env!("CARGO_PKG_VERSION"),
        ov.overlay().display()
    );
    assert!(out.stdout.starts_with(&head), "{}", out.stdout);
    assert!(out.stdout.contains("vllm 0.33.0; CPython 3.12; ROCm 10.0.0 (HIP 7.15) → refused: engine-version\n"));
    let out = infera(&["-V"]).env("INFERA_OVERLAY", "/nonexistent").run();
    assert_eq!(out.code, 0);
    assert!(
        out.stdout
            .contains("\noverlay /nonexistent: none (the overlay directory `/nonexistent` does not exist)\nimages"),
        "{}",
        out.stdout
    );
}

/// Kubernetes shows a container's termination message in `kubectl describe pod`: a refusal
/// goes there too, when the file exists and is writable — and nowhere else.
#[test]
fn refusals_reach_the_termination_message() {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    let dir = Fx::new();
    let log = dir.p("termination-log");
    std::fs::write(&log, "").unwrap();
    let out = infera(&["worker", "--", "--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
        .env("INFERA_TERMINATION_LOG", &log)
        .run();
    assert_eq!(out.code, 78, "{}", out.stderr);
    let written = std::fs::read_to_string(&log).unwrap();
    let first = out.stderr.lines().find(|l| l.starts_with("error[kv-fp8-mla]")).unwrap();
    let message = first.trim_start_matches("error[kv-fp8-mla]: ");
    let hint = out.stderr.lines().find_map(|l| l.strip_prefix("hint: ")).unwrap();
    assert_eq!(written, format!("infera-exec refused [kv-fp8-mla] (exit 78): {message}\nhint: {hint}\n"));
    assert!(written.len() <= 4096);

    // A usage error is written too.
    let out = infera(&["worker", "--dryrun"]).env("INFERA_TERMINATION_LOG", &log).run();
    assert_eq!(out.code, 2);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "infera-exec refused [usage] (exit 2): unexpected argument '--dryrun' found\nhint: a similar argument exists: '--dry-run'\n"
    );

    // Absent: not created. A symlink: not followed. A directory: left alone. A success
    // writes nothing.
    let absent = dir.p("absent");
    let target = dir.p("target");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, dir.p("link")).unwrap();
    for path in [absent.clone(), dir.p("link"), dir.path().to_path_buf()] {
        let out = infera(&["worker", "--dryrun"]).env("INFERA_TERMINATION_LOG", &path).run();
        assert_eq!(out.code, 2);
    }
    assert!(!absent.exists());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    std::fs::write(&log, "").unwrap();
    let out = infera(&["server", "--dry-run", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_TERMINATION_LOG", &log)
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "");
    // Read-only: not written, and the refusal is still on stderr.
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o444)).unwrap();
    let out = infera(&["worker", "--dryrun"]).env("INFERA_TERMINATION_LOG", &log).run();
    assert_eq!(out.code, 2);
    assert!(out.stderr.starts_with("error: unexpected argument '--dryrun' found"));
}

fn started(img: &Fx, ov: &Fx, env: &[(&str, &str)]) -> Out {
    let mut r = infera(&["worker", "--", "--model", "/models/kimi-k3"])
        .root(img)
        .overlay(&ov.overlay())
        .env("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7");
    for (k, v) in env {
        r = r.env(k, *v);
    }
    r.run()
}

/// One info line on every start, the last before the exec (after the leader wait and the
/// patches, so nothing refuses after it): what runs, from which tree, with which
/// interpreter, and what the launcher added and why.
#[test]
fn a_start_logs_one_line_and_json_for_collectors() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    img.file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    let tree = ov.overlay().join("trees/rocm7-py312");
    let out = started(&img, &ov, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stderr,
        format!(
            "standin patch for vllm: no vllm here, nothing to do\n\
             INFO infera-exec: [engine-patch] `{}` applied\n\
             INFO infera-exec: [start] vllm 0.17.1+rocm700 (infera.engine.vllm) from tree rocm7-py312 ({}) with \
             /usr/bin/python3.12 3.12; added --tensor-parallel-size 8 --mm-encoder-tp-mode data --kv-cache-dtype auto \
             --host 0.0.0.0 ([host-default] added --host 0.0.0.0: the router reaches this worker from another pod, and \
             with vLLM's default (None) infera.engine.vllm waits for http://None:PORT/health and never becomes ready; \
             [tp-default] added --tensor-parallel-size 8: the GPUs visible to this container \
             (HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7), which the model's 64 attention heads divide; \
             [mm-encoder-tp-mode] added --mm-encoder-tp-mode data: /models/kimi-k3 is multimodal and TP is 8; the \
             vision encoder runs data-parallel instead of sharded; [kv-cache-dtype-mla] added --kv-cache-dtype auto: \
             /models/kimi-k3 is an MLA model (MLA: model_type kimi_k3 with kv_lora_rank 512; multimodal: vision_config \
             present; hybrid: linear_attn_config present); fp8 KV with MLA crashes on ROCm)\n",
            ov.overlay().join("patches/vllm/10_standin_marker.py").display(),
            tree.display()
        )
    );
    assert_eq!(out.standin()["standin"], "infera.engine.vllm");

    // warn: the start line is gone, the warning stays. (Without the engine patch, whose
    // own output is not the launcher's log.)
    let out = started(&img, &ov, &[("INFERA_LOG", "warn"), ("INFERA_SKIP_ENGINE_PATCHES", "1")]);
    assert_eq!(out.code, 0);
    let lines: Vec<&str> = out.stderr.lines().map(|l| &l[..l.find(']').unwrap() + 1]).collect();
    // The fix the launcher applied (kv-cache-dtype-mla) is in the start line, not a warning.
    assert_eq!(lines, ["WARN infera-exec: [engine-patches-skipped]"]);

    // JSON: one object per line, the same codes and messages.
    let out = started(&img, &ov, &[("INFERA_LOG_FORMAT", "json"), ("INFERA_SKIP_ENGINE_PATCHES", "1")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<serde_json::Value> = out.stderr.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert_eq!(
        (lines[0]["level"].as_str(), lines[0]["code"].as_str(), lines[0]["target"].as_str()),
        (Some("warn"), Some("engine-patches-skipped"), Some("infera_exec::commands::run"))
    );
    assert_eq!(lines[0]["message"].as_str(), Some("1 engine patches not run: INFERA_SKIP_ENGINE_PATCHES is set"));
    assert_eq!((lines[1]["level"].as_str(), lines[1]["code"].as_str()), (Some("info"), Some("start")));
    assert!(lines[1]["message"]
        .as_str()
        .unwrap()
        .starts_with("vllm 0.17.1+rocm700 (infera.engine.vllm) from tree rocm7-py312"));
    let time = lines[1]["time"].as_str().unwrap();
    assert!(time.len() >= 20 && time.as_bytes()[10] == b'T' && time.ends_with('Z'), "{time}");

    // ... all the way to a refusal, a usage error included: the line a collector most needs.
    let out = infera(&["worker", "--dry-run", "--", "--tensor-parallel-size", "16"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_GPUS", "8")
        .env("INFERA_LOG_FORMAT", "json")
        .run();
    let lines: Vec<serde_json::Value> =
        out.stderr.lines().map(|l| serde_json::from_str(l).expect(&out.stderr)).collect();
    let last = lines.last().expect("a refusal line");
    assert_eq!(out.code, 78, "{}", out.stderr);
    assert_eq!((last["level"].as_str(), last["code"].as_str()), (Some("error"), Some("tp-exceeds-gpus")), "{last}");
    assert_eq!(last["exit_code"], 78);
    assert!(last["hint"].as_str().unwrap().starts_with("lower the tensor parallel size to 8"), "{last}");
    let out = infera(&["worker", "--model", "/m"]).env("INFERA_LOG_FORMAT", "json").run();
    let only: serde_json::Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!((out.code, only["code"].as_str(), only["exit_code"].as_i64()), (2, Some("usage"), Some(2)), "{only}");
    assert_eq!(only["hint"], "the engine's args go after `--`: infera-exec worker -- --model /m");

    // debug: the info findings as well.
    let out = started(&img, &ov, &[("INFERA_LOG", "debug")]);
    assert_eq!(out.code, 0);
    assert!(out.stderr.contains("DEBUG infera-exec: [tp-default] added --tensor-parallel-size 8"), "{}", out.stderr);

    // Bad values are usage errors, before anything else.
    for (k, v, want) in [
        (
            "INFERA_LOG",
            "verbose",
            "error[log-filter-invalid]: INFERA_LOG=`verbose`: `verbose` is not a target of infera-exec's logs: the \
             launcher's logs are under `infera_exec`; the engine's own logging has its own variables \
             (VLLM_LOGGING_LEVEL, SGLANG_LOG_LEVEL)\nhint: give a level (off, error, warn, info, debug, trace) or \
             target=level directives, comma-separated, e.g. `debug` or `info,infera_exec::exec=debug`\n",
        ),
        (
            "INFERA_LOG",
            "infera_exec=loud",
            "error[log-filter-invalid]: INFERA_LOG=`infera_exec=loud`: ",
        ),
        (
            "INFERA_LOG_FORMAT",
            "xml",
            "error[log-format-invalid]: INFERA_LOG_FORMAT=`xml`: expected text or json\nhint: unset it for text lines, \
             or set json\n",
        ),
    ] {
        let out = started(&img, &ov, &[(k, v)]);
        assert_eq!(out.code, 2, "{k}={v}");
        assert!(out.stderr.starts_with(want), "{k}={v}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "nothing ran: {}", out.stdout);
    }
}

/// `--root` with an unpacked image reads the image's files, and with `--image-env` the
/// image's environment: the sglang image's python3 is on its PATH (/opt/venv/bin), not on
/// the host's.
#[test]
fn image_env_gives_the_images_path() {
    let img = sglang_image("3.10", None);
    let ov = shipped_overlay();
    let env_path = img.env_path.clone().unwrap();
    assert!(env_path.starts_with("/opt/venv/bin:"), "{env_path}");
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["worker", "--dry-run", "--output", "json"];
        args.extend_from_slice(extra);
        args.extend(["--", "--model", "/models/m"]);
        let mut r = infera(&args).env("INFERA_ROOT", img.path()).overlay(&ov.overlay());
        for (k, v) in env {
            r = r.env(k, *v);
        }
        r.run()
    };
    // The host's PATH: the image has no python3 there (its CPython is the venv's).
    let out = run(&[], &[]);
    assert_eq!(out.code, 66);
    assert_eq!(
        out.stderr,
        "error[python-missing]: no `python3` or `python` on the container's PATH \
         (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)\nhint: run an engine image that has CPython, \
         or put its bin directory on PATH\n"
    );
    // podman image inspect's JSON, an OCI config, KEY=VALUE lines, one KEY=VALUE: the venv.
    let files = Fx::new();
    files.file("inspect.json", format!(r#"[{{"Id":"x","Config":{{"Env":["PATH={env_path}","LANG=C.UTF-8"]}}}}]"#));
    files.file("config.json", format!(r#"{{"architecture":"amd64","config":{{"Env":["PATH={env_path}"]}}}}"#));
    files.file("env.list", format!("# the image's ENV\nPATH={env_path}\n\nLANG=C.UTF-8\n"));
    let path_kv = format!("PATH={env_path}");
    for opt in [
        files.p("inspect.json").display().to_string(),
        files.p("config.json").display().to_string(),
        files.p("env.list").display().to_string(),
        path_kv.clone(),
    ] {
        let j = run(&["--image-env", &opt], &[]).json();
        assert_eq!(j["facts"]["python"]["executable"], "/opt/venv/bin/python3", "{opt}: {j:#}");
        let tree_bin = ov.overlay().join("trees/rocm7-py310/bin");
        assert_eq!(j["exec"]["env"]["PATH"], format!("{}:{env_path}", tree_bin.display()), "{opt}");
    }
    // The variable, too.
    let j = run(&[], &[("INFERA_IMAGE_ENV", &path_kv)]).json();
    assert_eq!(j["facts"]["python"]["executable"], "/opt/venv/bin/python3");
    // `-` (stdin) and a pipe (`<(podman image inspect IMAGE)` is /dev/fd/N): read to their end.
    let inspect = std::fs::read(files.p("inspect.json")).unwrap();
    let script = format!("exec {BIN} worker --dry-run --output json --image-env \"$1\" -- --model /m");
    for (how, arg) in [("stdin", "-"), ("a pipe", "/dev/fd/3")] {
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("{script} 3<&0"), "sh", arg])
            .env("INFERA_ROOT", img.path())
            .env("INFERA_OVERLAY", ov.overlay())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &inspect).unwrap();
        let out = child.wait_with_output().unwrap();
        let j: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{how}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(j["facts"]["python"]["executable"], "/opt/venv/bin/python3", "{how}");
    }

    // Without --root it would be the host's own environment: refused.
    let out = infera(&["worker", "--dry-run", "--image-env", &path_kv]).run();
    assert_eq!(out.code, 2);
    assert!(out.stderr.starts_with("error[image-env-without-root]: --image-env"), "{}", out.stderr);
    let out = run(&["--image-env", "/nonexistent/env.list"], &[]);
    assert_eq!(out.code, 66);
    assert!(out.stderr.contains("error[image-env-missing]: --image-env `/nonexistent/env.list`"), "{}", out.stderr);
    files.file("bad.json", "[{\"Config\": {\"Env\": 5}}]");
    let out = run(&["--image-env", &files.p("bad.json").display().to_string()], &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("error[image-env-invalid]:"), "{}", out.stderr);
}

/// A newer engine than the tree was released for is refused (69) unless an operator allows
/// it knowingly; then it runs, the refusal accepted and said so. An engine the tree's module is
/// known to fail on (vLLM 0.29+ moved the parser infera.engine.vllm imports) is refused
/// whatever `--allow` says, naming why and the newest release that runs.
#[test]
fn allow_engine_version_runs_a_newer_engine_knowingly() {
    let img = image("sglang-at-0.6.0");
    let ov = shipped_overlay();
    let out =
        infera(&["worker", "--dry-run", "--", "--model-path", "/models/m"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 69, "{}", out.stderr);
    let record = "/opt/venv/lib/python3.12/site-packages/sglang-0.6.0.dist-info";
    assert!(
        out.stderr.starts_with(&format!(
            "error[engine-version]: the image has sglang 0.6.0 (`{record}`) but tree rocm7-py312 supports sglang \
             >=0.4.6.post5, <0.6\nhint: use an image the overlay supports (its support matrix: `infera-exec --version`) or \
             an overlay release that supports this engine version; or set INFERA_ALLOW=engine-version to run it anyway\n"
        )),
        "{}",
        out.stderr
    );
    for allow in [&["--allow", "engine-version"][..], &["--allow=kv-fp8-mla,engine-version"]] {
        let mut args = vec!["worker", "--dry-run"];
        args.extend_from_slice(allow);
        args.extend(["--", "--model-path", "/models/m"]);
        let out = infera(&args).root(&img).overlay(&ov.overlay()).run();
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stdout.contains(&format!(
                "  accepted  [engine-version] allowed by INFERA_ALLOW/--allow: the image has sglang 0.6.0 (`{record}`) but \
                 tree rocm7-py312 supports sglang >=0.4.6.post5, <0.6; the tree was not built against this version\n            \
                 accepted by --allow\n"
            )),
            "{}",
            out.stdout
        );
    }

    let img = vllm_image(None);
    img.rm(&format!("{VLLM_SITE}/vllm-0.17.1+rocm700.dist-info"))
        .dist(VLLM_SITE, "vllm", "0.34.1")
        .file(&format!("{VLLM_SITE}/vllm/_version.py"), "__version__ = version = '0.34.1'\n");
    let out = infera(&["server", "--dry-run", "--", "--router-tokenizer-path=Qwen/Qwen3-0.6B"])
        .root(&img)
        .overlay(&ov.overlay())
        .run();
    assert_eq!(out.code, 0, "the router does not care: {}", out.stderr);
    let record = format!("{VLLM_SITE}/vllm-0.34.1.dist-info");
    let refused = format!(
        "error[engine-version]: the image has vllm 0.34.1 (`{record}`), on which tree rocm7-py312's infera.engine.vllm \
         fails: vLLM 0.29 moved make_arg_parser (0.33 again), which infera.engine.vllm imports: it exits with \
         ImportError before vLLM starts{{allowed}}\nhint: use an image with vllm >=0.9, <0.29 (the newest release \
         recorded in it: 0.28.0) (`infera-exec --version` lists the images this release judged), or an overlay release \
         built for vllm 0.34.1; --allow engine-version cannot help: it fails before the engine starts\n"
    );
    for (allow, said) in [(None, ""), (Some("engine-version"), " (--allow engine-version was given: it cannot run it)")]
    {
        let mut args = vec!["worker", "--dry-run"];
        args.extend(allow.iter().flat_map(|a| ["--allow", a]));
        args.extend(["--", "--model", "/models/m"]);
        let out = infera(&args).root(&img).overlay(&ov.overlay()).run();
        assert_eq!(out.code, 69);
        assert_eq!(out.stderr, refused.replace("{allowed}", said));
    }
    let out = infera(&["worker", "--dry-run", "--allow", "engine-versoin"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("hint: did you mean `engine-version`?"), "{}", out.stderr);
}

/// `check` and the worker as a non-root uid inside a chroot of the vLLM image, with real
/// device nodes (mknod: /dev/kfd in group 44 = video, renderD128 in group 109 = render), a
/// KFD topology with one gfx942 GPU, and a DKMS driver version, all on tmpfs in a private
/// mount namespace. `groups`: the supplementary groups the launcher runs with.
fn in_chroot(groups: &str, args: &[&str]) -> Out {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    let r = img.path();
    let cp = std::process::Command::new("cp").arg("-a").arg(ov.overlay()).arg(img.p("/opt/infera")).status().unwrap();
    assert!(cp.success());
    std::fs::copy(BIN, img.p("/infera-exec")).unwrap();
    let script = r#"set -e
R="$1"; shift; GROUPS_="$1"; shift
chmod 755 "$R"
mkdir -p "$R/dev" "$R/sys" "$R/proc"
mount -t tmpfs -o mode=755 dev "$R/dev"
mknod -m 0666 "$R/dev/null" c 1 3
mknod -m 0660 "$R/dev/kfd" c 238 0 && chown 0:44 "$R/dev/kfd"
mkdir "$R/dev/dri"
mknod -m 0660 "$R/dev/dri/renderD128" c 226 128 && chown 0:109 "$R/dev/dri/renderD128"
mount -t tmpfs -o mode=755 sys "$R/sys"
T="$R/sys/class/kfd/kfd/topology/nodes"
mkdir -p "$T/0" "$T/1" "$R/sys/module/amdgpu"
printf 'cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\ndrm_render_minor 0\n' > "$T/0/properties"
printf 'cpu_cores_count 0\nsimd_count 1216\ngfx_target_version 90402\ndrm_render_minor 128\n' > "$T/1/properties"
echo 6.12.12 > "$R/sys/module/amdgpu/version"
mount --bind /proc "$R/proc"
exec chroot --userspec=1000:1000 --groups="$GROUPS_" "$R" /infera-exec "$@"
"#;
    let mut run = std::process::Command::new("unshare");
    run.args(["-m", "--propagation", "private", "sh", "-c", script, "sh"]).arg(r).arg(groups).args(args);
    run.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", img.env_path.clone().unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()))
        .env("INFERA_OVERLAY", "/opt/infera")
        .env("HIP_VISIBLE_DEVICES", "0");
    let o = run.output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[test]
fn check_says_whether_this_uid_can_open_the_gpu_devices() {
    // In both groups: usable; the architecture and the driver reported.
    let out = in_chroot("44,109", &["check"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let devices: Vec<&str> = out.stdout.lines().skip_while(|l| !l.starts_with("  devices")).take(4).collect();
    assert_eq!(
        devices,
        [
            "  devices   /dev/kfd present, 1 render nodes; this process: uid 1000, groups 44,109,1000",
            "            /dev/kfd             crw-rw---- 0:44    can open (read-write)",
            "            /dev/dri/renderD128  crw-rw---- 0:109   can open (read-write)",
            "  gpu arch  node 1 gfx942 renderD128",
        ]
    );
    let driver = out.stdout.lines().find(|l| l.starts_with("  driver")).unwrap();
    assert!(driver.starts_with("  driver    amdgpu 6.12.12 (/sys/module/amdgpu/version), kernel "), "{driver}");

    // Not in the render group: check says why, and the worker is refused before it starts.
    let out = in_chroot("44", &["check"]);
    let why = "mode crw-rw---- 0:109 grants read-write to uid 0 and group 109 only; this process (uid 1000, groups \
               44,1000) is neither its owner (0) nor in its group (109), or a security module denies it";
    assert!(
        out.stdout.contains(&format!("            /dev/dri/renderD128  crw-rw---- 0:109   CANNOT OPEN: {why}\n")),
        "{}",
        out.stdout
    );
    let out = in_chroot("44", &["worker", "--dry-run", "--", "--model", "/models/kimi-k3"]);
    assert_eq!(out.code, 69, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr,
        format!(
            "error[gpu-device-denied]: this process cannot open /dev/dri/renderD128: {why}; the engine would fail with \
             no usable GPU after it starts\nhint: run the container with the device nodes' group (pod \
             securityContext.supplementalGroups: the `video` and `render` gids of the node, as the mode shows), or as \
             the uid that owns them\n"
        )
    );
    // Neither group: both named.
    let out = in_chroot("", &["worker", "--dry-run", "--", "--model", "/models/kimi-k3"]);
    assert_eq!(out.code, 69);
    assert!(out.stderr.starts_with("error[gpu-device-denied]: this process cannot open /dev/kfd: "), "{}", out.stderr);
    assert!(out.stderr.contains(" (and 1 more: /dev/dri/renderD128); the engine would fail"), "{}", out.stderr);
}

/// The docs name only files that are in the repository.
#[test]
fn docs_link_only_files_in_the_repository() {
    let mut checked = 0;
    let mut docs = vec![
        "README.md",
        "overlay-layout/README.md",
        "BENCHMARKS.md",
        "tests/bad-inputs/README.md",
        "examples/k8s/README.md",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        docs.push(format!("docs/{}", entry.unwrap().file_name().to_string_lossy()));
    }
    for doc in &docs {
        let path = repo().join(doc);
        let text = std::fs::read_to_string(&path).unwrap();
        for name in ["DESIGN.md", "FACTS.md", "STYLE.md"] {
            assert!(!text.contains(name), "{doc} mentions {name}, which is not in the repository");
        }
        let base = path.parent().unwrap();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            if target.starts_with("http") || target.starts_with('#') {
                continue;
            }
            let target = target.split('#').next().unwrap();
            assert!(base.join(target).exists(), "{doc}: link to `{target}`, which does not exist");
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} links checked");
}

/// infera.engine.vllm parses vLLM's options itself with a plain argparse parser and
/// `allow_abbrev=False` (infera/engine/vllm/args.py): on its command line a prefix, an
/// `--under_score` or a dotted `--json-option.key` is "unrecognized arguments" (checked
/// against the real wrapper with vLLM 0.28.0's parser), so the launcher refuses them with the
/// full option, whatever the bare `vllm serve` would accept. The wrapper's own options pass.
#[test]
fn the_wrappers_parser_takes_no_abbreviations_or_flexible_forms() {
    let img = image("vllm-0.28");
    let ov = shipped_overlay();
    let run = |args: &[&str]| dry_json(&img, &ov, "0,1,2,3", args);
    for (args, code, message) in [
        (
            &["--model", "/m", "--tensor-parallel", "2"][..],
            "arg-abbreviation-refused",
            "`--tensor-parallel` (arg 3) is not an option of infera.engine.vllm: its parser takes no abbreviations \
             (allow_abbrev=False) and exits 2 with `unrecognized arguments`; you meant --tensor-parallel-size",
        ),
        (
            &["--model", "/m", "--max_num_seqs", "4"],
            "arg-form-refused",
            "`--max_num_seqs` (arg 3) is not an option of infera.engine.vllm: it parses vLLM's options with a plain \
             argparse parser, which reads no `--under_score` form (only `vllm serve` does), and exits 2 with \
             `unrecognized arguments`",
        ),
        (
            &["--model", "/m", "--kv-transfer-config.kv_role=kv_producer"],
            "arg-form-refused",
            "`--kv-transfer-config.kv_role` (arg 3) is not an option of infera.engine.vllm: it parses vLLM's options \
             with a plain argparse parser, which reads no `--option.key` form (only `vllm serve` does), and exits 2 \
             with `unrecognized arguments`",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        let j = out.json();
        assert_eq!((j["error"]["code"].as_str(), j["error"]["message"].as_str()), (Some(code), Some(message)));
    }
    // The wrapper's own `--kv-events` is not a prefix of vLLM's `--kv-events-config`.
    let out = run(&["--model", "/m", "--kv-events", "on", "--tensor-parallel-size", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert!(!j["findings"].to_string().contains("arg-abbreviation"), "{}", j["findings"]);
    assert!(j["exec"]["argv"].to_string().contains(r#""--kv-events","on""#), "{}", j["exec"]["argv"]);
    // vLLM 0.11 (no recorded list): the launcher's own spellings are enough to refuse.
    let old = vllm_image(None);
    let out = infera(&["worker", "--dry-run", "--", "--tensor-parallel", "2"])
        .root(&old)
        .overlay(&ov.overlay())
        .env("HIP_VISIBLE_DEVICES", "0,1,2,3")
        .run();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("error[arg-abbreviation-refused]: `--tensor-parallel` (arg 1)"), "{}", out.stderr);
}

/// vLLM's `--config FILE.yaml`: its options come before the command line's (CLI > file >
/// defaults), so the launcher reads the file and adds no default the file sets.
#[test]
fn engine_config_file_is_read_and_its_settings_are_not_overridden() {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", KIMI);
    img.file("/etc/serve/kimi.yaml", "model: /models/kimi-k3\ntensor-parallel-size: 4\nmax_num_seqs: 0x40\n");
    img.file("/etc/serve/fp8.yaml", "model: /models/kimi-k3\nkv-cache-dtype: fp8\n");
    img.file("/etc/serve/serve.json", "{}");
    img.file("/etc/serve/bad.yaml", "model: [unclosed\n");
    img.file("/etc/serve/merged.yaml", "model: /models/kimi-k3\n<<: {kv-cache-dtype: fp8_e4m3}\n");
    let ov = shipped_overlay();
    let run = |args: &[&str]| dry_json(&img, &ov, "0,1,2,3,4,5,6,7", args);
    let findings = |j: &serde_json::Value, code: &str| -> Vec<String> {
        j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == code)
            .map(|f| f["message"].as_str().unwrap().to_string())
            .collect()
    };
    // The file sets TP 4 and names the model: no TP default; the model's rules apply. The
    // file's model is written out: infera.engine.vllm wants --model on its command line.
    let out = run(&["--config", "/etc/serve/kimi.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = out.json();
    assert_eq!(
        j["exec"]["added_args"],
        serde_json::json!([
            "--mm-encoder-tp-mode",
            "data",
            "--kv-cache-dtype",
            "auto",
            "--model",
            "/models/kimi-k3",
            "--host",
            "0.0.0.0"
        ]),
        "{:#}",
        j["findings"]
    );
    assert_eq!(
        findings(&j, "config-made-explicit"),
        ["added --model /models/kimi-k3 from the --config file: infera.engine.vllm reads only its command line for \
          --model (without it there it exits 2, `vLLM --model is required`)"]
    );
    assert_eq!(
        findings(&j, "engine-config"),
        ["read --config `/etc/serve/kimi.yaml` as vllm reads it: model, tensor-parallel-size, max_num_seqs (before the \
          command line's args, which win over it)"]
    );
    assert_eq!(j["facts"]["models"][0]["reference"], "/models/kimi-k3");
    // A known-bad value in the file is refused with the file named as its source.
    let out = run(&["--config", "/etc/serve/fp8.yaml"]);
    assert_eq!(out.code, 78, "{}", out.stderr);
    assert!(out.stderr.contains("--kv-cache-dtype fp8 (set in the --config file)"), "{}", out.stderr);
    // ... also when it comes through a YAML merge key, as vLLM's PyYAML reads it.
    let out = run(&["--config", "/etc/serve/merged.yaml"]);
    assert_eq!(out.code, 78, "{}", out.stderr);
    assert!(out.stderr.contains("--kv-cache-dtype fp8_e4m3 (set in the --config file)"), "{}", out.stderr);
    // The command line wins over the file.
    let out = run(&["--config", "/etc/serve/fp8.yaml", "--kv-cache-dtype", "auto"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Not YAML by name: the engine refuses it at once; so does the launcher, as a usage error.
    let out = run(&["--config", "/etc/serve/serve.json"]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error[engine-config-invalid]: --config `/etc/serve/serve.json`: vllm reads only .yaml/.yml config files and \
         exits on any other\nhint: write the options as YAML in a .yaml file\n"
    );
    let out = run(&["--config", "/etc/serve/kimi.yaml", "--config", "/etc/serve/fp8.yaml"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.starts_with("error[engine-config-twice]: `--config` is given 2 times"), "{}", out.stderr);
    // Not readable here (a ConfigMap in the pod, or not YAML to this reader): no default is
    // added, since one could override the file; the warning says so.
    for (file, why) in [
        ("/etc/serve/absent.yaml", "--config `/etc/serve/absent.yaml` is not in the image root (a volume in the pod?)"),
        ("/etc/serve/bad.yaml", "--config `/etc/serve/bad.yaml` could not be read here (not YAML: "),
    ] {
        let out = run(&["--config", file, "--model", "/models/kimi-k3"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let j = out.json();
        assert_eq!(j["exec"]["added_args"], serde_json::json!([]));
        let w = findings(&j, "engine-config-unread");
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with(why), "{}", w[0]);
        assert!(w[0].ends_with(
            ": no defaults added (one could override what the file sets); the rules read the command line only"
        ));
    }
}

/// A hint that is a command works when pasted: each slip's hint, run as the shell would run
/// it (with this launcher for `infera-exec`), plans what the slip meant.
#[test]
fn hints_that_are_commands_work_when_pasted() {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", include_str!("../../../../examples/models/kimi-k3/config.json"));
    let ov = shipped_overlay();
    let slips: [&[&str]; 5] = [
        &["worker", "--dry-run", "--tensor-parallel-size", "4", "--", "--model", "/models/kimi-k3"],
        &["worker", "--tensor-parallel-size", "4", "--dry-run", "--output", "json", "--", "--model", "/models/kimi-k3"],
        &["worker", "--dry-run", "--model", "/models/kimi-k3", "--tensor-parallel-size", "4"],
        &["worker", "-tp", "4", "--dry-run", "--engine", "vllm", "--", "--model", "/models/kimi-k3"],
        &["server", "--dry-run", "--router-tokenizer-path", "/models/kimi-k3"],
    ];
    for slip in slips {
        let out = infera(slip).root(&img).overlay(&ov.overlay()).env("INFERA_GPUS", "8").run();
        assert_eq!(out.code, 2, "{slip:?}: {}", out.stderr);
        let hint = out.stderr.lines().find_map(|l| l.trim().strip_prefix("hint: ")).unwrap_or_default();
        let command = hint.split_once(": infera-exec ").map(|(_, c)| c).unwrap_or_else(|| panic!("{slip:?}: {hint}"));
        let pasted = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec \"$BIN\" {command}"))
            .env("BIN", BIN)
            .env("NATS_SERVER", crate::support::POD_NATS)
            .env("INFERA_ROOT", img.path())
            .env("INFERA_OVERLAY", ov.overlay())
            .env("INFERA_GPUS", "8")
            .env("INFERA_OUTPUT", "json")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&pasted.stderr);
        assert_eq!(pasted.status.code(), Some(0), "{slip:?} → `{command}`: {stderr}");
        let plan: serde_json::Value = serde_json::from_slice(&pasted.stdout).unwrap();
        let argv: Vec<&str> = plan["exec"]["argv"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
        let wanted: &[&str] = if slip[0] == "server" {
            &["--router-tokenizer-path", "/models/kimi-k3"]
        } else {
            &["--model", "/models/kimi-k3"]
        };
        assert!(argv.windows(2).any(|w| w == wanted), "{command}: {argv:?}");
        if slip[0] == "worker" {
            let tp = if slip.contains(&"-tp") { ["-tp", "4"] } else { ["--tensor-parallel-size", "4"] };
            assert!(argv.windows(2).any(|w| w == tp), "{command}: {argv:?}");
            assert_eq!(
                plan["exec"]["added_args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|a| a.as_str() == Some("--tensor-parallel-size"))
                    .count(),
                0,
                "{command}: TP is the user's"
            );
        }
    }
    // kubectl's reflex: `-o json` is `--output json`.
    let out = infera(&["worker", "--dry-run", "-o", "json", "--", "--model", "/models/kimi-k3"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_GPUS", "8")
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["role"], "worker");
    // `-o yaml` (any case): the same document, as YAML.
    let mut keys: Vec<String> = out.json().as_object().unwrap().keys().cloned().collect();
    keys.sort();
    let yaml = infera(&["worker", "--dry-run", "-o", "YAML", "--", "--model", "/models/kimi-k3"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("INFERA_GPUS", "8")
        .run();
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    let mut top: Vec<String> = yaml
        .stdout
        .lines()
        .filter(|l| !l.starts_with([' ', '-']))
        .filter_map(|l| Some(l.split_once(':')?.0.trim_matches('"').to_string()))
        .collect();
    top.sort();
    assert_eq!(top, keys, "{}", yaml.stdout);
    assert!(yaml.stdout.contains("role: worker\n"), "{}", yaml.stdout);
    // A refusal before any plan answers in YAML too.
    let refused = infera(&["check", "-o", "yaml", "--root", "/nonexistent"]).run();
    assert_eq!(refused.code, 66, "{}", refused.stderr);
    assert!(refused.stdout.starts_with("error:\n  code: root-missing\n"), "{}", refused.stdout);
}

/// On one terminal, or with both streams in one file, a refusal is said once (on stderr, with
/// its hint), not also as the plan's last row; piped, the plan keeps its row for whoever
/// reads stdout alone. The capability
/// sets are summarised in text: no capability named twice.
#[test]
fn a_refusal_is_said_once_on_a_terminal_or_in_one_file() {
    let img = vllm_image(None);
    img.file("/models/kimi-k3/config.json", include_str!("../../../../examples/models/kimi-k3/config.json"));
    let ov = shipped_overlay();
    let args = "worker --dry-run -- --model /models/kimi-k3 --kv-cache-dtype fp8";
    let on_a_terminal = std::process::Command::new("script")
        .args(["-qec", &format!("\"$BIN\" {args}"), "/dev/null"])
        .env("BIN", BIN)
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&on_a_terminal.stdout);
    assert_eq!(on_a_terminal.status.code(), Some(78), "{said}");
    assert_eq!(said.matches("fp8 KV cache (fp8) on the MLA model").count(), 1, "{said}");
    assert!(said.contains("error[kv-fp8-mla]") && !said.contains("  refused   [kv-fp8-mla]"), "{said}");
    let piped = infera(&args.split(' ').collect::<Vec<_>>()).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(piped.code, 78);
    assert!(piped.stdout.contains("  refused   [kv-fp8-mla] exit 78: fp8 KV cache"), "{}", piped.stdout);
    assert!(piped.stderr.starts_with("error[kv-fp8-mla]"), "{}", piped.stderr);
    // Both streams into one file (a CI log): once there too.
    let log = img.p("/plan.log");
    let one_file = std::process::Command::new("sh")
        .args(["-c", &format!("\"$BIN\" {args} > \"$LOG\" 2>&1")])
        .env("BIN", BIN)
        .env("LOG", &log)
        .env("INFERA_ROOT", img.path())
        .env("INFERA_OVERLAY", ov.overlay())
        .status()
        .unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(one_file.code(), Some(78), "{said}");
    assert_eq!(said.matches("fp8 KV cache (fp8) on the MLA model").count(), 1, "{said}");
    assert!(said.starts_with("infera-exec worker plan (refused)\n"), "{said}");
    // The process's capability sets, at the host's root.
    let check = infera(&["check", "--root", "/", "--", "--model", "/m"]).overlay(&ov.overlay()).run();
    let caps: Vec<&str> = check.stdout.lines().skip_while(|l| !l.starts_with("  caps ")).take(3).collect();
    assert!(caps[1].trim_start().starts_with("bounding"), "{caps:?}");
    let names: Vec<&str> = caps.iter().flat_map(|l| l.split([' ', ','])).filter(|w| w.starts_with("CAP_")).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "a capability named twice: {caps:?}");
}

/// A dry run on an unpacked image says where it differs from the pod: GPUs unknown (no TP
/// added, and INFERA_GPUS named), this shell's environment in place of the image's, a model
/// that is only a pod's volume — whose files `--volume` brings in, so the model's rules run.
#[test]
fn the_dry_run_says_where_it_differs_from_the_pod() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let run = |extra: &[&str]| {
        let mut args = vec!["worker", "--dry-run", "--root"];
        let root = img.path().display().to_string();
        args.push(&root);
        args.extend(extra);
        args.extend(["--", "--model", "/models/kimi-k3", "--kv-cache-dtype", "fp8"]);
        let mut c = std::process::Command::new(BIN);
        c.args(&args)
            .env_clear()
            .env("NATS_SERVER", crate::support::POD_NATS)
            .env("PATH", "/usr/bin:/bin")
            .env("INFERA_OVERLAY", ov.overlay());
        let o = c.output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&[]);
    assert_eq!(code, Some(0), "{err}");
    for said in [
        "warn      [tp-default-unknown-gpus] no --tensor-parallel-size added: the GPUs this container may use are unknown here",
        "set INFERA_GPUS=N to plan with N",
        "warn      [host-environment] --root without --image-env",
        "warn      [model-unreadable] `/models/kimi-k3` is not in the image root (a volume in the pod?): model rules skipped; give its files with --volume /models=DIR to run them",
    ] {
        assert!(out.contains(said), "{said:?} not in\n{out}");
    }
    // The image's environment and the model's files: the MLA rule runs, and refuses fp8.
    let models = tempfile::tempdir().unwrap();
    std::fs::create_dir(models.path().join("kimi-k3")).unwrap();
    std::fs::copy(repo().join("examples/models/kimi-k3/config.json"), models.path().join("kimi-k3/config.json"))
        .unwrap();
    let volume = format!("/models={}", models.path().display());
    let (code, out, err) = run(&["--image-env", "PATH=/usr/local/bin:/usr/bin:/bin", "--volume", &volume]);
    assert_eq!(code, Some(78), "{out}\n{err}");
    assert!(err.starts_with("error[kv-fp8-mla]: fp8 KV cache (fp8) on the MLA model /models/kimi-k3"), "{err}");
    assert!(!out.contains("host-environment") && !out.contains("model-unreadable"), "{out}");
    // A volume that is no directory here, or no absolute path, is said as such.
    let (code, _, err) = run(&["--volume", "/models=/nonexistent-dir"]);
    assert_eq!((code, err.lines().next().unwrap_or_default()), (Some(66), "error[volume-missing]: --volume /models=/nonexistent-dir: `/nonexistent-dir` is not a directory of this host"));
    let (code, _, err) = run(&["--volume", "models"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.starts_with("error[volume-invalid]: --volume `models`: expected PATH=DIR"), "{err}");
}

/// Habits people bring: `infera-exec version` is `--version` (and `verison` a typo of it, not
/// a program); `--output=JSON` is `json`; a typo of a tree's name is a usage error with the
/// name meant, as every other name is; a refused plan shows no empty capability table.
#[test]
fn version_case_and_tree_names_as_people_type_them() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let version = infera(&["version"]).overlay(&ov.overlay()).run();
    let dashed = infera(&["--version"]).overlay(&ov.overlay()).run();
    assert_eq!((version.code, &version.stdout), (0, &dashed.stdout));
    infera(&["verison"]).run().assert(2, "did you mean `infera-exec version`?");
    let j = infera(&["check", "--output=JSON"]).root(&img).overlay(&ov.overlay()).run();
    assert_eq!(j.code, 0, "{}", j.stderr);
    assert_eq!(j.json()["role"], "check");
    let typo = infera(&["check", "--family", "rocm7-py311"]).root(&img).overlay(&ov.overlay()).run();
    typo.assert(2, "error[family-unknown]: --family rocm7-py311: the overlay has no such tree");
    assert!(typo.stderr.contains("hint: did you mean `rocm7-py312`?"), "{}", typo.stderr);
    assert!(!typo.stdout.contains("capabilities:"), "{}", typo.stdout);
}

/// `completion SHELL` prints a script the shell reads (bash parses it, and it completes the
/// subcommands); a typo of it is one, not a program to plan.
#[test]
fn completion_scripts_for_the_shells() {
    let bash = infera(&["completion", "bash"]).run();
    assert_eq!(bash.code, 0, "{}", bash.stderr);
    assert!(bash.stdout.contains("complete -F _infera__exec"), "{}", bash.stdout);
    for sub in ["worker", "server", "check", "node", "install", "manifest", "version", "completion"] {
        assert!(bash.stdout.contains(sub), "{sub}");
    }
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), &bash.stdout).unwrap();
    // Sourced, then asked to complete `infera-exec chec`.
    let probe = format!(
        "source {}; COMP_WORDS=(infera-exec chec); COMP_CWORD=1; COMP_LINE='infera-exec chec'; COMP_POINT=16; \
         _infera__exec infera-exec chec infera-exec; echo \"${{COMPREPLY[@]}}\"",
        script.path().display()
    );
    let out = std::process::Command::new("bash").args(["-c", &probe]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "check", "{}", String::from_utf8_lossy(&out.stderr));
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = infera(&["completion", shell]).run();
        assert!(o.code == 0 && o.stdout.contains("infera-exec"), "{shell}: {}", o.stderr);
    }
    infera(&["completoin", "bash"]).run().assert(2, "did you mean `infera-exec completion`?");
    let help = infera(&["completion", "--help"]).run();
    assert!(
        help.stdout.contains("Exit codes: 0 ok, 2 usage, 70 internal error (a bug), 74 output not written."),
        "{}",
        help.stdout
    );
}

/// Each command's --help lists the exit codes that command gives, from one table.
#[test]
fn each_help_lists_its_own_exit_codes() {
    let help = |args: &[&str]| infera(args).run().stdout;
    let check = help(&["check", "--help"]);
    assert!(check.contains("Exit codes: 0 ok, 1 a gate failed, 2 usage, "), "{check}");
    assert!(!check.contains("130/143") && !check.contains("--init:"), "{check}");
    let worker = help(&["worker", "--help"]);
    assert!(
        worker.contains("130/143 stopped by SIGINT/SIGTERM while waiting, with --init: the program's code"),
        "{worker}"
    );
    assert!(!worker.contains(" 1 a gate failed"), "{worker}");
    // A run answers with one plan: JUnit (the matrix's) is offered by check alone.
    assert!(worker.contains("- yaml") && !worker.contains("junit"), "{worker}");
    assert!(check.contains("- junit"), "{check}");
    infera(&["worker", "-o", "junit", "--dry-run"]).run().assert(2, "check");
    for sub in ["install", "manifest"] {
        let h = help(&[sub, "--help"]);
        assert!(h.contains("Exit codes: 0 ok, 2 usage, 65 invalid overlay/manifest, 66 missing, 70"), "{sub}: {h}");
        assert!(!h.contains("78"), "{sub}: {h}");
    }
}
