//! Node preflight on node fixtures: the launcher runs as PID 1's program does, at root `/`,
//! in a chroot of a vLLM 0.28 image in a private mount namespace whose /dev (device nodes by
//! mknod), /sys (a KFD topology: GPUs, their memory banks, partitions), /dev/shm (a tmpfs of
//! a given size) and /proc/sys/kernel/numa_balancing are the node's. The image's HIP
//! libraries are real ELF files (gcc, then objcopy adds `.hip_fatbin`) or a real ROCm
//! binary from PyPI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

const KIMI: &str = include_str!("../../../../examples/models/kimi-k3/config.json");
const HOST: &str = "host-x86_64-unknown-linux-gnu-";
/// An MI300X's memory bank (KFD `size_in_bytes`).
pub(crate) const MI300X: u64 = 206141652992;

fn id(gfx: &str) -> String {
    format!("hipv4-amdgcn-amd-amdhsa--{gfx}")
}

/// A plain offload bundle of these targets (and the host entry), 16 bytes of code each.
pub fn plain(targets: &[&str]) -> Vec<u8> {
    let ids: Vec<String> = std::iter::once(HOST.to_string()).chain(targets.iter().map(|t| id(t))).collect();
    let table: usize = 32 + ids.iter().map(|i| 24 + i.len()).sum::<usize>();
    let mut b = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    b.extend((ids.len() as u64).to_le_bytes());
    for (k, i) in ids.iter().enumerate() {
        b.extend(((table + 16 * k) as u64).to_le_bytes());
        b.extend(16u64.to_le_bytes());
        b.extend((i.len() as u64).to_le_bytes());
        b.extend(i.as_bytes());
    }
    b.extend(std::iter::repeat_n(0xc0u8, 16 * ids.len()));
    b.resize(b.len().next_multiple_of(4096), 0); // bundles are 4 KiB aligned in the section
    b
}

