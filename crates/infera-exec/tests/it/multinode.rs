//! Multi-node groups and prefill/decode: the flags each rank gets from LeaderWorkerSet's
//! variables (exact), the refusals before anything loads, the leader wait against a real
//! resolver on loopback, the interface checks in a network namespace of the test's own.

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

const GPUS8: (&str, &str) = ("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7");
const LEADER: &str = "kimi-0.kimi.infera";

fn rank_env(size: u32, rank: u32) -> Vec<(String, String)> {
    vec![
        ("LWS_GROUP_SIZE".into(), size.to_string()),
        ("LWS_WORKER_INDEX".into(), rank.to_string()),
        ("LWS_LEADER_ADDRESS".into(), LEADER.into()),
    ]
}

fn plan(img: &Fx, ov: &Fx, cmd: &[&str], env: &[(String, String)]) -> Out {
    let mut r = infera(cmd).root(img).overlay(&ov.overlay()).env("INFERA_DRY_RUN", "1").env("INFERA_OUTPUT", "json");
    r = r.env(GPUS8.0, GPUS8.1).env("MC_FORCE_TCP", "1");
    for (k, v) in env {
        r = r.env(k, v);
    }
    r.run()
}

fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// Every rank's plan: (added args, steps, args digest).
fn ranks(img: &Fx, ov: &Fx, cmd: &[&str], size: u32) -> Vec<(Vec<String>, serde_json::Value, String)> {
    (0..size)
        .map(|r| {
            let out = plan(img, ov, cmd, &rank_env(size, r));
            assert_eq!(out.code, 0, "rank {r}: {}", out.stderr);
            let j = out.json();
            assert_eq!(
                j["group"],
                serde_json::json!({"size": size, "rank": r, "leader": LEADER,
                "source": format!("LWS_GROUP_SIZE={size}, LWS_WORKER_INDEX={r}")})
            );
            let x = &j["exec"];
            assert_eq!(x["env"]["INFERA_ARGS_DIGEST"], x["args_digest"]);
            (strs(&x["added_args"]), x["steps"].clone(), x["args_digest"].as_str().unwrap().to_string())
        })
        .collect()
}

