//! What the README's recipes walked into on a first hour: infera's wrappers' transports,
//! image references as skopeo, podman and docker write them, and the launcher's own help.

use std::process::Command;

use crate::image::tool;
use crate::support::*;

/// The README's worker as written, without the Kubernetes base's transports: infera's wrapper
/// would serve requests and KV events over NATS and, given no server, retry
/// 127.0.0.1:4222 for ever after the engine's load. Refused before anything starts — in the
/// pod (a real run at the image's root) and in its dry run alike — naming the flag and the
/// variable; with the base's transports, a NATS server, or the refusal accepted, it is
/// planned. etcd discovery without its endpoint is refused the same way; a group's rank > 0,
/// which serves nothing, is not held to either.
#[test]
fn a_worker_without_its_nats_is_refused_before_the_load() {
    let img = vllm_image(None);
    let config = std::fs::read_to_string(repo().join("examples/models/kimi-k3/config.json")).unwrap();
    img.file("/models/kimi-k3/config.json", &config);
    let ov = shipped_overlay();
    let args = ["--model", "/models/kimi-k3", "--served-model-name", "kimi-k3", "--max-num-seqs", "128"];
    let dry = |extra: &[&str], env: &[(&str, &str)]| {
        let mut r = infera(&["worker", "--dry-run", "--output", "json", "--"]).args(args).args(extra);
        r = r.env_remove("NATS_SERVER").env("INFERA_GPUS", "8");
        for (k, v) in env {
            r = r.env(k, *v);
        }
        r.root(&img).overlay(&ov.overlay()).run()
    };
    let refused = dry(&[], &[]);
    assert_eq!(refused.code, 78, "{}", refused.stderr);
    assert!(
        refused.stderr.starts_with(
            "error[nats-server-missing]: --request-transport nats (the wrapper's default) and --kv-event-transport \
             nats (the wrapper's default) need a NATS server, and none is given (no --nats-server, no NATS_SERVER)"
        ),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("hint: give --nats-server URL or NATS_SERVER"), "{}", refused.stderr);
    assert_eq!(refused.json()["error"]["code"], "nats-server-missing");

    // The real run in the pod refuses the same, before the engine: nothing of it starts.
    let real = infera(&["worker", "--"]).args(args).env_remove("NATS_SERVER").env("INFERA_GPUS", "8");
    let real = in_image_root(real, &img, &ov.overlay()).run();
    assert_eq!(real.code, 78, "{}{}", real.stdout, real.stderr);
    assert!(real.stderr.contains("error[nats-server-missing]"), "{}", real.stderr);
    assert!(!real.stdout.contains("INFERA-STANDIN"), "the engine never started: {}", real.stdout);

    let base = dry(&["--request-transport", "http", "--kv-event-transport", "zmq"], &[]);
    assert_eq!(base.code, 0, "{}", base.stderr);
    let argv = base.json()["exec"]["argv"].to_string();
    assert!(argv.contains(r#""--request-transport","http","--kv-event-transport","zmq""#), "{argv}");
    for (extra, env) in [
        (&["--nats-server", "nats://nats:4222"][..], &[][..]),
        (&[][..], &[("NATS_SERVER", "nats://nats:4222")][..]),
        (&["--request-transport", "http", "--no-enable-kv-events"][..], &[][..]),
    ] {
        let o = dry(extra, env);
        assert_eq!(o.code, 0, "{extra:?} {env:?}: {}", o.stderr);
        assert!(!o.stdout.contains("nats-server-"), "{extra:?} {env:?}: {}", o.stdout);
    }
    // A NATS in the pod itself, on 127.0.0.1: accepted knowingly, and kept in the plan.
    let accepted = dry(&[], &[("INFERA_ALLOW", "nats-server-missing")]);
    assert_eq!(accepted.code, 0, "{}", accepted.stderr);
    let j = accepted.json();
    let f = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "nats-server-missing").unwrap().clone();
    assert_eq!((f["level"].as_str(), f["accepted"].as_str()), (Some("warn"), Some("INFERA_ALLOW")), "{f}");

    let etcd = dry(&["--request-transport", "http", "--kv-event-transport", "zmq", "--discovery-backend", "etcd"], &[]);
    assert_eq!(etcd.code, 78, "{}", etcd.stderr);
    assert!(etcd.stderr.starts_with("error[etcd-endpoint-missing]: --discovery-backend etcd without --etcd-endpoint"));

    // Rank 1 of a group serves and registers nothing: its transports are the leader's.
    let group = [("LWS_GROUP_SIZE", "2"), ("LWS_WORKER_INDEX", "1"), ("LWS_LEADER_ADDRESS", "kimi-k3-0.kimi-k3")];
    let follower = dry(&[], &group);
    assert_eq!(follower.code, 0, "{}", follower.stderr);
    assert_eq!(follower.json()["group"]["rank"], 1);
    assert!(!follower.stdout.contains("nats-server-"), "{}", follower.stdout);
    let leader = dry(&[], &[("LWS_GROUP_SIZE", "2"), ("LWS_WORKER_INDEX", "0"), ("LWS_LEADER_ADDRESS", "kimi-k3-0")]);
    assert_eq!(leader.code, 78, "{}", leader.stderr);
}

/// An image built with podman and written as each tool writes it, read by the reference that
/// tool prints: `oci:DIR:TAG` (skopeo, podman push), `oci-archive:FILE`, `docker-archive:FILE`;
/// two layouts both tagged `v1` are two JUnit suites; a layout of two images names them; a
/// docker-archive says why it has no manifest digest; from the image alone the pod's
/// NATS_SERVER is not known, and said so (the pod's --env judges it).
#[test]
fn image_references_as_skopeo_podman_and_docker_write_them() {
    let t = tempfile::tempdir().unwrap();
    let tp = t.path().display().to_string();
    let img = vllm_image(None);
    std::fs::write(t.path().join("Containerfile"), "FROM scratch\nCOPY img/ /\nENV PATH=/usr/bin:/bin\n").unwrap();
    let cp = Command::new("cp").arg("-a").arg(img.path()).arg(t.path().join("img")).status().unwrap();
    assert!(cp.success());
    let build = |tag: &str| {
        tool("podman", t.path(), &["build", "-q", "-t", tag, "-f", &format!("{tp}/Containerfile"), &tp]);
    };
    build("localhost/refs:1");
    std::fs::write(t.path().join("img/etc/second"), "another image\n").unwrap();
    build("localhost/refs:2");
    tool("podman", t.path(), &["push", "-q", "localhost/refs:1", &format!("oci:{tp}/a:v1")]);
    tool("podman", t.path(), &["push", "-q", "localhost/refs:1", &format!("oci:{tp}/b:v1")]);
    tool("podman", t.path(), &["push", "-q", "localhost/refs:2", &format!("oci:{tp}/a:v2")]);
    tool(
        "podman",
        t.path(),
        &["save", "-q", "--format", "oci-archive", "-o", &format!("{tp}/i.oci.tar"), "localhost/refs:1"],
    );
    tool(
        "podman",
        t.path(),
        &["save", "-q", "--format", "docker-archive", "-o", &format!("{tp}/i.docker.tar"), "localhost/refs:1"],
    );
    let ov = shipped_overlay();
    let check = |refs: &[&str], extra: &[&str]| {
        let mut a = vec!["check"];
        for r in refs {
            a.extend(["--image", r]);
        }
        a.extend(extra);
        a.extend(["--", "--model", "/models/kimi-k3"]);
        infera(&a).overlay(&ov.overlay()).run()
    };
    let (a1, b1) = (format!("oci:{tp}/a:v1"), format!("oci:{tp}/b:v1"));
    let (oa, da) = (format!("oci-archive:{tp}/i.oci.tar"), format!("docker-archive:{tp}/i.docker.tar"));
    for r in [&a1, &b1, &oa, &da, &format!("docker-archive:{tp}/i.docker.tar:localhost/refs:1")] {
        let o = check(&[r], &["-o", "json"]);
        assert_eq!(o.code, 0, "{r}: {}", o.stderr);
        assert_eq!(o.json()["facts"]["image"]["reference"], r.as_str());
    }
    let junit = check(&[&a1, &b1, &da], &["-o", "junit"]);
    assert_eq!(junit.code, 0, "{}", junit.stderr);
    let doc = roxmltree::Document::parse(&junit.stdout).unwrap();
    let suites: Vec<&str> =
        doc.descendants().filter(|n| n.has_tag_name("testsuite")).filter_map(|n| n.attribute("name")).collect();
    assert_eq!(suites, [a1.as_str(), b1.as_str(), "localhost/refs:1"], "{}", junit.stdout);
    let property = |suite: &str, name: &str| {
        let s = doc.descendants().find(|n| n.attribute("name") == Some(suite)).unwrap();
        s.descendants().find(|p| p.attribute("name") == Some(name)).and_then(|p| p.attribute("value")).map(String::from)
    };
    assert!(property(&a1, "manifest_digest").unwrap().starts_with("sha256:"));
    assert!(property("localhost/refs:1", "manifest_digest").unwrap().starts_with("none: a docker-archive"));
    // From the image alone, the pod's NATS_SERVER is unknown: a warning, never an `ok` that
    // did not judge it; the pod's variables judge it.
    assert!(junit.stdout.contains("nats-server-unjudged"), "{}", junit.stdout);
    let pod = check(&[&a1], &["--env", "NATS_SERVER=nats://nats:4222", "-o", "json"]);
    assert_eq!(pod.code, 0, "{}", pod.stderr);
    assert!(!pod.stdout.contains("nats-server-"), "{}", pod.stdout);
    let pod = check(&[&a1], &["--env", "HF_HUB_OFFLINE=1"]);
    assert_eq!(pod.code, 78, "the pod's variables, without NATS_SERVER: {}{}", pod.stdout, pod.stderr);
    assert!(pod.stderr.contains("error[nats-server-missing]"), "{}", pod.stderr);

    // A layout of two images, named by none: its names, the form to use.
    let two = check(&[&format!("oci:{tp}/a")], &[]);
    assert_eq!(two.code, 2, "{}", two.stderr);
    assert!(
        two.stderr.contains(&format!(
            "error[image-ambiguous]: `oci:{tp}/a` is not an image this reads: it holds 2 images: name one (PATH:TAG \
             or PATH@sha256:…): v1, v2"
        )),
        "{}",
        two.stderr
    );
    let v2 = check(&[&format!("oci:{tp}/a:v2")], &["-o", "json"]);
    assert_eq!(v2.code, 0, "{}", v2.stderr);
    assert_eq!(v2.json()["facts"]["image"]["names"], serde_json::json!(["v2"]), "{}", v2.stdout);
}

/// `check --help` shows what `check` uses (not the options that act only when a run execs),
/// and the shell completion offers no hidden subcommand.
#[test]
fn help_and_completion_show_what_each_command_takes() {
    let run_only = ["--drop-caps", "--no-new-privs", "--chdir", "--skip-engine-patches", "--engine-patch-timeout"];
    let check = infera(&["check", "--help"]).run();
    let worker = infera(&["worker", "--help"]).run();
    assert_eq!((check.code, worker.code), (0, 0));
    for o in run_only {
        assert!(!check.stdout.contains(o), "check --help lists {o}");
        assert!(worker.stdout.contains(o), "worker --help lacks {o}");
    }
    assert!(check.stdout.contains("--image <REF>"), "{}", check.stdout);
    let bash = infera(&["completion", "bash"]).run();
    assert_eq!(bash.code, 0, "{}", bash.stderr);
    assert!(bash.stdout.contains("check") && bash.stdout.contains("worker"), "{}", bash.stdout);
    assert!(!bash.stdout.contains("__prefetch"), "the hidden helper is offered");
    // `-o YAML` as `check` takes it (this machine has no GPU: `node` exits 69, its profile printed).
    let node = infera(&["node", "-o", "YAML"]).run();
    assert_eq!(node.code, 69, "{}", node.stderr);
    assert!(node.stdout.contains("\nschema_version: "), "{}", node.stdout);
}

/// A run under `--root` (an image's files, not the pod) does not wait for the model: its
/// warning says so, instead of a wait that did not happen.
#[test]
fn a_run_under_root_says_it_did_not_wait() {
    let img = vllm_image(None);
    let ov = shipped_overlay();
    let args = ["--model", "/models/absent", "--request-transport", "http", "--kv-event-transport", "zmq"];
    let started = std::time::Instant::now();
    let run = infera(&["worker", "--"]).args(args).env("INFERA_WAIT_MODEL", "600");
    let o = run.root(&img).overlay(&ov.overlay()).run();
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "it waited");
    let m = o.stderr.lines().find(|l| l.contains("[model-unreadable]")).unwrap_or_else(|| panic!("{}", o.stderr));
    assert!(
        m.contains("(not waited for: INFERA_WAIT_MODEL waits in the pod, at its root `/`, not under --root)"),
        "{m}"
    );
    assert!(!m.contains("after waiting"), "{m}");
}