/// A CCOB v2 (zlib) bundle of a plain one.
pub fn ccob_v2(inner: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(inner).unwrap();
    let body = z.finish().unwrap();
    let mut b = b"CCOB".to_vec();
    b.extend(2u16.to_le_bytes());
    b.extend(0u16.to_le_bytes());
    b.extend(((24 + body.len()) as u32).to_le_bytes());
    b.extend((inner.len() as u32).to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(body);
    b.resize(b.len().next_multiple_of(4096), 0);
    b
}

/// A shared library whose `.hip_fatbin` holds these bundles.
pub fn hip_library(dir: &Path, name: &str, bundles: &[Vec<u8>]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, "int infera_test_symbol(void) { return 0; }\n").unwrap();
    let so = dir.join(format!("{name}.so"));
    let st = Command::new("gcc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c).status().unwrap();
    assert!(st.success());
    let bin = dir.join(format!("{name}.fatbin"));
    std::fs::write(&bin, bundles.concat()).unwrap();
    let st = Command::new("objcopy")
        .arg(format!("--add-section=.hip_fatbin={}", bin.display()))
        .arg("--set-section-flags=.hip_fatbin=alloc,readonly")
        .arg(&so)
        .status()
        .unwrap();
    assert!(st.success(), "objcopy");
    so
}

/// The node: GPUs of one processor (`gfx_target_version`), their memory, partitions,
/// NUMA balancing and /dev/shm's size.
pub(crate) struct Node {
    pub(crate) gfx: u64,
    pub(crate) gpus: u32,
    pub(crate) vram: u64,
    pub(crate) partition: Option<(&'static str, &'static str)>,
    pub(crate) numa_balancing: Option<&'static str>,
    pub(crate) shm: &'static str,
    /// `/sys/module/amdgpu/version` (a DKMS driver).
    pub(crate) driver: Option<&'static str>,
    /// The model directory served by FUSE (fuse-overlayfs over the image's /models).
    pub(crate) fuse_models: bool,
    /// A memory cgroup (v1) with this limit around the launcher.
    pub(crate) memory_limit: Option<u64>,
}

impl Default for Node {
    fn default() -> Self {
        Node {
            gfx: 90402,
            gpus: 8,
            vram: MI300X,
            partition: None,
            numa_balancing: None,
            shm: "16g",
            driver: None,
            fuse_models: false,
            memory_limit: None,
        }
    }
}

/// The vLLM 0.28 image with Kimi-K3's config (and, when given, its checkpoint size), torch's
/// and vLLM's HIP libraries as given.
pub(crate) fn image_with(torch: &Path, vllm: Option<&Path>, checkpoint: Option<u64>) -> Fx {
    let img = image("vllm-0.28");
    img.file("/models/kimi-k3/config.json", KIMI);
    if let Some(bytes) = checkpoint {
        // Two shards named by the index, sparse: their sizes are the checkpoint's.
        let map = r#""a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors""#;
        let index = format!("{{\"metadata\": {{\"total_size\": {bytes}}}, \"weight_map\": {{{map}}}}}");
        img.file("/models/kimi-k3/model.safetensors.index.json", index);
        for i in 1..=2 {
            let shard = img.p(&format!("/models/kimi-k3/model-0000{i}-of-00002.safetensors"));
            std::fs::File::create(shard).unwrap().set_len(bytes / 2).unwrap();
        }
    }
    img.dir(&format!("{VLLM_SITE}/torch/lib"));
    std::fs::copy(torch, img.p(&format!("{VLLM_SITE}/torch/lib/libtorch_hip.so"))).unwrap();
    if let Some(v) = vllm {
        std::fs::copy(v, img.p(&format!("{VLLM_SITE}/vllm/_C.abi3.so"))).unwrap();
    }
    img
}

/// Run the launcher on `node` with the image as its root, as root in a chroot.
pub(crate) fn on_node(node: &Node, img: &Fx, env: &[&str], args: &[&str]) -> Out {
    let ov = shipped_overlay();
    let cp = Command::new("cp").arg("-a").arg(ov.overlay()).arg(img.p("/opt/infera")).status().unwrap();
    assert!(cp.success());
    std::fs::copy(BIN, img.p("/infera-exec")).unwrap();
    let script = r#"set -e
R="$1"; GFX="$2"; N="$3"; VRAM="$4"; PART="$5"; NUMA="$6"; SHM="$7"; DRIVER="$8"; FUSE="$9"; CG="${10}"; LIMIT="${11}"; DEVID="${12}"; shift 12
# A container's root is a mount of its own (the mountinfo the launcher reads names it).
mount --bind "$R" "$R"
mkdir -p "$R/dev" "$R/sys" "$R/proc"
mount -t tmpfs -o mode=755 dev "$R/dev"
if [ -n "$FUSE" ]; then
  # The image's /models seen through FUSE, in this namespace only: nothing moves on disk.
  mkdir "$R/dev/.models" && mount --bind "$R/models" "$R/dev/.models"
  fuse-overlayfs -o "lowerdir=$R/dev/.models" "$R/models"
fi
mknod -m 0666 "$R/dev/null" c 1 3
mknod -m 0666 "$R/dev/kfd" c 238 0
mkdir "$R/dev/dri" "$R/dev/shm"
mount -t tmpfs -o "size=$SHM" shm "$R/dev/shm"
mount -t tmpfs -o mode=755 sys "$R/sys"
T="$R/sys/class/kfd/kfd/topology/nodes"
mkdir -p "$T/0"
printf 'cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n' > "$T/0/properties"
i=1
while [ $i -le "$N" ]; do
  m=$((127 + i))
  mknod -m 0666 "$R/dev/dri/renderD$m" c 226 $m
  mkdir -p "$T/$i/mem_banks/0" "$R/sys/class/drm/renderD$m/device"
  printf 'cpu_cores_count 0\nsimd_count 1216\ngfx_target_version %s\ndrm_render_minor %s\ndevice_id %s\n' "$GFX" "$m" "$DEVID" > "$T/$i/properties"
  printf 'heap_type 1\nsize_in_bytes %s\nflags 0\n' "$VRAM" > "$T/$i/mem_banks/0/properties"
  if [ -n "$PART" ]; then
    echo "${PART%/*}" > "$R/sys/class/drm/renderD$m/device/current_compute_partition"
    echo "${PART#*/}" > "$R/sys/class/drm/renderD$m/device/current_memory_partition"
  fi
  i=$((i + 1))
done
if [ -n "$DRIVER" ]; then mkdir -p "$R/sys/module/amdgpu" && echo "$DRIVER" > "$R/sys/module/amdgpu/version"; fi
mkdir -p "$R/sys/fs/cgroup" && mount --rbind /sys/fs/cgroup "$R/sys/fs/cgroup"
mount --bind /proc "$R/proc"
if [ -n "$NUMA" ]; then
  echo "$NUMA" > "$R/dev/numa_balancing"
  mount --bind "$R/dev/numa_balancing" "$R/proc/sys/kernel/numa_balancing"
fi
# The pod's memory cgroup holds the launcher only (the FUSE daemon above stays out of it, so
# the cgroup is empty, and removed, as soon as the launcher exits).
if [ -n "$LIMIT" ]; then
  mkdir -p "/sys/fs/cgroup/memory/$CG"
  echo "$LIMIT" > "/sys/fs/cgroup/memory/$CG/memory.limit_in_bytes"
  echo $$ > "/sys/fs/cgroup/memory/$CG/cgroup.procs"
fi
exec chroot "$R" /infera-exec "$@"
"#;
    let part = node.partition.map(|(c, m)| format!("{c}/{m}")).unwrap_or_default();
    let mut run = Command::new("unshare");
    run.args(["-m", "--propagation", "private", "sh", "-c", script, "sh"]).arg(img.path());
    run.args([node.gfx.to_string(), node.gpus.to_string(), node.vram.to_string(), part]);
    run.args([node.numa_balancing.unwrap_or(""), node.shm, node.driver.unwrap_or("")]);
    let cgroup = format!(
        "infera-preflight-{}-{}",
        std::process::id(),
        CGROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let limit = node.memory_limit.map(|l| l.to_string()).unwrap_or_default();
    run.args([if node.fuse_models { "1" } else { "" }, &cgroup, &limit, &device_id(node.gfx).to_string()]).args(args);
    run.env_clear()
        .env("NATS_SERVER", crate::support::POD_NATS)
        .env("PATH", img.env_path.clone().unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()))
        .env("INFERA_OVERLAY", "/opt/infera");
    for e in env {
        let (k, v) = e.split_once('=').unwrap();
        run.env(k, v);
    }
    let o = run.output().unwrap();
    // The run's memory cgroup, empty now that the launcher has exited: nothing left behind.
    if node.memory_limit.is_some() {
        std::fs::remove_dir(format!("/sys/fs/cgroup/memory/{cgroup}")).unwrap();
    }
    if node.memory_limit.is_some() {
        let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/memory/{cgroup}"));
    }
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The PCI device id KFD lists (decimal) for a GPU of this `gfx_target_version`: an MI300X's,
/// an MI355X's, an MI210's, an MI100's (libdrm's amdgpu.ids).
fn device_id(gfx: u64) -> u32 {
    match gfx {
        90500 => 0x75a3,
        90010 => 0x740f,
        90008 => 0x738c,
        _ => 0x74a1,
    }
}

static CGROUPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

const CHECK: &[&str] = &["check", "--", "--model", "/models/kimi-k3"];
const WORKER: &[&str] = &["worker", "--dry-run", "--", "--model", "/models/kimi-k3"];

/// torch built for gfx90a and gfx942: planned on an MI300X node, refused on an MI355X one,
/// with the library, its targets and the node's GPUs named; a generic target covers both.
#[test]
fn gpu_code_for_the_nodes_gpus_or_a_refusal_that_names_both() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx90a", "gfx942:sramecc+:xnack-"])]);
    let vllm = hip_library(t.path(), "vllm", &[plain(&["gfx942", "gfx950"])]);
    let img = image_with(&torch, Some(&vllm), None);
    let ok = on_node(&Node::default(), &img, &[], CHECK);
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    let site = VLLM_SITE;
    for line in [
        format!("  gpu code  torch      gfx90a, gfx942 (1 bundle) (`{site}/torch/lib/libtorch_hip.so`)"),
        format!("  gpu code  vllm       gfx942, gfx950 (1 bundle) (`{site}/vllm/_C.abi3.so`)"),
        "  gpu arch  node 1 gfx942 renderD128 192.0 GiB, node 2 gfx942 renderD129 192.0 GiB,".to_string(),
        "  shm       /dev/shm 16.0 GiB (16.0 GiB free)".to_string(),
    ] {
        assert!(ok.stdout.contains(&line), "`{line}` not in:\n{}", ok.stdout);
    }
    let mi355 = Node { gfx: 90500, ..Node::default() };
    let refused = on_node(&mi355, &img, &[], WORKER);
    assert_eq!(refused.code, 69, "{}{}", refused.stdout, refused.stderr);
    assert_eq!(
        refused.stderr,
        format!(
            "error[gpu-code-missing]: torch's `{site}/torch/lib/libtorch_hip.so` has GPU code for gfx90a, gfx942 but \
             this node's GPUs are gfx950 (KFD topology): the engine would fail at its first kernel with `HIP error: \
             invalid device function`\nhint: use an image built for the node's GPUs (AMD's rocm/vllm tags name them, \
             e.g. `_gfx950-` for MI355X, `_gfx942-` for MI300X), or schedule the pod on a node whose GPUs it has code \
             for (a nodeSelector on the GPU family label)\n"
        )
    );
    // gfx9-4-generic runs on gfx950 (and gfx942); gfx90a is in no family.
    let generic = hip_library(t.path(), "generic", &[plain(&["gfx9-4-generic"])]);
    let img = image_with(&generic, Some(&vllm), None);
    assert_eq!(on_node(&mi355, &img, &[], CHECK).code, 0);
    let mi250 = Node { gfx: 90010, ..Node::default() };
    let o = on_node(&mi250, &img, &[], CHECK);
    assert_eq!(o.code, 69, "{}", o.stderr);
    assert!(o.stderr.contains("has GPU code for gfx9-4-generic but this node's GPUs are gfx90a"), "{}", o.stderr);
}

/// A real ROCm binary (gafime-rocm 0.4.7's libgafime_rocm.so, 13 targets) as torch's library:
/// an MI300X node is planned, an MI100 (gfx908, not among them) refused.
#[test]
fn a_real_rocm_binary_against_the_node() {
    let lib = crate::gpu_code::rocm_binaries().join("gafime_rocm/libgafime_rocm.so");
    let img = image_with(&lib, None, None);
    let ok = on_node(&Node::default(), &img, &[], CHECK);
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    assert!(ok.stdout.contains("  gpu code  torch      gfx1030, gfx1031, gfx1032, gfx1100, gfx1101, gfx1102, gfx1150, gfx1151, gfx1200, gfx1201, gfx90a, gfx942, gfx950 (1 bundle)"), "{}", ok.stdout);
    let mi100 = Node { gfx: 90008, ..Node::default() };
    let o = on_node(&mi100, &img, &[], CHECK);
    assert_eq!(o.code, 69, "{}", o.stderr);
    assert!(o.stderr.starts_with("error[gpu-code-missing]: torch's "), "{}", o.stderr);
    assert!(o.stderr.contains("gfx942, gfx950 but this node's GPUs are gfx908"), "{}", o.stderr);
}

/// Two bundles with different target sets (a CCOB v2 zlib one and a plain one): the GPU in
/// only one of them is a warning, not a refusal; an optional library (flash-attn) without
/// code for the node is a warning.
#[test]
fn partial_and_optional_gpu_code_are_warnings() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[ccob_v2(&plain(&["gfx942", "gfx950"])), plain(&["gfx942"])]);
    let flash = hip_library(t.path(), "flash", &[plain(&["gfx90a"])]);
    let img = image_with(&torch, None, None);
    std::fs::copy(&flash, img.p(&format!("{VLLM_SITE}/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so"))).unwrap();
    let mi355 = Node { gfx: 90500, ..Node::default() };
    let o = on_node(&mi355, &img, &[], CHECK);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("  gpu code  torch      gfx942, gfx950 (2 bundles)"), "{}", o.stdout);
    assert!(o.stdout.contains("[gpu-code-partial] torch's "), "{}", o.stdout);
    assert!(o.stdout.contains("only some of its 2 bundles have code for gfx950"), "{}", o.stdout);
    assert!(o.stdout.contains("[gpu-code-optional-missing] flash-attn's "), "{}", o.stdout);
}