fn v(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[test]
fn vllm_tp8_pp2_and_tp8_pp4_every_rank() {
    let img = image("vllm-0.28");
    let ov = shipped_overlay();
    let cmd = ["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3", "--max-num-seqs", "128"];
    for size in [2u32, 4] {
        let all = ranks(&img, &ov, &cmd, size);
        for (r, (added, steps, digest)) in all.iter().enumerate() {
            let mut want = v(&[
                "--nnodes",
                &size.to_string(),
                "--node-rank",
                &r.to_string(),
                "--master-addr",
                LEADER,
                "--master-port",
                "29501",
            ]);
            if r > 0 {
                want.push("--headless".into());
            }
            want.extend(v(&["--tensor-parallel-size", "8", "--pipeline-parallel-size", &size.to_string()]));
            want.extend(v(&["--mm-encoder-tp-mode", "data", "--kv-cache-dtype", "auto"]));
            if r == 0 {
                want.extend(v(&["--host", "0.0.0.0"]));
            }
            assert_eq!(added, &want, "{size} nodes, rank {r}");
            // Ranks > 0 wait for the leader's name; the leader never waits.
            let waits = steps.as_array().unwrap().iter().filter(|s| s["kind"] == "await-leader").count();
            assert_eq!(waits, usize::from(r > 0), "rank {r}: {steps}");
            assert_eq!(digest, &all[0].2, "every rank shares the engine args but its rank flags");
        }
    }
}

#[test]
fn vllm_tp16_over_two_nodes_and_sglang_tp16() {
    let ov = shipped_overlay();
    let img = image("vllm-0.28");
    let cmd = ["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3", "-tp", "16"];
    let all = ranks(&img, &ov, &cmd, 2);
    assert_eq!(
        all[0].0,
        v(&[
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--master-addr",
            LEADER,
            "--master-port",
            "29501",
            "--mm-encoder-tp-mode",
            "data",
            "--kv-cache-dtype",
            "auto",
            "--host",
            "0.0.0.0"
        ])
    );
    assert_eq!(
        all[1].0,
        v(&[
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            LEADER,
            "--master-port",
            "29501",
            "--headless",
            "--mm-encoder-tp-mode",
            "data",
            "--kv-cache-dtype",
            "auto"
        ])
    );
    assert_eq!(all[0].2, all[1].2);

    let img = image("sglang-rocm724");
    let cmd = ["python3", "-m", "infera.engine.sglang", "--model-path", "/models/kimi-k3", "--tp-size", "16"];
    let all = ranks(&img, &ov, &cmd, 2);
    assert_eq!(
        all[0].0,
        v(&[
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--dist-init-addr",
            "kimi-0.kimi.infera:20000",
            "--kv-cache-dtype",
            "auto",
            "--host",
            "0.0.0.0"
        ])
    );
    assert_eq!(
        all[1].0,
        v(&[
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--dist-init-addr",
            "kimi-0.kimi.infera:20000",
            "--kv-cache-dtype",
            "auto"
        ])
    );
    assert_eq!(all[0].2, all[1].2, "--host on the serving rank only is a rank flag");
    // The user's own flags that agree with the group are kept, not repeated.
    let cmd = [
        "python3",
        "-m",
        "infera.engine.sglang",
        "--model-path",
        "/models/kimi-k3",
        "--tp-size",
        "16",
        "--nnodes",
        "2",
        "--host",
        "10.0.0.9",
    ];
    let out = plan(&img, &ov, &cmd, &rank_env(2, 0));
    assert_eq!(
        strs(&out.json()["exec"]["added_args"]),
        v(&["--node-rank", "0", "--dist-init-addr", "kimi-0.kimi.infera:20000", "--kv-cache-dtype", "auto"])
    );
}

#[test]
fn pd_prefill_and_decode_say_what_the_router_needs() {
    let ov = shipped_overlay();
    let img = image("vllm-0.28");
    for (role, kv_role) in [("prefill", "kv_producer"), ("decode", "kv_consumer")] {
        let kv = format!(r#"{{"kv_connector":"MooncakeConnector","kv_role":"{kv_role}"}}"#);
        let cmd = ["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3", "--kv-transfer-config", &kv];
        // What infera's wrapper registers: the advertised address (POD_IP under kubernetes discovery).
        let mut env = rank_env(2, 0);
        env.push(("POD_IP".into(), "10.4.0.9".into()));
        let j = plan(&img, &ov, &cmd, &env).json();
        assert!(j.get("error").is_none(), "{j}");
        let mut want = serde_json::json!({"role": role, "transfer": "mooncake"});
        if role == "prefill" {
            want["bootstrap_host"] = "10.4.0.9".into();
            want["bootstrap_port"] = 8998.into();
        }
        assert_eq!(j["pd"], want);
        let mc = j["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "mooncake").unwrap().clone();
        assert_eq!(mc["requested_by"], "--kv-transfer-config kv_connector=MooncakeConnector");
    }
    // With etcd discovery the wrapper would publish --host: the launcher adds --advertise-host.
    let kv = r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}"#;
    let cmd = ["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3", "--kv-transfer-config", kv];
    let mut etcd = cmd.to_vec();
    etcd.extend(["--discovery-backend", "etcd", "--etcd-endpoint", "etcd:2379"]);
    let j = plan(&img, &ov, &etcd, &[("POD_IP".into(), "10.4.0.7".into())]).json();
    assert_eq!(
        j["pd"],
        serde_json::json!({"role": "prefill", "bootstrap_host": "10.4.0.7", "bootstrap_port": 8998, "transfer": "mooncake"})
    );
    let added = j["exec"]["added_args"].as_array().unwrap();
    assert_eq!(
        added[added.len() - 4..],
        serde_json::json!(["--host", "0.0.0.0", "--advertise-host", "10.4.0.7"]).as_array().unwrap()[..]
    );
    // No POD_IP and no --advertise-host: the wrapper would refuse a prefill worker publishing 0.0.0.0.
    let out = plan(&img, &ov, &cmd, &[]);
    assert_eq!(out.code, 78, "{}", out.stdout);
    assert_eq!(out.json()["error"]["code"], "advertise-unroutable");
    // kv_both is a MIXED worker to the router: no PD view.
    let both = r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_both"}"#;
    let cmd = ["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3", "--kv-transfer-config", both];
    let j = plan(&img, &ov, &cmd, &[("POD_IP".into(), "10.4.0.7".into())]).json();
    assert!(j["pd"].is_null(), "{}", j["pd"]);
    assert!(j["findings"].to_string().contains("pd-kv-both"), "{}", j["findings"]);
    // sglang: --disaggregation-mode; the prefill's bootstrap is its advertised address.
    let img = image("sglang-rocm724");
    let cmd = [
        "python3",
        "-m",
        "infera.engine.sglang",
        "--model-path",
        "/models/kimi-k3",
        "--tp-size",
        "16",
        "--disaggregation-mode",
        "prefill",
    ];
    let mut env = rank_env(2, 0);
    env.push(("POD_IP".into(), "10.4.0.9".into()));
    let j = plan(&img, &ov, &cmd, &env).json();
    assert_eq!(
        j["pd"],
        serde_json::json!({"role": "prefill", "bootstrap_host": "10.4.0.9", "bootstrap_port": 8998, "transfer": "mooncake"})
    );
}

#[test]
fn refusals_before_anything_loads() {
    let ov = shipped_overlay();
    let vllm = image("vllm-0.28");
    let sglang = image("sglang-rocm724");
    let vcmd = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut c = vec!["python3", "-m", "infera.engine.vllm", "--model", "/models/kimi-k3"];
        c.extend(extra);
        c
    };
    let scmd = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut c = vec!["python3", "-m", "infera.engine.sglang", "--model-path", "/models/kimi-k3"];
        c.extend(extra);
        c
    };
    let e = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    type Case<'a> = (&'a Fx, Vec<&'a str>, Vec<(String, String)>, i32, &'a str);
    let cases: Vec<Case> = vec![
        (&vllm, vcmd(&[]), e(&[("LWS_GROUP_SIZE", "2")]), 2,
         "error[group-partial]: a multi-node group needs its size and this node's rank: LWS_GROUP_SIZE is set but the node rank (LWS_WORKER_INDEX, --node-rank) is not"),
        (&vllm, vcmd(&[]), e(&[("LWS_GROUP_SIZE", "two"), ("LWS_WORKER_INDEX", "0"), ("LWS_LEADER_ADDRESS", LEADER)]), 2,
         "error[group-invalid]: LWS_GROUP_SIZE=`two` is not a whole number"),
        (&vllm, vcmd(&[]), rank_env(2, 2), 2,
         "error[group-rank-out-of-range]: node rank 2 (LWS_GROUP_SIZE=2, LWS_WORKER_INDEX=2) is outside the group of 2 nodes (0 to 1)"),
        (&vllm, vcmd(&[]), e(&[("LWS_GROUP_SIZE", "2"), ("LWS_WORKER_INDEX", "1")]), 2, "error[group-no-leader]"),
        (&vllm, vcmd(&["--node-rank", "1"]), rank_env(2, 0), 78,
         "error[rank-flag-contradicts]: --node-rank 1 in the engine args, but this pod is rank 0 of the group"),
        (&vllm, vcmd(&["--nnodes", "3"]), rank_env(2, 1), 78, "--nnodes 3 in the engine args, but this pod is a group of 2 nodes"),
        (&vllm, vcmd(&["-tp", "3"]), rank_env(2, 0), 78,
         "error[world-not-divisible]: --data-parallel-size 1 × --pipeline-parallel-size 1 × --tensor-parallel-size 3 = 3 processes do not divide over 2 nodes"),
        (&vllm, vcmd(&["-tp", "8", "-pp", "4"]), rank_env(2, 0), 78,
         "error[node-share-exceeds-gpus]: --data-parallel-size 1 × --pipeline-parallel-size 4 × --tensor-parallel-size 8 = 32 processes over 2 nodes is 16 per node, but a node has 8 GPUs"),
        (&sglang, scmd(&["--dp-size", "2"]), rank_env(2, 0), 78,
         "error[sglang-dp-across-nodes]: --dp-size 2 across 2 nodes"),
        (&vllm, vcmd(&["--data-parallel-start-rank", "0"]), rank_env(2, 0), 78, "error[dp-start-rank-on-leader]"),
        (&vllm, vcmd(&["--distributed-executor-backend", "ray", "--nnodes", "2"]), rank_env(2, 0), 78, "error[ray-with-nnodes]"),
        (&vllm, vcmd(&["--data-parallel-backend", "ray"]), rank_env(2, 0), 78, "error[dp-backend-not-mp]"),
        (&vllm, vcmd(&["--master-addr", "127.0.0.1"]), rank_env(2, 1), 78,
         "error[rendezvous-unreachable]: --master-addr `127.0.0.1` is not an address other nodes can reach"),
        (&sglang, scmd(&["--dist-init-addr", "0.0.0.0:5000", "--tp-size", "16"]), rank_env(2, 0), 78,
         "--dist-init-addr `0.0.0.0` is not an address other nodes can reach"),
        (&vllm, vcmd(&[]), e(&[("VLLM_PORT", "tcp://10.96.4.2:8000")]), 78,
         "error[vllm-port-invalid]: VLLM_PORT=`tcp://10.96.4.2:8000` is not a port number"),
        (&vllm, vcmd(&[]), e(&[("CUDA_VISIBLE_DEVICES", "0,1")]), 78,
         "error[visible-devices-disagree]: HIP_VISIBLE_DEVICES=`0,1,2,3,4,5,6,7` and CUDA_VISIBLE_DEVICES=`0,1` select different GPUs"),
        (&vllm, vcmd(&["--kv-transfer-config", r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}"#]),
         [rank_env(2, 0), e(&[("VLLM_HOST_IP", "0.0.0.0"), ("POD_IP", "10.4.0.9")])].concat(), 78,
         "error[bootstrap-unreachable]: the prefill's bootstrap address VLLM_HOST_IP `0.0.0.0` is a wildcard or loopback"),
        (&vllm, vcmd(&["--kv-transfer-config", r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_producer","kv_connector_extra_config":{"bootstrap_server_address":"127.0.0.1:8998"}}"#]),
         [rank_env(2, 0), e(&[("POD_IP", "10.4.0.9")])].concat(), 78, "kv_connector_extra_config.bootstrap_server_address `127.0.0.1`"),
    ];
    for (img, cmd, env, code, msg) in cases {
        plan(img, &ov, &cmd, &env).assert(code, msg);
    }
}

#[test]
fn rdma_devices_and_the_gid_mooncake_would_use() {
    let ov = shipped_overlay();
    let img = image("sglang-rocm724");
    let gid =
        |idx: u32, v: &str| img.file(&format!("/sys/class/infiniband/mlx5_0/ports/1/gids/{idx}"), format!("{v}\n"));
    gid(0, "fe80:0000:0000:0000:0225:9dff:fe36:f7ff");
    gid(3, "0000:0000:0000:0000:0000:ffff:0a04:0007");
    img.dir("/sys/class/infiniband/mlx5_1/ports/1/gids");
    img.file("/sys/class/infiniband/mlx5_1/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:0a04:0107\n");
    let cmd = |dev: &'static str| {
        vec![
            "python3",
            "-m",
            "infera.engine.sglang",
            "--model-path",
            "/models/kimi-k3",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-ib-device",
            dev,
        ]
    };
    let e = |idx: &str| vec![("MC_GID_INDEX".to_string(), idx.to_string()), ("POD_IP".into(), "10.4.0.9".into())];
    assert_eq!(plan(&img, &ov, &cmd("mlx5_0,mlx5_1"), &e("3")).code, 0);
    plan(&img, &ov, &cmd("mlx5_0,mlx5_9"), &e("3")).assert(78,
        "error[ib-device-missing]: --disaggregation-ib-device: `mlx5_9` is not an RDMA device of this node (under /sys/class/infiniband: mlx5_0, mlx5_1)");
    plan(&img, &ov, &cmd(r#"{"0": "mlx5_0", "1": "mlx5_7"}"#), &e("3")).assert(78, "`mlx5_7` is not an RDMA device");
    plan(&img, &ov, &cmd("mlx5_0"), &e("0")).assert(78,
        "error[gid-unusable]: MC_GID_INDEX=0: the GID of mlx5_0 port 1 is link-local (fe80:0000:0000:0000:0225:9dff:fe36:f7ff)");
    plan(&img, &ov, &cmd("mlx5_1"), &e("0"))
        .assert(78, "error[gid-index-missing]: MC_GID_INDEX=0: mlx5_1 port 1 has no GID at that index");
    plan(&img, &ov, &cmd("mlx5_0"), &e("x")).assert(78, "error[gid-index-invalid]");
}

/// A nameserver on a loopback address of its own: NXDOMAIN for `name` until `after`, then
/// an A record; `None`: never.
fn nameserver(ip: &str, name: &'static str, after: Option<Duration>) -> std::thread::JoinHandle<()> {
    let sock = UdpSocket::bind((ip, 53)).expect("bind :53 on a loopback address (the tests run as root)");
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let start = Instant::now();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let q = &buf[..n];
            // The question's name, as dotted text.
            let mut at = 12;
            let mut labels = Vec::new();
            while at < q.len() && q[at] != 0 {
                let l = q[at] as usize;
                labels.push(String::from_utf8_lossy(&q[at + 1..at + 1 + l]).into_owned());
                at += 1 + l;
            }
            let qname = labels.join(".");
            let qtype = u16::from_be_bytes([q[at + 1], q[at + 2]]);
            let ready = after.is_some_and(|a| start.elapsed() >= a);
            let mut r = q[..at + 5].to_vec();
            r[2] = 0x81;
            if qname == name && ready && qtype == 1 {
                r[3] = 0x80;
                r[7] = 1;
                r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 4, 0, 9]);
            } else if qname == name && ready {
                r[3] = 0x80; // no AAAA: NOERROR, no answer
            } else {
                r[3] = 0x83; // NXDOMAIN
            }
            let _ = sock.send_to(&r, from);
        }
    })
}

