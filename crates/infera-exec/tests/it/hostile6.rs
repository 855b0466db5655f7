//! Hardening, round six: computations bounded by what a node can be, searches and captures
//! bounded in work and memory, system files read one way, and unreadable never taken for
//! harmless. Every case is a crafted root, archive, profile or env file; each ends (the runs
//! are bounded), never by a signal, with the documented exit code and a message that names
//! what was found.

use crate::image::layout;
use crate::support::*;

/// Sixteen GPU libraries of 15 GiB each, all hole, in a layer of a few KiB (GNU tar's PAX
/// sparse members): the capture is told the holes, never reads them byte by byte; each
/// library is said unreadable as GPU code (no ELF), and the check answers.
#[test]
fn sparse_holes_cost_what_is_kept_of_them() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let site = "usr/local/lib/python3.12/dist-packages/sgl_kernel";
    std::fs::create_dir_all(src.join(site)).unwrap();
    for i in 0..16 {
        let f = std::fs::File::create(src.join(site).join(format!("k{i}.so"))).unwrap();
        f.set_len(15 << 30).unwrap();
    }
    let layer = crate::hostile::sparse_tar(&src, &["--format=posix", "--sparse-version=1.0"]);
    assert!(layer.len() < 64 << 10, "{} bytes: the layer holds no hole", layer.len());
    let l = tempfile::tempdir().unwrap();
    let d = layout(l.path(), &layer, None);
    let out = infera(&["check", "--image"]).args([d.as_os_str()]).run();
    // No CPython in this image: refused for that, after reading every layer.
    assert_eq!(out.code, 66, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("error[python-missing]"), "{}", out.stderr);
}