/// HSA_OVERRIDE_GFX_VERSION naming another GPU: refused where the image has code for the
/// real one, a warning (the code held to the override) where it has not.
#[test]
fn a_gfx_override_against_the_node() {
    let t = tempfile::tempdir().unwrap();
    let both = hip_library(t.path(), "both", &[plain(&["gfx942", "gfx950"])]);
    let img = image_with(&both, None, None);
    let mi355 = Node { gfx: 90500, ..Node::default() };
    let o = on_node(&mi355, &img, &["HSA_OVERRIDE_GFX_VERSION=9.4.2"], WORKER);
    assert_eq!(o.code, 78, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.starts_with(
            "error[gfx-override]: HSA_OVERRIDE_GFX_VERSION=9.4.2 makes HIP treat this node's gfx950 GPUs as gfx942, \
             though the image has code for gfx950"
        ),
        "{}",
        o.stderr
    );
    let old = hip_library(t.path(), "old", &[plain(&["gfx942"])]);
    let img = image_with(&old, None, None);
    let o = on_node(&mi355, &img, &["HSA_OVERRIDE_GFX_VERSION=9.4.2"], WORKER);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(
            "[gfx-override] HSA_OVERRIDE_GFX_VERSION=9.4.2: this node's gfx950 GPUs run code built for gfx942"
        ),
        "{}",
        o.stdout
    );
}