/// Rank 1 of a 2-node vLLM group whose leader is `leader`, as a pod runs it.
fn rank1_of(img: &Fx, ov: &Fx, leader: &str) -> Run {
    infera(&["python3", "-m", "infera.engine.vllm", "--model", "/models/m"])
        .root(img)
        .overlay(&ov.overlay())
        .env("LWS_GROUP_SIZE", "2")
        .env("LWS_WORKER_INDEX", "1")
        .env("LWS_LEADER_ADDRESS", leader)
        .env(GPUS8.0, GPUS8.1)
}

/// A real rank 1 exec: it waits for the leader's name through the resolver, which reads the
/// image's resolv.conf and hosts as a pod's (bound over this host's in a private mount
/// namespace: the standard library's resolver reads /etc, as it does in the pod).
fn rank1(img: &Fx, ov: &Fx, wait: &str) -> (Out, Duration) {
    let start = Instant::now();
    let run = rank1_of(img, ov, LEADER).env("INFERA_LEADER_WAIT", wait).env("INFERA_LOG", "info");
    let out = pods_resolver(run, img).run();
    (out, start.elapsed())
}

/// The image's /etc/resolv.conf and /etc/hosts as this process's (what the kubelet gives a pod).
fn pods_resolver(run: Run, img: &Fx) -> Run {
    let script = "mount --bind \"$1/etc/resolv.conf\" /etc/resolv.conf && mount --bind \"$1/etc/hosts\" /etc/hosts && shift && exec \"$@\"";
    let args: Vec<std::ffi::OsString> =
        vec!["--mount".into(), "sh".into(), "-c".into(), script.into(), "sh".into(), img.path().into()];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    run.under("unshare", &args)
}

