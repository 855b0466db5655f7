//! The real fleet: `--node` given the cluster's own nodes as `kubectl get nodes -o json`
//! prints them (the AMD node labeller's labels, `status.allocatable`), judged per node type,
//! and the verdict handed to the scheduler as a node affinity (`-o affinity`), rendered by the
//! real kustomize into the examples and validated against Kubernetes 1.33 and the CRDs.

use std::path::Path;
use std::process::Command;

use crate::preflight::{hip_library, image_with, on_node, plain, Node, MI300X};
use crate::support::*;

/// The mixed fleet of examples/fleet (MI210, MI300X and MI355X pools, an unlabelled node) with
/// one node of two device ids (the labeller's multi-value form), as a NodeList.
fn fleet_with_a_mixed_node(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo().join("examples/fleet/nodes.json")).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut mixed = doc["items"][2].clone();
    mixed["metadata"]["name"] = "mi300x-mixed".into();
    let labels = mixed["metadata"]["labels"].as_object_mut().unwrap();
    labels.retain(|k, _| !k.contains("gpu.device-id") && !k.contains("gpu.vram"));
    for (k, v) in [
        ("amd.com/gpu.device-id.74a1", "4"),
        ("amd.com/gpu.device-id.74a5", "4"),
        ("beta.amd.com/gpu.device-id.74a1", "4"),
        ("beta.amd.com/gpu.device-id.74a5", "4"),
        ("amd.com/gpu.vram.192G", "4"),
        ("amd.com/gpu.vram.256G", "4"),
        ("beta.amd.com/gpu.vram.192G", "4"),
        ("beta.amd.com/gpu.vram.256G", "4"),
    ] {
        labels.insert(k.into(), v.into());
    }
    doc["items"].as_array_mut().unwrap().push(mixed);
    doc["kind"] = "NodeList".into();
    let path = dir.join("nodes.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    path
}

fn check(img: &Fx, ov: &Path, nodes: &[&str], options: &[&str]) -> Out {
    let mut a: Vec<String> = vec!["check".into(), "--shm-size".into(), "16Gi".into()];
    a.extend(options.iter().map(|s| s.to_string()));
    for n in nodes {
        a.extend(["--node".to_string(), n.to_string()]);
    }
    a.extend(["--", "--model", "/models/kimi-k3"].map(String::from));
    infera(&[]).root(img).overlay(ov).args(a).run()
}