/// Kimi-K3's ~1.5 TB on 8 MI300X: loads but leaves no KV room at vLLM's default 0.9 (every
/// number in the message); 0.95 is tight (a warning); TP 4 cannot load at all.
#[test]
fn the_weights_against_the_gpus_memory() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx942"])]);
    let img = image_with(&torch, None, Some(1_500_000_000_000));
    let o = on_node(&Node::default(), &img, &[], WORKER);
    assert_eq!(o.code, 78, "{}{}", o.stdout, o.stderr);
    assert_eq!(
        o.stderr.lines().next().unwrap(),
        "error[kv-cache-no-room]: the weights of /models/kimi-k3 take 174.6 GiB per GPU (TP 8 × PP 1, \
         metadata.total_size of model.safetensors.index.json), 101% of the 172.8 GiB that --gpu-memory-utilization \
         0.9 (vLLM's default) gives the engine of a GPU's 192.0 GiB (KFD topology): no room is left for the KV cache, \
         and vLLM fails with `No available memory for the cache blocks` after the whole load"
    );
    // The hint leads to a layout that leaves room: 16 GPUs (64 heads; 9 would do by the bytes).
    assert!(o.stderr.contains("spread the weights over more GPUs (at least 16 at this size, as a size that divides the model's 64 attention heads"), "{}", o.stderr);
    let mut args = WORKER.to_vec();
    args.extend(["--gpu-memory-utilization", "0.95"]);
    let o = on_node(&Node::default(), &img, &[], &args);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("[kv-cache-small] the weights of /models/kimi-k3 take 174.6 GiB per GPU, 96% of"),
        "{}",
        o.stdout
    );
    let o = on_node(&Node::default(), &img, &["HIP_VISIBLE_DEVICES=0,1,2,3"], WORKER);
    assert_eq!(o.code, 78, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.starts_with("error[weights-exceed-vram]: the weights of /models/kimi-k3 are 1397.0 GiB (metadata.total_size of model.safetensors.index.json); over TP 4 × PP 1 that is 349.2 GiB per GPU, more than a GPU's 192.0 GiB"), "{}", o.stderr);
    assert!(o.stderr.contains("\nhint: spread the weights over more GPUs (at least 16 at this size"), "{}", o.stderr);
    // Allowed knowingly: a warning, and the plan.
    let o =
        on_node(&Node::default(), &img, &["HIP_VISIBLE_DEVICES=0,1,2,3", "INFERA_ALLOW=weights-exceed-vram"], WORKER);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // On-the-fly quantization: the checkpoint size is no bound, and it says so.
    let mut args = WORKER.to_vec();
    args.extend(["--quantization", "fp8"]);
    let o = on_node(&Node::default(), &img, &["HIP_VISIBLE_DEVICES=0,1,2,3"], &args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("[weights-unchecked] the weights of /models/kimi-k3 are not held to the GPUs' memory: --quantization fp8 quantizes them as they load"), "{}", o.stdout);
}

/// The Infera stack's own image (`vllm/vllm-openai-rocm:kimi-k3`, an untagged vLLM build) always
/// warns `engine-version-unknown`: a gate on warnings fails on it until the warning is accepted,
/// one code at a time (`--allow`, or a file of codes with their reasons); the accepted warning
/// stays in every report, with what accepted it, and fails nothing.
#[test]
fn a_warning_accepted_one_by_one_stays_in_the_report() {
    let img = image("vllm-kimi-k3");
    img.file("/models/kimi-k3/model.safetensors.index.json", "{\"metadata\": {\"total_size\": 1500000000000}}");
    let ov = shipped_overlay();
    let t = tempfile::tempdir().unwrap();
    let list = t.path().join("infera-allow");
    std::fs::write(
        &list,
        "# accepted findings of the kimi-k3 rollout\nengine-version-unknown  the kimi-k3 build is ours (g5f76ae224)\n",
    )
    .unwrap();
    // The image's environment as a CI job gives it (`--image-env`), so that only the image warns.
    let image_env: Vec<String> = img.image_env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let check = |extra: &[&str]| {
        let mut a = vec!["check", "--fail-on", "warn", "--node", "mi355x", "--shm-size", "16Gi"];
        a.extend(image_env.iter().flat_map(|e| ["--image-env", e.as_str()]));
        a.extend(extra);
        a.extend(["--", "--model", "/models/kimi-k3"]);
        infera(&a).root(&img).overlay(&ov.overlay()).run()
    };
    let o = check(&[]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("  warn      [engine-version-unknown] vllm 0.1.dev19253+g5f76ae224"), "{}", o.stdout);
    assert!(o.stderr.contains("check: 1 warning(s) and --fail-on warn (exit 1)"), "{}", o.stderr);
    let o = check(&["--allow", "engine-version-unknown"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("  accepted  [engine-version-unknown] vllm 0.1.dev19253+g5f76ae224"), "{}", o.stdout);
    assert!(o.stdout.contains("            accepted by --allow\n"), "{}", o.stdout);
    let file = list.to_str().unwrap();
    for (extra, by) in [
        (&["--allow-file", file][..], format!("--allow-file {file}:2: the kimi-k3 build is ours (g5f76ae224)")),
        (
            &["--allow-file", file, "-o", "json"][..],
            format!("--allow-file {file}:2: the kimi-k3 build is ours (g5f76ae224)"),
        ),
    ] {
        let o = check(extra);
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        assert!(o.stdout.contains(&by), "{}", o.stdout);
    }
    let j = check(&["--allow-file", file, "-o", "json"]).json();
    let f = j["findings"].as_array().unwrap().iter().find(|f| f["code"] == "engine-version-unknown").unwrap().clone();
    assert_eq!(
        (f["level"].as_str(), f["accepted"].as_str().map(|a| a.ends_with("is ours (g5f76ae224)"))),
        (Some("warn"), Some(true))
    );
    // JUnit: green, the accepted warning in the case's output.
    let o = check(&["--allow-file", file, "-o", "junit"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stdout.contains("<failure"), "{}", o.stdout);
    assert!(o.stdout.contains("accepted[engine-version-unknown] by --allow-file "), "{}", o.stdout);
    assert_eq!(as_ci_tools_read(&o.stdout), "cases 1, failures 0, errors 0, skipped 0");
    // A code no finding has is refused, as a typo would be; a file that is not there too.
    std::fs::write(&list, "engine-version-unknwon\n").unwrap();
    let o = check(&["--allow-file", file]);
    assert_eq!((refused(&o), o.code), (Some("allow-unknown"), 2), "{}", o.stderr);
    assert!(o.stderr.contains(&format!("--allow-file {file}:1 names `engine-version-unknwon`")), "{}", o.stderr);
    assert!(o.stderr.contains("did you mean `engine-version-unknown`?"), "{}", o.stderr);
    let o = check(&["--allow-file", "/nonexistent/allow"]);
    assert_eq!((refused(&o), o.code), (Some("allow-file-unreadable"), 66), "{}", o.stderr);
}

/// sglang without `--mem-fraction-static` sizes its share of a GPU by its release's rule: the
/// KV room is judged with the largest share that rule gives (never `ok` unjudged): a checkpoint
/// that fills it on MI300X at TP 8 is refused, one a little smaller passes with a warning.
#[test]
fn sglangs_own_share_is_judged() {
    let img = image("sglang-rocm724");
    img.file("/models/kimi-k3/config.json", KIMI);
    let ov = shipped_overlay();
    let check = |bytes: u64| {
        img.file(
            "/models/kimi-k3/model.safetensors.index.json",
            format!("{{\"metadata\": {{\"total_size\": {bytes}}}}}"),
        );
        infera(&["check", "--node", "mi300x", "--shm-size", "16Gi", "--", "--model-path", "/models/kimi-k3"])
            .root(&img)
            .overlay(&ov.overlay())
            .run()
    };
    let o = check(1_630_000_000_000);
    assert_eq!((refused(&o), o.code), (Some("kv-cache-no-room"), 78), "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("that sglang's default --mem-fraction-static (at most 0.987 on this GPU at TP×PP 8"),
        "{}",
        o.stderr
    );
    let o = check(1_500_000_000_000);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("[kv-cache-small] the weights of /models/kimi-k3 take 174.6 GiB per GPU"),
        "{}",
        o.stdout
    );
}

/// Partitioned GPUs (CPX/NPS4), NUMA balancing on, a driver outside the image's ROCm window:
/// warnings naming the node setting.
#[test]
fn node_settings_that_shrink_or_hang_gpus() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx942"])]);
    let img = image_with(&torch, None, None);
    let node =
        Node { partition: Some(("CPX", "NPS4")), numa_balancing: Some("1"), driver: Some("6.7.0"), ..Node::default() };
    let o = on_node(&node, &img, &[], CHECK);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("node 1 gfx942 renderD128 192.0 GiB CPX/NPS4"), "{}", o.stdout);
    assert!(o.stdout.contains("[gpu-partitioned] the node's gfx942 GPUs are partitioned (CPX/NPS4"), "{}", o.stdout);
    assert!(o.stdout.contains("[numa-balancing] /proc/sys/kernel/numa_balancing is 1"), "{}", o.stdout);
    // The image is ROCm 7.2.3; a ROCm 6.2 DKMS driver is tested with 6.0-6.3 user space.
    assert!(
        o.stdout.contains(
            "[driver-window] the node's amdgpu driver 6.7.0 is tested with ROCm 6.0, 6.1, 6.2, 6.3 user space"
        ),
        "{}",
        o.stdout
    );
    let quiet = Node { numa_balancing: Some("0"), driver: Some("30.30.3"), ..Node::default() };
    let quiet = on_node(&quiet, &img, &[], CHECK);
    assert_eq!(quiet.code, 0, "{}{}", quiet.stdout, quiet.stderr);
    for code in ["numa-balancing", "gpu-partitioned", "driver-window"] {
        assert!(!quiet.stdout.contains(code), "{code}: {}", quiet.stdout);
    }
}