#[test]
fn a_rank_waits_for_the_leader_then_runs_or_gives_up_in_time() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    // A pod's resolv.conf: the search list first (ndots:5), as kubelet writes it.
    img.file(
        "/etc/resolv.conf",
        "search infera.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.53.7\noptions ndots:5 timeout:1\n",
    )
    .file("/etc/hosts", "127.0.0.1 localhost\n");
    let _ns = nameserver("127.0.53.7", "kimi-0.kimi.infera.svc.cluster.local", Some(Duration::from_millis(1500)));
    let (out, took) = rank1(&img, &ov, "20");
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Rank 1 runs the follower program: infera's argument split, then vLLM's own CLI.
    assert_eq!(out.standin()["standin"], "infera.engine.vllm.args");
    assert!(out.standin()["argv"].to_string().contains("\"--headless\""), "rank 1 of vLLM is headless");
    assert!(
        out.stderr
            .contains("[leader-wait] waiting for the leader `kimi-0.kimi.infera` to resolve (Name does not resolve)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("[leader-resolved] `kimi-0.kimi.infera` is 10.4.0.9"), "{}", out.stderr);
    assert!(took >= Duration::from_millis(1400), "it waited: {took:?}");

    // A name that never resolves: refused once the wait is over, not after a weight load.
    img.file("/etc/resolv.conf", "nameserver 127.0.53.8\noptions ndots:5 timeout:1\n");
    let _never = nameserver("127.0.53.8", "nothing", None);
    let (out, took) = rank1(&img, &ov, "2");
    out.assert(66, "error[leader-unresolvable]: the leader `kimi-0.kimi.infera` did not resolve within 2 s (Name does not resolve)");
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(15), "{took:?}");
    assert!(!out.stdout.contains("INFERA-STANDIN"), "nothing ran");
    // The dry run shows the wait it would take; the leader itself never waits.
    let j = infera(&["python3", "-m", "infera.engine.vllm", "--model", "/models/m"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("LWS_GROUP_SIZE", "2")
        .env("LWS_WORKER_INDEX", "1")
        .env("LWS_LEADER_ADDRESS", LEADER)
        .env(GPUS8.0, GPUS8.1)
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_OUTPUT", "json")
        .run()
        .json();
    assert_eq!(j["exec"]["steps"][0]["kind"], "await-leader");
    assert_eq!(j["exec"]["steps"][0]["timeout_seconds"], 300);
    // A sidecar of the same pod (kvd) does not wait for the leader.
    let j = infera(&["python3", "-m", "infera.kvd"])
        .root(&img)
        .overlay(&ov.overlay())
        .env("LWS_GROUP_SIZE", "2")
        .env("LWS_WORKER_INDEX", "1")
        .env("LWS_LEADER_ADDRESS", LEADER)
        .env("INFERA_DRY_RUN", "1")
        .env("INFERA_OUTPUT", "json")
        .run()
        .json();
    assert!(!j["exec"]["steps"].to_string().contains("await-leader"), "{}", j["exec"]["steps"]);
}

/// A nameserver that never answers.
fn silent_nameserver(ip: &str) -> UdpSocket {
    UdpSocket::bind((ip, 53)).expect("bind :53 on a loopback address (the tests run as root)")
}

/// The wait keeps one deadline across search names, nameservers and retries, says it timed
/// out, and a SIGTERM ends it at once with 143. (Which replies it takes: the next test.)
#[test]
fn the_leader_wait_keeps_its_deadline_and_stops_on_sigterm() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    img.file("/etc/hosts", "127.0.0.1 localhost\n");
    // Two silent nameservers, two search domains, timeout:1, a wait of 1 s: about 1 s.
    let (_a, _b) = (silent_nameserver("127.0.53.21"), silent_nameserver("127.0.53.22"));
    img.file(
        "/etc/resolv.conf",
        "search a.svc b.svc\nnameserver 127.0.53.21\nnameserver 127.0.53.22\noptions ndots:5 timeout:1\n",
    );
    let (out, took) = rank1(&img, &ov, "1");
    out.assert(66, "did not resolve within 1 s (no answer in time)");
    assert!(took < Duration::from_millis(2500), "the deadline was not kept: {took:?}");
    // A leader name with an empty label is never sent.
    img.file("/etc/resolv.conf", "nameserver 127.0.53.21\noptions timeout:1\n");
    let out = rank1_of(&img, &ov, "kimi-0..infera").env("INFERA_LEADER_WAIT", "1").run();
    out.assert(2, "error[leader-address-invalid]: LWS_LEADER_ADDRESS=`kimi-0..infera` has an empty label");
    // The pod's /etc/hosts (hostAliases) answers before any nameserver.
    img.rm("/etc/hosts").file("/etc/hosts", "10.9.9.9 kimi-0.kimi.infera\n");
    let (out, _) = rank1(&img, &ov, "2");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("[leader-resolved] `kimi-0.kimi.infera` is 10.9.9.9"), "{}", out.stderr);
    // A name that leads to this pod's own loopback (hostAliases, a hosts line) is refused
    // as the written 127.0.0.1 is: the rank would meet only itself.
    img.rm("/etc/hosts").file("/etc/hosts", "127.0.0.1 localhost\n127.0.1.1 kimi-0.kimi.infera\n");
    let (out, _) = rank1(&img, &ov, "2");
    out.assert(
        78,
        "error[rendezvous-unreachable]: the leader `kimi-0.kimi.infera` resolves to 127.0.1.1, this pod's own loopback",
    );
    assert!(!out.stdout.contains("INFERA-STANDIN"), "nothing ran");
    img.rm("/etc/hosts").file("/etc/hosts", "127.0.0.1 localhost\n");
    // SIGTERM during the wait (the 300 s default): 143 at once, nothing started.
    img.file("/etc/resolv.conf", "nameserver 127.0.53.21\noptions timeout:5\n");
    let child = pods_resolver(rank1_of(&img, &ov, LEADER), &img).spawn();
    let (code, out, took) = terminated(child, has_socket);
    assert_eq!(code, Some(143), "{}", out.stderr);
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(out.stderr.contains("[stopped] signal 15 while waiting for the leader"), "{}", out.stderr);
    assert!(!out.stdout.contains("INFERA-STANDIN"));
}