/// A NodeList as kubectl prints it: a column per node type with its GPUs' gfx, memory and
/// count (a node of two device ids is a type of its own), the unlabelled node said, never a
/// column; the same as YAML.
#[test]
fn kubernetes_nodes_are_judged_per_node_type() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx90a", "gfx942", "gfx950"])]);
    let img = image_with(&torch, None, Some(1_500_000_000_000));
    let ov = shipped_overlay();
    let nodes = fleet_with_a_mixed_node(t.path());
    let o = check(&img, &ov.overlay(), &[nodes.to_str().unwrap()], &["-o", "json"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let j = o.json();
    let labels: Vec<&str> = j["nodes"].as_array().unwrap().iter().map(|n| n["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        ["MI210 ×8", "MI300X ×8", "MI355X ×8", "MI300X+MI325X ×8"],
        "in the order the file lists them: {j}"
    );
    assert_eq!(
        j["nodes"][1]["source"],
        format!("{}: 2 nodes (mi300x-a, mi300x-b)", nodes.display()),
        "a type lists its nodes"
    );
    assert_eq!(
        j["unjudged_nodes"],
        serde_json::json!([{"node": "cpu-1",
        "why": "no AMD node labeller labels (amd.com/gpu.device-id): its GPUs are not described"}])
    );
    let cells = j["images"][0]["families"].as_array().unwrap();
    let by = |node: &str| cells.iter().find(|c| c["node"] == node).unwrap().clone();
    assert_eq!(by("MI210 ×8")["error"]["code"], "weights-exceed-vram");
    assert_eq!(by("MI300X ×8")["error"]["code"], "kv-cache-no-room");
    assert_eq!(by("MI355X ×8")["verdict"], "ok");
    // Each type's GPUs as its labels and the part table say: the device id's gfx; the VRAM
    // label's GiB, or the part's exact bytes where the label is the part's rounded (MI300X's
    // KFD bytes); the smallest of several VRAM labels for every GPU of a mixed node;
    // allocatable's count.
    let (gib, mi300x) = (1u64 << 30, 206_141_652_992u64);
    let gpus: Vec<serde_json::Value> = j["nodes"].as_array().unwrap().iter().map(|n| n["gpus"].clone()).collect();
    assert_eq!(
        gpus,
        [
            serde_json::json!({"count": 8, "gfx": ["gfx90a"], "vram": [64 * gib], "device_ids": ["740f"]}),
            serde_json::json!({"count": 8, "gfx": ["gfx942"], "vram": [mi300x], "device_ids": ["74a1"]}),
            serde_json::json!({"count": 8, "gfx": ["gfx950"], "vram": [288 * gib], "device_ids": ["75a3"]}),
            serde_json::json!({"count": 8, "gfx": ["gfx942"], "vram": [mi300x, 192 * gib], "device_ids": ["74a1", "74a5"]}),
        ],
        "{j}"
    );
    let text = check(&img, &ov.overlay(), &[nodes.to_str().unwrap()], &[]);
    assert!(
        text.stdout.contains(
            "nodes not judged: no node type holds them, no cell says they pass\n  cpu-1: no AMD node labeller labels"
        ),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("error[weights-exceed-vram]: the weights of /models/kimi-k3 are 1397.0 GiB"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("more than a GPU's 64.0 GiB (--node MI210 ×8)"), "{}", text.stdout);
    // A node of 192 and 256 GiB GPUs is bounded by the smaller (MI300X's KFD bytes).
    assert!(text.stdout.contains("with rocm7-py312 on MI300X+MI325X ×8: error[kv-cache-no-room]"), "{}", text.stdout);
    // Under --fail-on warn the unjudged node fails the gate.
    let strict = check(&img, &ov.overlay(), &[nodes.to_str().unwrap()], &["--fail-on", "warn", "-o", "junit"]);
    assert_eq!(strict.code, 1);
    assert!(strict.stdout.contains("<failure type=\"node-not-judged\""), "{}", strict.stdout);
    assert_eq!(as_ci_tools_read(&strict.stdout).split(", ").next(), Some("cases 5"));
    // The same nodes as YAML (`kubectl get nodes -o yaml`).
    let yaml = t.path().join("nodes.yaml");
    let py = "import json, sys, yaml; yaml.safe_dump(json.load(open(sys.argv[1])), open(sys.argv[2], 'w'))";
    let st = Command::new("python3").args(["-c", py]).arg(&nodes).arg(&yaml).status().unwrap();
    assert!(st.success());
    let y = check(&img, &ov.overlay(), &[yaml.to_str().unwrap()], &["-o", "json"]);
    let without_source = |j: &serde_json::Value| -> Vec<(serde_json::Value, serde_json::Value)> {
        j["nodes"].as_array().unwrap().iter().map(|n| (n["label"].clone(), n["gpus"].clone())).collect()
    };
    assert_eq!(without_source(&y.json()), without_source(&j), "{}", y.stderr);
    assert_eq!(y.json()["unjudged_nodes"], j["unjudged_nodes"]);
}

/// Bad Kubernetes input, each said with its exit code; 5,000 nodes read as their types.
#[test]
fn bad_and_big_node_lists() {
    let t = tempfile::tempdir().unwrap();
    let img = image_with(&hip_library(t.path(), "torch", &[plain(&["gfx942"])]), None, None);
    let ov = shipped_overlay();
    let put = |name: &str, text: &str| {
        let p = t.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let pod = put("pod.json", r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}"#);
    let o = check(&img, &ov.overlay(), &[&pod], &[]);
    assert_eq!(o.code, 65, "{}", o.stderr);
    assert!(o.stderr.contains("a Pod is not a Node or a List/NodeList of them"), "{}", o.stderr);
    let none = put(
        "zero.json",
        r#"{"kind": "Node", "metadata": {"name": "n", "labels": {"amd.com/gpu.device-id": "74a1"}},
            "status": {"allocatable": {"amd.com/gpu": "0"}}}"#,
    );
    let o = check(&img, &ov.overlay(), &[&none], &[]);
    assert_eq!(o.code, 65, "{}", o.stderr);
    assert!(
        o.stderr.contains("no node of it is described by the AMD node labeller's labels (n: offers no amd.com/gpu"),
        "{}",
        o.stderr
    );
    let contradicting = put(
        "contra.json",
        r#"{"kind": "Node", "metadata": {"name": "n", "labels": {"amd.com/gpu.device-id": "74a1",
            "beta.amd.com/gpu.device-id": "740f"}}, "status": {"allocatable": {"amd.com/gpu": "8"}}}"#,
    );
    let o = check(&img, &ov.overlay(), &[&contradicting, "mi300x"], &[]);
    assert_eq!(o.code, 65, "{}", o.stderr);
    let said =
        "n: its labels contradict each other: amd.com/gpu.device-id says 74a1 but beta.amd.com/gpu.device-id says 740f";
    assert!(o.stderr.contains(said), "{}", o.stderr);
    // Beside a node its labels describe: said, never a column.
    let text = std::fs::read_to_string(&contradicting).unwrap();
    let good = serde_json::json!({"kind": "Node", "metadata": {"name": "g", "labels": {"amd.com/gpu.device-id": "74a1"}},
                                  "status": {"allocatable": {"amd.com/gpu": "8"}}});
    let both =
        serde_json::json!({"kind": "List", "items": [serde_json::from_str::<serde_json::Value>(&text).unwrap(), good]});
    let both = put("both.json", &both.to_string());
    let o = check(&img, &ov.overlay(), &[&both], &["--node", "mi300x"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("nodes not judged: no node type holds them, no cell says they pass\n  {said}")),
        "{}",
        o.stdout
    );
    // 5,000 nodes of three types: three columns.
    let text = std::fs::read_to_string(repo().join("examples/fleet/nodes.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let items: Vec<serde_json::Value> = (0..5000)
        .map(|i| {
            let mut n = doc["items"][2 * (i % 3)].clone();
            n["metadata"]["name"] = format!("gpu-{i:04}").into();
            n
        })
        .collect();
    let big = put("big.json", &serde_json::json!({"kind": "List", "apiVersion": "v1", "items": items}).to_string());
    let o = check(&img, &ov.overlay(), &[&big], &["-o", "json"]);
    assert_eq!(o.json()["nodes"].as_array().map(Vec::len), Some(3), "{}", o.stderr);
    assert!(o.json()["nodes"][0]["source"].as_str().unwrap().contains("1667 nodes (gpu-0000, gpu-0003"));
}

/// The same fleet as named parts and as profiles (written by `infera-exec node -o json` on a
/// node of each pool) gives the verdicts of the Kubernetes form.
#[test]
fn the_kubernetes_form_agrees_with_parts_and_profiles() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx90a", "gfx950"])]);
    let img = image_with(&torch, None, Some(1_500_000_000_000));
    let ov = shipped_overlay();
    let verdicts = |o: &Out| -> Vec<(String, String)> {
        o.json()["images"][0]["families"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (c["verdict"].as_str().unwrap().to_string(), c["error"]["code"].as_str().unwrap_or("").to_string())
            })
            .collect()
    };
    let kube = check(
        &img,
        &ov.overlay(),
        &["examples/fleet/nodes.json"]
            .map(|p| repo().join(p).display().to_string())
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &["-o", "json"],
    );
    let parts = check(&img, &ov.overlay(), &["mi210", "mi300x", "mi355x"], &["-o", "json"]);
    assert_eq!(verdicts(&kube), verdicts(&parts), "{}\n{}", kube.stdout, parts.stdout);
    let gib = 1u64 << 30;
    let mut profiles = Vec::new();
    for (name, gfx, vram) in [("mi210-a", 90010, 64 * gib), ("mi300x-a", 90402, MI300X), ("mi355x-a", 90500, 288 * gib)]
    {
        let node = Node { gfx, vram, ..Node::default() };
        let o = on_node(&node, &img, &[&format!("INFERA_NODE_NAME={name}")], &["node", "-o", "json"]);
        assert_eq!(o.code, 0, "{name}: {}", o.stderr);
        let file = t.path().join(format!("{name}.json"));
        std::fs::write(&file, &o.stdout).unwrap();
        profiles.push(file.display().to_string());
    }
    let profiled =
        check(&img, &ov.overlay(), &profiles.iter().map(String::as_str).collect::<Vec<_>>(), &["-o", "json"]);
    assert_eq!(verdicts(&kube), verdicts(&profiled), "{}\n{}", kube.stdout, profiled.stdout);
    assert_eq!(
        verdicts(&kube).iter().map(|(_, c)| c.as_str()).collect::<Vec<_>>(),
        ["weights-exceed-vram", "gpu-code-missing", ""]
    );
}