/// aiter's kernels per GPU directory (`aiter_meta/hsa/gfx942/`, where aiter's wheel puts them): missing the node's GPU is a
/// warning, and a refusal where aiter is forced on (VLLM_ROCM_USE_AITER=1).
#[test]
fn aiters_kernel_directories_against_the_node() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx942", "gfx950:xnack+"])]);
    let img = image_with(&torch, None, None);
    img.file(&format!("{VLLM_SITE}/aiter_meta/hsa/gfx942/fmha_fwd.co"), "code object");
    let mi355 = Node { gfx: 90500, ..Node::default() };
    let o = on_node(&mi355, &img, &[], CHECK);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(&format!("  gpu code  aiter      gfx942 (`{VLLM_SITE}/aiter_meta/hsa`)")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("[gpu-code-optional-missing] aiter's "), "{}", o.stdout);
    let o = on_node(&mi355, &img, &["VLLM_ROCM_USE_AITER=1"], CHECK);
    assert_eq!(o.code, 69, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.starts_with(&format!("error[gpu-code-missing]: aiter's `{VLLM_SITE}/aiter_meta/hsa` has GPU code for gfx942 but this node's GPUs are gfx950")), "{}", o.stderr);
    assert_eq!(on_node(&Node::default(), &img, &["VLLM_ROCM_USE_AITER=1"], CHECK).code, 0);
}

/// The weight load: a model directory served by FUSE (a filesystem no vLLM detects, and on
/// which vLLM's own read-ahead is lost when its loader opens the file) gets the launcher's
/// read-ahead, after the engine's open; the pod's own choice is kept; on the image's own
/// (local) disk nothing, said as such. The filesystem, the pod's limit and the decision are shown by `check`.
#[test]
fn the_load_strategy_from_the_pods_filesystem_and_memory() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx942"])]);
    let img = image_with(&torch, None, Some(8 << 30)); // an 8 GiB checkpoint
    let fits = Node { fuse_models: true, memory_limit: Some(64 << 30), ..Node::default() };
    let o = on_node(&fits, &img, &[], WORKER);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("  model     /models/kimi-k3: 8.0 GiB (metadata.total_size of model.safetensors.index.json) on fuse.fuse-overlayfs (/models)"), "{}", o.stdout);
    assert!(o.stdout.contains("  memory    pod limit 64.0 GiB, "), "{}", o.stdout);
    assert!(
        o.stdout.contains(
            "  added     --tensor-parallel-size 8 --mm-encoder-tp-mode data --kv-cache-dtype auto --host 0.0.0.0\n"
        ),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("[load-strategy] model 8.0 GiB on fuse.fuse-overlayfs (/models); pod budget "),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("on fuse.fuse-overlayfs the engine's read-ahead opens each file apart from its loader, and FUSE drops a file's cache when it is opened"), "{}", o.stdout);
    assert!(
        o.stdout.contains("[prefetch] the launcher reads the 2 files (8.0 GiB) ahead of the engine's loader: at most "),
        "{}",
        o.stdout
    );
    // The pod's own choice is kept.
    let mut own = WORKER.to_vec();
    own.extend(["--safetensors-load-strategy", "lazy"]);
    let o = on_node(&fits, &img, &[], &own);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("--safetensors-load-strategy is the pod's own: kept"), "{}", o.stdout);
    assert!(!o.stdout.contains("prefetch"), "{}", o.stdout);
    // A pod smaller than the checkpoint: the launcher's read-ahead, bounded to half the pod's
    // budget, reads each file once the engine has it open (FUSE).
    let small = Node { fuse_models: true, memory_limit: Some(4 << 30), ..Node::default() };
    let o = on_node(&small, &img, &[], WORKER);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("pod budget "), "{}", o.stdout);
    assert!(!o.stdout.contains("--safetensors-load-strategy"), "{}", o.stdout);
    assert!(
        o.stdout.contains("[prefetch] the launcher reads the 2 files (8.0 GiB) ahead of the engine's loader: at most "),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(
            "up to 16 reads at once as the storage keeps up, backing off where it is not ahead of the loader, each \
             file once the engine has opened it (FUSE drops the cache on open)"
        ),
        "{}",
        o.stdout
    );
    // `--prefetch off` (or INFERA_PREFETCH=off): nothing of the launcher's.
    let o = on_node(&small, &img, &["INFERA_PREFETCH=off"], WORKER);
    assert!(!o.stdout.contains("[prefetch]"), "{}", o.stdout);
    // The image's own disk: a local filesystem, nothing to decide.
    let o = on_node(&Node { memory_limit: Some(64 << 30), ..Node::default() }, &img, &[], WORKER);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(
            "  added     --tensor-parallel-size 8 --mm-encoder-tp-mode data --kv-cache-dtype auto --host 0.0.0.0\n"
        ),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("[load-strategy] model 8.0 GiB on "), "every decision is said: {}", o.stdout);
    assert!(!o.stdout.contains("[prefetch]"), "auto reads nothing ahead on a local disk: {}", o.stdout);
}