/// DNS labels as written in a message.
fn labels(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for l in name.split('.').filter(|l| !l.is_empty()) {
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.push(0);
    out
}

/// An A record of `owner` (None: the question's name, by pointer).
fn a_record(owner: Option<&str>, ip: [u8; 4]) -> Vec<u8> {
    let mut r = owner.map_or(vec![0xc0, 12], labels);
    r.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
    r.extend_from_slice(&ip);
    r
}

/// A nameserver whose reply to `<case>.t` is that case's: right, or wrong in one way each
/// (the id, the QR bit, the question, the owner name, the CNAME chain). AAAA: no data.
fn case_nameserver(ip: &str) -> std::thread::JoinHandle<()> {
    let sock = UdpSocket::bind((ip, 53)).expect("bind :53");
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let q = &buf[..n];
            let mut end = 12;
            while end < q.len() && q[end] != 0 {
                end += 1 + q[end] as usize;
            }
            let case = String::from_utf8_lossy(&q[13..13 + q[12] as usize]).to_ascii_lowercase();
            let mut r = q[..end + 5].to_vec();
            r[2] = 0x81;
            r[3] = 0x80;
            let answers: Vec<Vec<u8>> = match (q[end + 2], case.as_str()) {
                (28, _) => vec![],
                (_, "plain" | "badid" | "notresp" | "otherq") => vec![a_record(None, [10, 4, 0, 9])],
                (_, "upper") => vec![a_record(Some("UPPER.T"), [10, 4, 0, 11])],
                (_, "owner") => vec![a_record(Some("evil.t"), [6, 6, 6, 6])],
                (_, "cname" | "cnamebad") => {
                    let target = labels("alias.t");
                    let mut c = vec![0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 5, 0, target.len() as u8];
                    c.extend_from_slice(&target);
                    let to = if case == "cname" { "alias.t" } else { "other.t" };
                    vec![c, a_record(Some(to), [10, 4, 0, 10])]
                }
                _ => {
                    r[3] = 0x83;
                    vec![]
                }
            };
            r[7] = answers.len() as u8;
            match case.as_str() {
                "badid" => r[1] ^= 0xff,
                "notresp" => r[2] = 0x01,
                "otherq" => r[13] = b'x',
                _ => {}
            }
            r.extend(answers.concat());
            let _ = sock.send_to(&r, from);
        }
    })
}