/// Numbers a file or an argument chooses, bounded by what a deployment can be: a prime head
/// count of 2^31−1 (the layout hint's search), TP × PP past 2^64 (its product), each answered
/// at once with what was found.
#[test]
fn sizes_are_bounded_by_what_a_deployment_can_be() {
    let img = vllm_image(None);
    let config = r#"{"model_type": "llama", "num_attention_heads": 2147483647}"#;
    img.file("/models/m/config.json", config);
    img.file("/models/m/model.safetensors.index.json", r#"{"metadata": {"total_size": 1500000000000}}"#);
    let ov = shipped_overlay();
    let run = |args: &[&str]| {
        let mut a = vec!["check", "--node", "mi300x", "--shm-size", "16Gi", "--", "--model", "/models/m"];
        a.extend(args);
        infera(&a).root(&img).overlay(&ov.overlay()).run()
    };
    let o = run(&["--tensor-parallel-size", "1"]);
    o.assert(78, "error[weights-exceed-vram]").assert(78, "at least 9 at this size: --tensor-parallel-size");
    let big = ["--distributed-executor-backend", "ray", "--tensor-parallel-size", "4294967296"];
    let o = run(&[&big[..], &["--pipeline-parallel-size", "4294967296"]].concat());
    o.assert(78, "error[arg-out-of-range]: --tensor-parallel-size 4294967296 × --pipeline-parallel-size 4294967296: more GPUs than a deployment has (at most 65536: 64 a node × 1024 nodes)");
    let o = run(&["--tensor-parallel-size", "65536", "--pipeline-parallel-size", "2"]);
    o.assert(78, "error[arg-out-of-range]");
}

/// A model path that is not there, of a name 40,000 bytes long, under a volume of 20,000
/// entries: refused as missing at once (no name that long can exist to be near).
#[test]
fn the_nearest_name_search_is_bounded() {
    let img = vllm_image(None);
    let t = tempfile::tempdir().unwrap();
    for i in 0..20_000 {
        std::fs::File::create(t.path().join(format!("model-{i:05}-{}", "x".repeat(40)))).unwrap();
    }
    let name = "k".repeat(40_000);
    let volume = format!("/models={}", t.path().display());
    let model = format!("/models/{name}");
    let o = infera(&["check", "--volume", &volume, "--", "--model", &model])
        .root(&img)
        .overlay(&shipped_overlay().overlay())
        .run();
    o.assert(66, "error[model-missing]");
    assert!(!o.stderr.contains("did you mean"), "{}", o.stderr);
    // A name of a usual length still gets its nearest entry.
    let o = infera(&[
        "check",
        "--volume",
        &volume,
        "--",
        "--model",
        "/models/model-00017-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    ])
    .root(&img)
    .overlay(&shipped_overlay().overlay())
    .run();
    o.assert(66, &format!("did you mean `/models/model-00017-{}`?", "x".repeat(40)));
}

/// The file the wrapper-parser rule decides on, unreadable (a FIFO, a directory, past the
/// bound, a coding it does not read): said, never passed as harmless; read as Python, a `#`
/// in a string or `deprecated=True` in a docstring changes nothing, a Latin-1 file that
/// declares its coding is read.
#[test]
fn an_unreadable_parser_source_is_said() {
    let ov = shipped_overlay();
    let at = format!("{VLLM_SITE}/vllm/engine/arg_utils.py");
    let check = |img: &Fx| infera(&["check"]).root(img).overlay(&ov.overlay()).run();
    let unread = |img: &Fx, why: &str| {
        let o = check(img);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.contains(&format!("[wrapper-parser-unread] `{at}`: {why}")), "{why}: {}", o.stdout);
    };
    let img = image("vllm-at-0.11.0");
    img.rm(&at);
    nix::unistd::mkfifo(&img.p(&at), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    unread(&img, "is a FIFO, not a regular file");
    img.rm(&at).dir(&at);
    unread(&img, "is a directory, not a regular file");
    img.rm(&at);
    std::fs::File::create(img.p(&at)).unwrap().set_len(5 << 20).unwrap();
    unread(&img, "file is larger than 4194304 bytes");
    img.file(&at, b"# -*- coding: cp1252 -*-\nx = 1\n");
    unread(&img, "its coding line declares `cp1252`, which is not read here");
    // Latin-1, declared: read, and its deprecated=True found.
    let latin = b"# -*- coding: latin-1 -*-\n# \xe9\nclass E:\n    def add_cli_args(p):\n        p.add_argument('--x', deprecated=True)\n";
    img.file(&at, latin);
    check(&img).assert(69, "error[wrapper-parser-fails]").assert(69, &format!("`{at}:5`"));
    // In a docstring, or with a `#` in the help string before it on its line: what Python reads.
    img.file(
        &at,
        "class E:\n    def add_cli_args(p):\n        '''p.add_argument(deprecated=True)'''\n        return p\n",
    );
    assert_eq!(check(&img).code, 0);
    img.file(
        &at,
        "class E:\n    def add_cli_args(p):\n        p.add_argument('--x', help='see #1', deprecated = True)\n",
    );
    check(&img).assert(69, "error[wrapper-parser-fails]");
}

/// Every option given is held to the release's own list, the ones the launcher has a
/// spelling of too (sglang 0.5.3 has no `--weight-loader-prefetch-checkpoints`: its parser
/// exits 2); `--help` is said for what it is (the wrapper prints help and exits 0).
#[test]
fn options_the_launcher_knows_are_held_to_the_release() {
    let img = image("sglang-at-0.5.3");
    let ov = shipped_overlay();
    let run = |args: &[&str]| {
        let mut a = vec!["worker", "--dry-run", "--", "--model-path", "/models/m"];
        a.extend(args);
        infera(&a).root(&img).overlay(&ov.overlay()).env("INFERA_GPUS", "8").run()
    };
    run(&["--weight-loader-prefetch-checkpoints"])
        .assert(2, "error[arg-unknown]: `--weight-loader-prefetch-checkpoints`");
    let o = run(&["--help"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("[engine-help] `--help` (arg 3): infera.engine.sglang's parser prints its help and exits 0"),
        "{}",
        o.stdout
    );
    let o =
        infera(&["worker", "--dry-run", "--", "-h"]).root(&img).overlay(&ov.overlay()).env("INFERA_GPUS", "8").run();
    assert_eq!(o.code, 0, "no model needed to print help: {}", o.stderr);
}

/// The pod's env file as docker reads it: a byte order mark dropped; a NUL byte, which
/// execve would refuse after a plan said yes, refused now (the dry run and the run agree).
#[test]
fn an_env_file_is_read_as_the_run_would_be() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("pod.env");
    let run = || {
        infera(&["check", "--env-file", f.to_str().unwrap(), "-o", "json", "--", "--model", "/models/m"])
            .args(["--request-transport", "http", "--kv-event-transport", "zmq"])
            .root(&img)
            .overlay(&ov.overlay())
            .run()
    };
    std::fs::write(&f, b"\xef\xbb\xbfVLLM_LOGGING_LEVEL=DEBUG\n").unwrap();
    let o = run();
    assert_eq!(o.json()["exec"]["env"]["VLLM_LOGGING_LEVEL"], "DEBUG", "{}", o.stderr);
    std::fs::write(&f, b"A=1\nB=x\0y\n").unwrap();
    run().assert(2, "error[image-env-invalid]").assert(2, "line 2: `B=x\\0y` holds a NUL byte");
}

/// Small answers, said as any: `--help` into a full disk is 74; INFERA_GPUS=0 is no GPU for
/// the engine (never a hint to a tensor parallel size of 0).
#[test]
fn help_into_a_full_disk_and_zero_gpus() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let o = std::process::Command::new(BIN).arg("--help").stdout(full).output().unwrap();
    assert_eq!(o.status.code(), Some(74), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("error[output-failed]"));
    let img = vllm_image(None);
    let o = infera(&["worker", "--dry-run", "--", "--model", "/models/m"])
        .root(&img)
        .overlay(&shipped_overlay().overlay())
        .env("INFERA_GPUS", "0")
        .run();
    o.assert(78, "error[gpus-none-visible]: INFERA_GPUS=`0` leaves no GPU for the engine: it names 0 GPUs");
}

/// The fleet matrix at fleet size: 8 images × 64 nodes (profiles of 64 GPUs each), every cell
/// judged, in bounded memory: a cell keeps what the text report needs when it ends (its plan
/// only for a JSON report), and names its node by the column's label.
#[test]
fn a_fleet_sized_matrix_in_bounded_memory() {
    let root = image("vllm-0.28");
    let t = tempfile::tempdir().unwrap();
    let tarball = t.path().join("layer.tar");
    let st = std::process::Command::new("tar").arg("-C").arg(root.path()).arg("-cf").arg(&tarball).arg(".").status();
    assert!(st.unwrap().success());
    let d = layout(t.path(), &std::fs::read(&tarball).unwrap(), None);
    let node = serde_json::to_string(&serde_json::json!({
        "schema_version": 2, "source": "this node (/)", "name": "n", "gpus": (0..64).map(|i| serde_json::json!({
            "node": i + 1, "gfx": "gfx942", "render_minor": 128 + i, "vram": 25_769_803_776u64,
            "compute_partition": "CPX", "memory_partition": "NPS1"})).collect::<Vec<_>>(),
        "driver_loaded": true, "driver": null, "kernel": "6.8", "numa_balancing": 0, "rdma_devices": [],
    }))
    .unwrap();
    let mut args: Vec<String> = vec!["check".into(), "--shm-size".into(), "16Gi".into()];
    for i in 0..64 {
        let f = t.path().join(format!("node-{i}.json"));
        std::fs::write(&f, node.replace("\"name\":\"n\"", &format!("\"name\":\"gpu-node-{i}\""))).unwrap();
        args.extend(["--node".into(), f.display().to_string()]);
    }
    for _ in 0..8 {
        args.extend(["--image".into(), d.display().to_string()]);
    }
    args.extend(["--", "--model", "/models/kimi-k3"].map(String::from));
    let ov = shipped_overlay();
    let mut cmd = std::process::Command::new(BIN);
    cmd.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", "/usr/bin:/bin")
        .env("INFERA_OVERLAY", ov.overlay())
        .args(&args);
    let (out, rss) = run_measured(cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("infera-exec check: 8 images × 64 nodes (1 tree): 0 of 512 applicable cells refused"),
        "{text}"
    );
    assert!(rss < 256 << 20, "peak memory {} MiB", rss >> 20);
}

/// Run `cmd` to its end; its output and its peak resident memory (bytes, from wait4).
fn run_measured(mut cmd: std::process::Command) -> (std::process::Output, u64) {
    use std::os::unix::process::ExitStatusExt;
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let out = child.wait_with_output().unwrap();
    let _ = (pid, out.status.signal());
    // RUSAGE_CHILDREN: the largest of the reaped children, this one the only one of this thread's.
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    (out, usage.max_rss() as u64 * 1024)
}