/// The refusal's code on stderr (`error[CODE]: …`), if any.
fn refused(o: &Out) -> Option<&str> {
    o.stderr.lines().find_map(|l| l.strip_prefix("error[")?.split(']').next())
}

/// `check` of the image as CI runs it: `--root` (no node of its own), with `--node`s.
fn in_ci(img: &Fx, nodes: &[&str], extra: &[&str]) -> Out {
    in_ci_with(img, nodes, &[], extra)
}

/// `infera-exec node -o json` as the DaemonSet runs it (its node's name from the downward API)
/// at root `/` on a node of 8 MI300X, in a pod with a 64 MiB /dev/shm, writes a profile of the
/// node — its name, its GPUs' product, and apart the pod that read it — that, given back with
/// `--node FILE` to a `check` from outside (`--root`), gives the verdicts the launcher gives in
/// the worker's pod: the same as a profile read in a pod with a 16 GiB /dev/shm. The worker's
/// /dev/shm is its own (`--shm-size`), never the profiler's; not given, it is said unjudged.
#[test]
fn a_node_profile_gives_ci_the_pods_verdicts() {
    let t = tempfile::tempdir().unwrap();
    let daemonset = Node { shm: "64m", ..Node::default() };
    let name = "INFERA_NODE_NAME=gpu-node-17";
    let o = on_node(
        &daemonset,
        &image_with(&hip_library(t.path(), "t0", &[plain(&["gfx942"])]), None, None),
        &[name],
        &["node"],
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("infera-exec node (this node (/), gpu-node-17)\n"), "{}", o.stdout);
    assert!(o.stdout.contains("  gpu arch  node 1 gfx942 renderD128 192.0 GiB, node 2 gfx942"), "{}", o.stdout);
    assert!(o.stdout.contains("  product   AMD Instinct MI300X\n"), "{}", o.stdout);
    assert!(o.stdout.contains("  shm       /dev/shm 64 MiB (64 MiB free)"), "{}", o.stdout);
    assert!(!o.stdout.contains("shm-too-small"), "the pod that read the node is not judged as a worker: {}", o.stdout);
    for (name_, targets, want) in
        [("missing", &["gfx90a", "gfx950"][..], Some("gpu-code-missing")), ("fits", &["gfx942"][..], None)]
    {
        let torch = hip_library(t.path(), name_, &[plain(targets)]);
        let img = image_with(&torch, None, None);
        let mut verdicts = Vec::new();
        for (shm, pod) in [(&daemonset, "daemonset"), (&Node::default(), "16g")] {
            let profile = on_node(shm, &img, &[name], &["node", "-o", "json"]);
            assert_eq!(profile.code, 0, "{}", profile.stderr);
            let file = t.path().join(format!("{name_}-{pod}.json"));
            std::fs::write(&file, &profile.stdout).unwrap();
            let json: serde_json::Value = serde_json::from_str(&profile.stdout).unwrap();
            assert_eq!((json["schema_version"].as_u64(), json["gpus"].as_array().map(Vec::len)), (Some(2), Some(8)));
            assert_eq!(
                (json["name"].as_str(), json["product"].as_str()),
                (Some("gpu-node-17"), Some("AMD Instinct MI300X"))
            );
            assert_eq!(json["gpus"][0]["device_id"], "74a1");
            assert!(json["pod"]["shm"]["size"].as_u64().is_some() && json.get("shm").is_none(), "{json}");
            let ci = in_ci(&img, &[file.to_str().unwrap()], &[]);
            verdicts.push((refused(&ci).map(String::from), ci.code));
            if want.is_none() {
                assert!(ci.stdout.contains("[shm-unjudged] /dev/shm is not judged for the pod's 8 GPU ranks: --node gpu-node-17 describes the node, not the worker's pod"), "{}", ci.stdout);
            }
            // The worker's own /dev/shm: too small, refused naming it; a memory-backed 16 GiB, judged.
            let small = in_ci_with(&img, &[file.to_str().unwrap()], &["--shm-size", "64m"], &[]);
            if want.is_none() {
                assert_eq!((refused(&small), small.code), (Some("shm-too-small"), 69), "{}", small.stderr);
                assert!(
                    small.stderr.contains(
                        "/dev/shm is 64 MiB (the worker's pod: --shm-size 64m) but this pod runs 8 GPU ranks"
                    ),
                    "{}",
                    small.stderr
                );
                let big = in_ci_with(&img, &[file.to_str().unwrap()], &["--shm-size", "16Gi"], &[]);
                assert_eq!(big.code, 0, "{}", big.stderr);
                assert!(!big.stdout.contains("shm-unjudged") && !big.stdout.contains("[shm-"), "{}", big.stdout);
            }
        }
        assert_eq!(verdicts[0], verdicts[1], "{name_}: the profiling pod's /dev/shm changes nothing");
        assert_eq!(verdicts[0].0.as_deref(), want, "{name_}");
        // In the worker's own pod (16 GiB /dev/shm), the launcher gives the same verdict.
        let pod = on_node(&Node::default(), &img, &[], CHECK);
        assert_eq!(verdicts[0], (refused(&pod).map(String::from), pod.code), "{name_}: pod {}", pod.stderr);
    }
}