/// The leader wait takes an address from a reply as the standard library's resolver does
/// (musl's `getaddrinfo`, src/network/res_msend.c and dns_parse.c): a reply counts when it
/// comes from the nameserver asked and carries the query's id; its question, its QR bit and
/// the owner names of its records are not checked (glibc checks them: docs/multinode.md says
/// what this changes). A wrong id, or NXDOMAIN, gives nothing.
#[test]
fn the_leader_wait_takes_the_replies_musl_takes() {
    let py = real_python("3.12");
    let img = vllm_image(Some(&py));
    let ov = shipped_overlay();
    let conf = "nameserver 127.0.53.31\noptions ndots:1 timeout:1 attempts:1\n";
    img.file("/etc/hosts", "127.0.0.1 localhost\n").file("/etc/resolv.conf", conf);
    let _ns = case_nameserver("127.0.53.31");
    // (the leader's name, what the resolver takes)
    let cases = [
        ("plain", Some("10.4.0.9")),
        ("upper", Some("10.4.0.11")),
        ("cname", Some("10.4.0.10")),
        ("badid", None),
        ("nx", None),
        ("otherq", Some("10.4.0.9")),
        ("owner", Some("6.6.6.6")),
        ("cnamebad", Some("10.4.0.10")),
        ("notresp", Some("10.4.0.9")),
    ];
    for (case, want) in cases {
        let name = format!("{case}.t");
        let run = rank1_of(&img, &ov, &name).env("INFERA_LEADER_WAIT", "2").env("INFERA_LOG", "info");
        let out = pods_resolver(run, &img).run();
        let ours = out
            .stderr
            .split(&format!("[leader-resolved] `{name}` is "))
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string);
        match want {
            Some(ip) => assert_eq!((out.code, ours.as_deref()), (0, Some(ip)), "{case}: {}", out.stderr),
            None => {
                assert_eq!((out.code, ours), (66, None), "{case}: {}", out.stderr);
                assert!(out.stderr.contains("error[leader-unresolvable]"), "{case}: {}", out.stderr);
            }
        }
    }
}