/// The verdict as a placement rule: an image with GPU code for gfx90a and gfx950 only, and a
/// model MI210's memory cannot hold, is admitted on MI355X only; the Component renders with the
/// real kustomize into every GPU pod template of the examples, each validated (Kubernetes
/// 1.33, the LeaderWorkerSet and InferaDeployment CRDs); no node type passing is a refusal.
#[test]
fn the_verdict_as_a_node_affinity() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx90a", "gfx950"])]);
    let img = image_with(&torch, None, Some(1_500_000_000_000));
    let ov = shipped_overlay();
    let nodes = repo().join("examples/fleet/nodes.json").display().to_string();
    let o = check(&img, &ov.overlay(), &[&nodes], &["-o", "affinity"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(
            "# Admits: MI355X ×8.\n# Refused: MI210 ×8 (weights-exceed-vram), MI300X ×8 (gpu-code-missing).\n"
        ),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("# Not judged (no term admits them): cpu-1.\n"), "{}", o.stdout);
    assert!(o.stdout.contains("infera.amd.com/placement: \"infera-exec "), "{}", o.stdout);
    let k = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(k.path().join("affinity")).unwrap();
    std::fs::write(k.path().join("affinity/kustomization.yaml"), &o.stdout).unwrap();
    std::os::unix::fs::symlink(repo().join("examples/k8s"), k.path().join("k8s")).unwrap();
    std::fs::create_dir_all(k.path().join("app")).unwrap();
    for (dir, templates) in [("overlays/initcontainer", 1), ("lws/vllm", 2), ("lws/pd", 4), ("inferadeployment", 1)] {
        let kz = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../k8s/{dir}]\ncomponents: [../affinity]\n"
        );
        std::fs::write(k.path().join("app/kustomization.yaml"), kz).unwrap();
        let built = Command::new("kubectl").arg("kustomize").arg(k.path().join("app")).output().unwrap();
        assert!(built.status.success(), "{dir}: {}", String::from_utf8_lossy(&built.stderr));
        let rendered = String::from_utf8(built.stdout).unwrap();
        let terms = rendered.matches("- key: amd.com/gpu.device-id\n").count();
        assert_eq!(terms, templates, "{dir}: a term in every GPU pod template, none elsewhere\n{rendered}");
        assert!(rendered.contains("- 75a3\n") || rendered.contains("- '75a3'\n"), "{rendered}");
        let file = k.path().join(format!("{}.yaml", dir.replace('/', "-")));
        std::fs::write(&file, &rendered).unwrap();
        let valid = Command::new(repo().join("tests/k8s/validate-lws")).arg(&file).output().unwrap();
        assert!(
            valid.status.success(),
            "{dir}: {}{}",
            String::from_utf8_lossy(&valid.stdout),
            String::from_utf8_lossy(&valid.stderr)
        );
    }
    // No node type passes: said, as a refusal.
    let o = check(&img, &ov.overlay(), &["mi210", "mi300x"], &["-o", "affinity"]);
    assert_eq!(o.code, 69, "{}", o.stdout);
    assert!(o.stderr.starts_with("error[placement-none]: no node type of --node passes every check for this image: mi210 (weights-exceed-vram), mi300x (gpu-code-missing)"), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    // A run's output is one plan: -o affinity is check's.
    let o = infera(&["worker", "--dry-run", "-o", "affinity", "--", "--model", "m"])
        .root(&img)
        .overlay(&ov.overlay())
        .run();
    assert_eq!(o.code, 2, "{}", o.stderr);
}