/// Three named parts and a profile file, one image: a JUnit case per node named `TREE on
/// NODE` (the profile's by its node's name, not its file), distinct as junitparser reads them
/// and valid against Jenkins' schema; the text names the node of each refusal.
#[test]
fn every_cell_names_its_node() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx90a", "gfx942"])]);
    let img = image_with(&torch, None, Some(1_500_000_000_000));
    let profile = on_node(&Node::default(), &img, &["INFERA_NODE_NAME=gpu-node-17"], &["node", "-o", "json"]);
    let file = t.path().join("nodes/a.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &profile.stdout).unwrap();
    let nodes = ["mi300x", "mi325x", "mi210", file.to_str().unwrap()];
    let o = in_ci_with(&img, &nodes, &["--shm-size", "16Gi", "-o", "junit"], &[]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let names = junit_case_names(&o.stdout);
    let suite = img.path().display().to_string();
    let want: Vec<String> =
        ["mi300x", "mi325x", "mi210", "gpu-node-17"].iter().map(|n| format!("{suite} / rocm7-py312 on {n}")).collect();
    assert_eq!(names, want, "{}", o.stdout);
    assert!(!o.stdout.contains(file.to_str().unwrap()) || o.stdout.contains("node: gpu-node-17 ("), "{}", o.stdout);
    assert_eq!(as_ci_tools_read(&o.stdout), "cases 4, failures 3, errors 0, skipped 0");
    let text = in_ci_with(&img, &nodes, &["--shm-size", "16Gi"], &[]);
    assert_eq!(text.code, 1, "{}", text.stderr);
    assert!(
        text.stdout.starts_with("infera-exec check: 1 image × 4 nodes (1 tree): 3 of 4 applicable cells refused\n"),
        "{}",
        text.stdout
    );
    // 1.5 TB on 8 GPUs of 192 GiB (MI300X, twice) leaves no KV room; of 64 GiB (MI210) does not load.
    for (node, code) in
        [("mi300x", "kv-cache-no-room"), ("gpu-node-17", "kv-cache-no-room"), ("mi210", "weights-exceed-vram")]
    {
        let said = format!(" with rocm7-py312 on {node}: error[{code}]: ");
        let line = text.stdout.lines().find(|l| l.contains(&said)).unwrap_or_else(|| panic!("{said}: {}", text.stdout));
        assert!(line.contains(&format!("(--node {node})")), "the message names its node: {line}");
    }
}

/// `check` from outside with `--node`s and options before the `--`.
fn in_ci_with(img: &Fx, nodes: &[&str], options: &[&str], extra: &[&str]) -> Out {
    let mut args: Vec<String> = vec!["check".into()];
    args.extend(options.iter().map(|s| s.to_string()));
    for n in nodes {
        args.extend(["--node".to_string(), n.to_string()]);
    }
    args.extend(["--", "--model", "/models/kimi-k3"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    infera(&[]).root(img).overlay(&shipped_overlay().overlay()).args(args).run()
}

/// A node held to what a node can be: a profile of a node whose driver did not load (no
/// GPU), GPUs of 0 bytes or 2^64−1 bytes, a pod's GPUs past the node's, a part's count past a
/// node's, a part misspelt, a profile that is not there: each refused with its code, naming
/// what was found; `infera-exec node` on a GPU-less node exits 69 with its profile printed.
#[test]
fn a_node_is_held_to_what_a_node_can_be() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx942"])]);
    let img = image_with(&torch, None, Some(8 << 30));
    let none = Node { gpus: 0, ..Node::default() };
    let o = on_node(&none, &img, &["INFERA_NODE_NAME=gpu-node-3"], &["node", "-o", "json"]);
    assert_eq!(o.code, 69, "{}", o.stderr);
    assert!(o.stderr.starts_with("error[node-no-gpus]: this node lists no GPU"), "{}", o.stderr);
    let profile: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(profile["error"]["code"], "node-no-gpus", "the profile carries its verdict: {profile}");
    let gpuless = t.path().join("gpuless.json");
    std::fs::write(&gpuless, &o.stdout).unwrap();
    for extra in [&[][..], &["--fail-on", "warn"]] {
        let o = in_ci_with(&img, &[gpuless.to_str().unwrap()], extra, &[]);
        assert_eq!((refused(&o), o.code), (Some("node-no-gpus"), 69), "{}", o.stderr);
        assert!(o.stderr.contains("the node of --node gpu-node-3 lists no GPU"), "{}", o.stderr);
    }
    // A one-value sysfs file is its first line: a second is never printed as a line of its own.
    let forged = Node { driver: Some("6.8.5\nerror[node-no-gpus]: forged"), ..Node::default() };
    let o = on_node(&forged, &img, &[], &["node"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("  driver    amdgpu 6.8.5 (/sys/module/amdgpu/version)"), "{}", o.stdout);
    assert!(!o.stdout.contains("forged") && !o.stderr.contains("forged"), "{}{}", o.stdout, o.stderr);
    // A profile whose GPUs have no memory, or more than any GPU: what no node wrote.
    let o = on_node(&Node::default(), &img, &[], &["node", "-o", "json"]);
    for (vram, said) in [
        (serde_json::json!(0), "GPU 1 has 0 bytes of memory: no GPU does"),
        (serde_json::json!(u64::MAX), "GPU 1 has 18446744073709551615 bytes of memory, more than any GPU"),
    ] {
        let mut p: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        for g in p["gpus"].as_array_mut().unwrap() {
            g["vram"] = vram.clone();
        }
        let file = t.path().join("bad.json");
        std::fs::write(&file, p.to_string()).unwrap();
        let c = in_ci(&img, &[file.to_str().unwrap()], &[]);
        assert_eq!((refused(&c), c.code), (Some("node-profile-invalid"), 65), "{}", c.stderr);
        assert!(c.stderr.contains(said), "{}", c.stderr);
    }
    // More GPUs than the node has: INFERA_GPUS, HIP_VISIBLE_DEVICES; in CI and in the pod.
    let c = in_ci(&img, &["mi300x"], &[]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    let many = infera(&["check", "--node", "mi300x", "--", "--model", "/models/kimi-k3"])
        .root(&img)
        .overlay(&shipped_overlay().overlay())
        .env("INFERA_GPUS", "1000000")
        .run();
    assert_eq!((refused(&many), many.code), (Some("gpus-exceed-node"), 78), "{}", many.stderr);
    assert!(
        many.stderr.contains("INFERA_GPUS=1000000 gives the engine 1000000 GPUs, but the node has 8 (--node mi300x)"),
        "{}",
        many.stderr
    );
    let o = on_node(&Node::default(), &img, &["HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7,8,9"], CHECK);
    assert_eq!((refused(&o), o.code), (Some("gpus-exceed-node"), 78), "{}", o.stderr);
    // Parts: a count past a node's, a name misspelt, a file that is not there.
    for (spec, code, exit, said) in [
        ("mi300x:16", "node-unknown", 2, "an AMD Instinct MI300X node has 1 to 8 GPUs"),
        ("mi300", "node-unknown", 2, "did you mean `mi300x`?"),
        ("/nonexistent/node.json", "node-profile-missing", 66, "not a readable profile: not found"),
    ] {
        let c = in_ci(&img, &[spec], &[]);
        assert_eq!((refused(&c), c.code), (Some(code), exit), "{spec}: {}", c.stderr);
        assert!(c.stderr.contains(said), "{spec}: {}", c.stderr);
    }
}

/// Named AMD Instinct parts hold an image archive to the fleet in CI: GPU code, the weights
/// against a GPU's memory, TP against the GPUs; two make a column each.
#[test]
fn named_parts_judge_an_image_archive_against_the_fleet() {
    let t = tempfile::tempdir().unwrap();
    let torch = hip_library(t.path(), "torch", &[plain(&["gfx90a", "gfx950"])]);
    let img = image_with(&torch, None, None);
    let tp = t.path().display().to_string();
    std::fs::write(t.path().join("Containerfile"), "FROM scratch\nCOPY img/ /\n").unwrap();
    let cp = Command::new("cp").arg("-a").arg(img.path()).arg(t.path().join("img")).status().unwrap();
    assert!(cp.success());
    let tool = crate::image::tool;
    tool("podman", t.path(), &["build", "-q", "-t", "localhost/fleet:1", "-f", &format!("{tp}/Containerfile"), &tp]);
    tool("podman", t.path(), &["push", "-q", "localhost/fleet:1", &format!("oci:{tp}/oci:1")]);
    let archive = format!("{tp}/oci:1");
    let check = |nodes: &[&str], extra: &[&str]| {
        let mut args: Vec<&str> = vec!["check", "--image", &archive];
        args.extend(extra.iter().take_while(|a| a.starts_with("-o")));
        for n in nodes {
            args.extend(["--node", n]);
        }
        args.extend(["--", "--model", "/models/kimi-k3"]);
        args.extend(extra.iter().skip_while(|a| a.starts_with("-o")));
        infera(&args).overlay(&shipped_overlay().overlay()).run()
    };
    let o = check(&["mi300x"], &[]);
    assert_eq!((refused(&o), o.code), (Some("gpu-code-missing"), 69), "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(
            "libtorch_hip.so` has GPU code for gfx90a, gfx950 but this node's GPUs are gfx942 (--node mi300x)"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stdout.contains("  node      mi300x:8 (AMD Instinct MI300X, gfx942; "), "{}", o.stdout);
    let o = check(&["mi355x"], &[]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("  added     --tensor-parallel-size 8 "), "{}", o.stdout);
    let o = check(&["mi355x:4"], &["--tensor-parallel-size", "8"]);
    assert_eq!((refused(&o), o.code), (Some("tp-exceeds-gpus"), 78), "{}{}", o.stdout, o.stderr);
    // Two nodes: a column each, a JUnit case per tree × node.
    let o = check(&["mi300x", "mi355x"], &[]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let head = o.stdout.lines().nth(2).unwrap_or_default();
    assert!(head.starts_with("IMAGE ") && head.contains(" mi300x ") && head.ends_with(" mi355x"), "{}", o.stdout);
    let row = o.stdout.lines().nth(3).unwrap_or_default();
    assert!(row.starts_with(&format!("{archive} (rocm7-py312)")), "{}", o.stdout);
    // (the model's config is not read from an archive; the worker's /dev/shm is not given; the
    // pod's NATS_SERVER is not known from the image alone)
    assert!(row.contains("refused: gpu-code-missing") && row.contains("ok, 3 warnings"), "{}", o.stdout);
    assert!(o.stdout.contains(" with rocm7-py312 on mi300x: error[gpu-code-missing]: "), "{}", o.stdout);
    let o = check(&["mi300x", "mi355x"], &["-ojunit"]);
    assert_eq!(o.stdout.matches("<testcase ").count(), 2, "{}", o.stdout);
    assert!(o.stdout.contains("name=\"rocm7-py312 on mi300x\"") && o.stdout.contains("name=\"rocm7-py312 on mi355x\""));
    // A 2 TB checkpoint on MI300X nodes (torch with their code): the weights do not fit.
    let torch = hip_library(t.path(), "torch942", &[plain(&["gfx942"])]);
    let big = image_with(&torch, None, Some(2_000_000_000_000));
    let o = in_ci(&big, &["mi300x"], &[]);
    assert_eq!(refused(&o), Some("weights-exceed-vram"), "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("more than a GPU's 192.0 GiB"), "{}", o.stderr);
    // Hints lead to a layout every rule accepts (MI355X, 288 GiB GPUs, a 1397 GiB checkpoint,
    // 64 heads): 5 GPUs would hold the bytes, but TP 5 does not divide the heads; 4 GPUs with
    // TP 8 are not fixed by TP 4, which cannot hold the weights either.
    let torch950 = hip_library(t.path(), "torch950", &[plain(&["gfx950"])]);
    let kimi = image_with(&torch950, None, Some(1397 << 30));
    let o = in_ci(&kimi, &["mi355x:4"], &[]);
    assert_eq!(refused(&o), Some("weights-exceed-vram"), "{}{}", o.stdout, o.stderr);
    let eight = "at least 8 at this size, as a size that divides the model's 64 attention heads";
    assert!(o.stderr.contains(eight), "{}", o.stderr);
    let o = in_ci(&kimi, &["mi355x:4"], &["--tensor-parallel-size", "8"]);
    assert_eq!(refused(&o), Some("tp-exceeds-gpus"), "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("hint: its weights do not fit 4 GPUs of 288.0 GiB either: give the pod at least 8, as a size"),
        "{}",
        o.stderr
    );
    // A run is judged against its own node; a profile that is not one is said.
    let o = infera(&["worker", "--node", "mi300x", "--", "--model", "m"]).root(&img).run();
    assert_eq!((refused(&o), o.code), (Some("node-dry-run-only"), 2), "{}", o.stderr);
    let fifo = t.path().join("fifo.json");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let o = in_ci(&img, &[fifo.to_str().unwrap()], &[]);
    assert_eq!((refused(&o), o.code), (Some("node-profile-invalid"), 65), "{}", o.stderr);
    assert!(o.stderr.contains("is a FIFO"), "{}", o.stderr);
}