#[test]
fn socket_interfaces_are_checked_in_the_pods_network() {
    // A network namespace of the test's own: only `lo`, down, without an address.
    let run = |env: &[(&str, &str)], up: bool| -> Out {
        let mut c = Command::new("unshare");
        c.arg("-n").arg("sh").arg("-c");
        let script = format!("{}exec \"$0\" \"$@\"", if up { "ip link set lo up; " } else { "" });
        c.arg(script).arg(BIN).args(["worker", "--dry-run", "--engine", "vllm"]);
        c.env_clear()
            .env("NATS_SERVER", crate::support::POD_NATS)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("INFERA_OVERLAY", "/nonexistent");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    };
    run(&[("GLOO_SOCKET_IFNAME", "eth0")], true).assert(78,
        "error[socket-ifname-missing]: GLOO_SOCKET_IFNAME=`eth0`: there is no interface `eth0`; this pod's interfaces: lo (127.0.0.1, ::1)");
    run(&[("NCCL_SOCKET_IFNAME", "lo")], false).assert(
        78,
        "NCCL_SOCKET_IFNAME=`lo`: the matching interfaces have no address; this pod's interfaces: lo (no address)",
    );
    // With the interface up, the check passes and the run goes on to what this host lacks.
    let out = run(&[("NCCL_SOCKET_IFNAME", "lo")], true);
    assert!(!out.stderr.contains("socket-ifname-missing"), "{}", out.stderr);
}

/// The LeaderWorkerSet examples: valid (LWS schema + every pod template as a strict 1.33 Pod),
/// and every rank of every group plans with exit 0 on the stand-in image of its engine, the
/// ranks of one group sharing their args digest.
#[test]
fn lws_examples_validate_and_every_rank_plans() {
    let files: Vec<std::path::PathBuf> = ["vllm", "sglang", "pd"]
        .iter()
        .map(|s| repo().join(format!("examples/k8s/lws/{s}/kimi-k3-{s}.yaml")))
        .collect();
    // `kubectl apply -k` of a scenario brings the ServiceAccount its pods name.
    for s in ["vllm", "sglang", "pd"] {
        let o = Command::new("kubectl").arg("kustomize").arg(repo().join("examples/k8s/lws").join(s)).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "kustomize lws/{s}: {}", String::from_utf8_lossy(&o.stderr));
        let named: std::collections::BTreeSet<&str> =
            text.lines().filter_map(|l| l.trim().strip_prefix("serviceAccountName: ")).collect();
        assert!(!named.is_empty(), "lws/{s} names no ServiceAccount");
        for sa in named {
            assert!(
                text.contains(&format!("kind: ServiceAccount\nmetadata:\n  name: {sa}\n")),
                "lws/{s}: no ServiceAccount {sa}\n{text}"
            );
        }
        assert!(text.contains("kind: LeaderWorkerSet"), "{text}");
    }
    let validate = repo().join("tests/k8s/validate-lws");
    let o = Command::new(&validate).args(&files).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    for res in [
        "leaderworkerset/kimi-k3\n",
        "leaderworkerset/kimi-k3-sglang",
        "leaderworkerset/kimi-k3-prefill",
        "leaderworkerset/kimi-k3-decode",
        "resource pod/kimi-k3-leader",
        "resource pod/kimi-k3-worker",
        "resource pod/kimi-k3-prefill-worker",
        "resource service/kimi-k3-server",
    ] {
        assert!(text.contains(&format!("passed for {res}")), "{res}: {text}");
    }
    // Each group's leader serves the API: a named port, startup and readiness probes on it
    // with 10 s timeouts, and a Service that selects the leader and targets that port; every
    // template carries the instance and component labels.
    let check = r#"
import sys, yaml
docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]
services = [d for d in docs if d["kind"] == "Service"]
for d in docs:
    if d["kind"] != "LeaderWorkerSet":
        continue
    name, t = d["metadata"]["name"], d["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        labels = t[role]["metadata"]["labels"]
        assert labels.get("app.kubernetes.io/instance") == "kimi-k3" and "app.kubernetes.io/component" in labels, (name, role)
    main = t["leaderTemplate"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe in ("startupProbe", "readinessProbe"):
        p = main[probe]
        assert p["timeoutSeconds"] == 10 and p["httpGet"]["port"] in ports, (name, probe)
    assert not any(k.endswith("Probe") for k in t["workerTemplate"]["spec"]["containers"][0]), name
    # Every rank waits for the model the download Job fills (a rank that exits 66 recreates
    # the group), and the leader's startup probe allows that wait and the load after it.
    for role in ("leaderTemplate", "workerTemplate"):
        env = {e["name"]: e.get("value") for e in t[role]["spec"]["containers"][0]["env"]}
        assert int(env.get("INFERA_WAIT_MODEL", 0)) >= 3600, (name, role, "no model wait")
    wait = int({e["name"]: e.get("value") for e in main["env"]}["INFERA_WAIT_MODEL"])
    s = main["startupProbe"]
    assert s["periodSeconds"] * s["failureThreshold"] >= wait + 600, (name, "the startup probe ends the model wait")
    svc = [s for s in services if s["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": name, "role": "leader"}]
    assert len(svc) == 1 and svc[0]["spec"]["ports"][0]["targetPort"] in ports, name
    print("leader served:", name, sorted(ports.values()))
"#;
    let o = Command::new("python3").arg("-c").arg(check).args(&files).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    for served in ["kimi-k3 [8000]", "kimi-k3-sglang [30000]", "kimi-k3-prefill [30000]", "kimi-k3-decode [30000]"] {
        assert!(text.contains(&format!("leader served: {served}\n")), "{served}: {text}");
    }

    // Strict: a misspelt LWS field fails.
    let bad = Fx::new();
    let t = std::fs::read_to_string(&files[0]).unwrap().replace("    size: 2", "    sizes: 2");
    bad.file("bad.yaml", t);
    let o = Command::new(&validate).arg(bad.p("bad.yaml")).output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Additional properties are not allowed ('sizes' was unexpected)")
    );

    let o = Command::new(&validate).arg("--commands").args(&files).output().unwrap();
    assert!(o.status.success());
    let templates: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ov = shipped_overlay();
    let (vllm, sglang) = (image("vllm-0.28"), image("sglang-rocm724"));
    for img in [&vllm, &sglang] {
        for dev in ["mlx5_0", "mlx5_1"] {
            img.file(
                &format!("/sys/class/infiniband/{dev}/ports/1/gids/3"),
                "0000:0000:0000:0000:0000:ffff:0a04:0007\n",
            );
        }
    }
    let mut digests: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for t in templates.as_array().unwrap() {
        let cmd: Vec<String> = strs(&t["command"]);
        assert_eq!(cmd[0], "/overlay/bin/infera-exec", "the launcher is the container command");
        let img = if cmd.iter().any(|a| a == "infera.engine.sglang") { &sglang } else { &vllm };
        let size = t["size"].as_u64().unwrap() as u32;
        for rank in t["ranks"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap() as u32) {
            let mut env = rank_env(size, rank);
            for (k, v) in t["env"].as_object().unwrap() {
                env.push((k.clone(), v.as_str().unwrap().to_string()));
            }
            let args: Vec<&str> = cmd[1..].iter().map(String::as_str).collect();
            let out = plan(img, &ov, &args, &env);
            assert_eq!(out.code, 0, "{} rank {rank}: {}", t["lws"], out.stderr);
            let j = out.json();
            assert_eq!(
                (j["group"]["size"].as_u64(), j["group"]["rank"].as_u64()),
                (Some(size.into()), Some(rank.into()))
            );
            digests
                .entry(t["lws"].as_str().unwrap().to_string())
                .or_default()
                .push(j["exec"]["args_digest"].as_str().unwrap().into());
        }
    }
    assert_eq!(digests.len(), 4);
    for (lws, d) in digests {
        assert_eq!(d.len(), 2, "{lws}");
        assert!(d.windows(2).all(|w| w[0] == w[1]), "{lws}: ranks differ: {d:?}");
    }
}
