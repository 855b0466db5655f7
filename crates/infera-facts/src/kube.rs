//! The cluster's own nodes, as `kubectl get node(s) -o json|yaml` prints them: a `Node`, or a
//! `List`/`NodeList` of them. Each node is read for what the AMD node labeller
//! (ROCm/k8s-device-plugin's `k8s-node-labeller`, also run by the AMD GPU Operator) puts on it
//! and for the GPUs a pod can have (`status.allocatable["amd.com/gpu"]`); nodes of the same
//! description form one **node type**, a [`NodeFacts`] each. A node the labels do not describe
//! (no labeller, labels that contradict each other or the part table, no GPU to allocate) is
//! said, never a node type.
//!
//! The labeller writes, for each kind K of a node's GPUs (its `createLabels`): with one value,
//! `amd.com/gpu.K=VALUE`; with several, `amd.com/gpu.K.VALUE=COUNT` instead; and always the
//! legacy `beta.amd.com/gpu.K.VALUE=COUNT`, with `beta.amd.com/gpu.K=VALUE` when one. VRAM is
//! a GPU's KFD memory in GiB, rounded (`192G`); `compute-memory-partition` is
//! `COMPUTE_MEMORY` in lower case (`cpx_nps4`), on a homogeneous node only.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::devices::Gpu;
use super::node::{part_of_device, Labelled, NodeFacts, Part, Unjudged};

/// The most nodes a list may hold (a cluster of 5,000 nodes reads in well under a second).
pub const MAX_NODES: usize = 100_000;

/// What the nodes of a file are: node types, and the nodes no type holds, with why.
#[derive(Debug, Default)]
pub struct Fleet {
    pub types: Vec<NodeFacts>,
    pub unjudged: Vec<Unjudged>,
}

#[derive(Deserialize)]
struct Doc {
    kind: Option<String>,
    items: Option<Vec<KNode>>,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize)]
struct KNode {
    kind: Option<String>,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize, Default)]
struct Meta {
    name: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    allocatable: Allocatable,
}

#[derive(Deserialize, Default)]
struct Allocatable {
    #[serde(rename = "amd.com/gpu")]
    gpu: Option<String>,
}

/// Whether the document is a Kubernetes object (it has a `kind`), not a node profile.
pub fn is_kube(bytes: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Kind {
        kind: Option<String>,
        schema_version: Option<serde::de::IgnoredAny>,
    }
    match parse::<Kind>(bytes) {
        Ok(k) => k.kind.is_some() && k.schema_version.is_none(),
        Err(_) => false,
    }
}

/// JSON (what `kubectl -o json` prints) or YAML (`-o yaml`, read within serde-saphyr's budget).
fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let json = bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|b| *b == b'{');
    if json {
        return serde_json::from_slice(bytes).map_err(|e| e.to_string());
    }
    serde_saphyr::from_slice(bytes).map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())
}

/// The nodes `bytes` hold, as node types (`spec`: the file, for the types' sources).
pub fn read(spec: &str, bytes: &[u8]) -> Result<Fleet, String> {
    let doc: Doc = parse(bytes).map_err(|e| format!("not a Node or a list of them: {e}"))?;
    let nodes = match (doc.kind.as_deref(), doc.items) {
        (Some("Node"), _) => vec![KNode { kind: doc.kind, metadata: doc.metadata, status: doc.status }],
        (Some("List" | "NodeList"), Some(items)) => items,
        (kind, _) => {
            return Err(format!(
                "a {} is not a Node or a List/NodeList of them (`kubectl get nodes -o json` prints one)",
                kind.unwrap_or("document without a kind")
            ))
        }
    };
    if nodes.len() > MAX_NODES {
        return Err(format!("{} nodes, more than {MAX_NODES}: no cluster has that many", nodes.len()));
    }
    let mut fleet = Fleet::default();
    // The types in the order the file first lists them.
    let mut index: BTreeMap<Key, usize> = BTreeMap::new();
    let mut types: Vec<(Description, Vec<String>)> = Vec::new();
    for (i, n) in nodes.into_iter().enumerate() {
        let name = n.metadata.name.clone().unwrap_or_else(|| format!("item {i} (no name)"));
        if n.kind.as_deref().is_some_and(|k| k != "Node") {
            fleet.unjudged.push(Unjudged { node: name, why: format!("a {}, not a Node", n.kind.unwrap_or_default()) });
            continue;
        }
        match describe(&n.metadata.labels, n.status.allocatable.gpu.as_deref()) {
            Ok(d) => {
                let at = *index.entry(d.key()).or_insert(types.len());
                if at == types.len() {
                    types.push((d, Vec::new()));
                }
                types[at].1.push(name);
            }
            Err(why) => fleet.unjudged.push(Unjudged { node: name, why }),
        }
    }
    fleet.types = types.into_iter().map(|(d, names)| d.facts(spec, names)).collect();
    Ok(fleet)
}

/// What the labels say of a node's GPUs.
#[derive(Debug, Clone)]
struct Description {
    ids: BTreeMap<String, u32>,
    vram: Option<String>,
    partition: Option<String>,
    driver: Option<String>,
    /// GPUs a pod can have.
    gpus: u32,
}

type Key = (Vec<(String, u32)>, Option<String>, Option<String>, Option<String>, u32);

impl Description {
    fn key(&self) -> Key {
        let ids = self.ids.iter().map(|(k, v)| (k.clone(), *v)).collect();
        (ids, self.vram.clone(), self.partition.clone(), self.driver.clone(), self.gpus)
    }

    /// The node type: its GPUs as the parts and labels say, named by its part and count.
    fn facts(self, spec: &str, names: Vec<String>) -> NodeFacts {
        let parts: Vec<(&'static Part, &String, u32)> =
            self.ids.iter().filter_map(|(id, n)| Some((part_of_device(id)?, id, *n))).collect();
        let (compute, memory) = match self.partition.as_deref().and_then(|p| p.split_once('_')) {
            Some((c, m)) => (Some(c.to_ascii_uppercase()), Some(m.to_ascii_uppercase())),
            None => (None, None),
        };
        // Each id's GPUs in turn, as many as a pod can have (a partitioned node's are more).
        let each: Vec<(&&'static Part, &&String)> =
            parts.iter().flat_map(|(p, id, n)| (0..*n).map(move |_| (p, id))).collect();
        let mut gpus: Vec<Gpu> = each
            .iter()
            .copied()
            .cycle()
            .take(self.gpus as usize)
            .enumerate()
            .map(|(i, (p, id))| Gpu {
                node: i as u32 + 1,
                gfx: Some(p.gfx.to_string()),
                device_id: Some((*id).clone()),
                render_minor: None,
                vram: vram_bytes(p, self.vram.as_deref()),
                compute_partition: compute.clone(),
                memory_partition: memory.clone(),
            })
            .collect();
        gpus.truncate(self.gpus as usize);
        let product = match parts.as_slice() {
            [(p, _, _)] => Some(p.model.to_string()),
            _ => None,
        };
        let what = match parts.as_slice() {
            [(p, _, _)] => p.model.trim_start_matches("AMD Instinct ").to_string(),
            many => many.iter().map(|(p, _, _)| p.name.to_ascii_uppercase()).collect::<Vec<_>>().join("+"),
        };
        let split = match (&compute, &memory) {
            (Some(c), Some(m)) if c != "SPX" || m != "NPS1" => format!(" {c}/{m}"),
            _ => String::new(),
        };
        let label = format!("{what} ×{}{split}", self.gpus);
        let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
        let more = names.len().saturating_sub(5);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let source = format!(
            "{spec}: {} node{} ({}{more})",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            shown.join(", ")
        );
        NodeFacts {
            driver: self.driver.clone(),
            labelled: Some(Labelled {
                device_ids: self.ids,
                vram: self.vram,
                partition: self.partition,
                driver: self.driver,
                nodes: names,
            }),
            ..NodeFacts::of_description(source, product, gpus, label)
        }
    }
}

/// A GPU's memory: the part's own (KFD's bytes) where the label is the part's rounded, else
/// the label's GiB (a partition's share); an APU's is the system's.
fn vram_bytes(p: &Part, label: Option<&str>) -> Option<u64> {
    let gib = label.and_then(|l| l.strip_suffix('G')?.parse::<u64>().ok());
    match (p.vram, gib) {
        (Some(v), Some(g)) if rounded_gib(v) == g => Some(v),
        (_, Some(g)) => g.checked_mul(1 << 30),
        (v, None) => v,
    }
}

/// Bytes in GiB as the labeller rounds them (`math.Round(MiB / 1024)`).
fn rounded_gib(bytes: u64) -> u64 {
    ((bytes >> 20) as f64 / 1024.0).round() as u64
}

/// The labels of one node read into its description; Err(why) where they do not describe it.
fn describe(labels: &BTreeMap<String, String>, allocatable: Option<&str>) -> Result<Description, String> {
    let ids = values(labels, "device-id")?;
    if ids.is_empty() {
        return Err("no AMD node labeller labels (amd.com/gpu.device-id): its GPUs are not described".into());
    }
    let gpus = match allocatable.map(|a| a.trim().parse::<u32>()) {
        Some(Ok(n)) if n > 0 && n <= super::node::MAX_GPUS => n,
        Some(Ok(0)) | None => return Err("offers no amd.com/gpu (status.allocatable): no GPU pod runs there".into()),
        Some(_) => {
            return Err(format!(
                "status.allocatable[\"amd.com/gpu\"] is `{}`, not a count of 1 to {} GPUs",
                allocatable.unwrap_or_default(),
                super::node::MAX_GPUS
            ))
        }
    };
    let mut counted = BTreeMap::new();
    for (id, n) in &ids {
        if part_of_device(id).is_none() {
            return Err(format!("amd.com/gpu.device-id {id} is no AMD Instinct part this launcher knows"));
        }
        counted.insert(id.clone(), n.unwrap_or(gpus));
    }
    // (Several values of one kind: the first; of VRAM, the smallest, which bounds what a pod gets.)
    let one = |kind: &str| -> Result<Option<String>, String> { Ok(values(labels, kind)?.into_keys().next()) };
    let vrams = values(labels, "vram")?;
    let gib = |k: &String| k.trim_end_matches('G').parse::<u64>().unwrap_or(u64::MAX);
    let d = Description {
        ids: counted,
        vram: vrams.keys().min_by_key(|k| gib(k)).cloned(),
        partition: one("compute-memory-partition")?,
        driver: one("driver-version")?,
        gpus,
    };
    // A VRAM is paired with a device id only where each has one value.
    if vrams.len() <= 1 && d.ids.len() == 1 {
        contradicts_parts(&d)?;
    }
    Ok(d)
}

/// The values of kind `kind` on a node (value → its count, when the labels give one), from
/// `amd.com/gpu.` and `beta.amd.com/gpu.` labels alike; Err where the two say different things.
fn values(labels: &BTreeMap<String, String>, kind: &str) -> Result<BTreeMap<String, Option<u32>>, String> {
    let of = |prefix: &str| -> Result<BTreeMap<String, Option<u32>>, String> {
        let key = format!("{prefix}/gpu.{kind}");
        let mut out: BTreeMap<String, Option<u32>> = BTreeMap::new();
        for (k, v) in labels.range(key.clone()..).take_while(|(k, _)| k.starts_with(&key)) {
            match k[key.len()..].strip_prefix('.') {
                Some(value) => {
                    let n = v.parse::<u32>().map_err(|_| format!("`{k}={v}`: a count that is not a number"))?;
                    out.insert(value.to_string(), Some(n));
                }
                None if k.len() == key.len() => {
                    out.entry(v.clone()).or_insert(None);
                }
                None => {} // another kind that begins with this one's name
            }
        }
        Ok(out)
    };
    let (current, beta) = (of("amd.com")?, of("beta.amd.com")?);
    if !current.is_empty() && !beta.is_empty() && current.keys().ne(beta.keys()) {
        let said = |m: &BTreeMap<String, Option<u32>>| m.keys().cloned().collect::<Vec<_>>().join(", ");
        return Err(format!(
            "its labels contradict each other: amd.com/gpu.{kind} says {} but beta.amd.com/gpu.{kind} says {}",
            said(&current),
            said(&beta)
        ));
    }
    Ok(if current.is_empty() { beta } else { current })
}

/// A node whose VRAM label is no part of its device id's could be: more memory than the part
/// has, or not the part's own where the GPU is not partitioned.
fn contradicts_parts(d: &Description) -> Result<(), String> {
    let Some(g) = d.vram.as_deref().and_then(|l| l.strip_suffix('G')?.parse::<u64>().ok()) else { return Ok(()) };
    let partitioned = d.partition.as_deref().is_some_and(|p| p != "spx_nps1");
    for id in d.ids.keys() {
        let Some((p, Some(v))) = part_of_device(id).map(|p| (p, p.vram)) else { continue };
        let whole = rounded_gib(v);
        if g > whole || (!partitioned && g + 1 < whole) {
            return Err(format!(
                "its labels contradict the part table: device id {id} is an {} of {whole}G, but amd.com/gpu.vram is {g}G",
                p.model
            ));
        }
    }
    Ok(())
}

/// What a node affinity selects the nodes of a type by: the labels the AMD node labeller
/// writes on them (the `amd.com/gpu.` ones), each with the values a node of the type may have.
/// A node of several device ids has `amd.com/gpu.device-id.ID` labels instead of one
/// `amd.com/gpu.device-id`.
pub type Selector = BTreeMap<String, Vec<String>>;

/// The labeller's keys, in the order a node affinity adds them until they tell node types apart.
pub const DEVICE_ID: &str = "amd.com/gpu.device-id";
pub const SELECTOR_KEYS: [&str; 4] =
    [DEVICE_ID, "amd.com/gpu.vram", "amd.com/gpu.compute-memory-partition", "amd.com/gpu.driver-version"];

/// The labels of a node type as the labeller writes them: a Kubernetes node type's own; a
/// part's (every device id of the part, its VRAM); a profile's (its GPUs' ids, memory and
/// partitions, its driver). Err where the node names no device id (a version 1 profile).
pub fn selector(n: &NodeFacts) -> Result<Selector, String> {
    let mut s = Selector::new();
    let put = |s: &mut Selector, k: &str, v: Option<String>| {
        if let Some(v) = v {
            s.insert(k.to_string(), vec![v]);
        }
    };
    if let Some(l) = &n.labelled {
        match l.device_ids.len() {
            1 => put(&mut s, DEVICE_ID, l.device_ids.keys().next().cloned()),
            _ => l.device_ids.iter().for_each(|(id, c)| put(&mut s, &format!("{DEVICE_ID}.{id}"), Some(c.to_string()))),
        }
        put(&mut s, SELECTOR_KEYS[1], l.vram.clone());
        put(&mut s, SELECTOR_KEYS[2], l.partition.clone());
        put(&mut s, SELECTOR_KEYS[3], l.driver.clone());
        return Ok(s);
    }
    let mut ids: Vec<String> = n.gpus.iter().filter_map(|g| g.device_id.clone()).collect();
    ids.sort();
    ids.dedup();
    // A part is every variant of it (the part table's ids); a profile, its own GPUs.
    let part = n.part.and_then(|name| super::node::PARTS.iter().find(|p| p.name == name));
    match (part, ids.as_slice()) {
        (Some(p), _) => {
            let all = p.device_ids.iter().map(|d| d.to_string()).collect();
            s.insert(DEVICE_ID.into(), all);
        }
        (_, []) => {
            return Err("it names no PCI device id of its GPUs (a version 1 profile: write it again with `infera-exec node -o json`)".into())
        }
        (_, [one]) => put(&mut s, DEVICE_ID, Some(one.clone())),
        (_, many) => {
            for id in many {
                let count = n.gpus.iter().filter(|g| g.device_id.as_deref() == Some(id.as_str())).count();
                put(&mut s, &format!("{DEVICE_ID}.{id}"), Some(count.to_string()));
            }
        }
    }
    put(&mut s, SELECTOR_KEYS[1], n.gpus.iter().filter_map(|g| g.vram).min().map(|v| format!("{}G", rounded_gib(v))));
    let split = n.gpus.first().and_then(|g| Some((g.compute_partition.clone()?, g.memory_partition.clone()?)));
    put(&mut s, SELECTOR_KEYS[2], split.map(|(c, m)| format!("{}_{}", c.to_ascii_lowercase(), m.to_ascii_lowercase())));
    put(&mut s, SELECTOR_KEYS[3], n.driver.clone());
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)], gpus: Option<&str>) -> serde_json::Value {
        let labels: serde_json::Map<String, serde_json::Value> =
            labels.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
        let mut n = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                                       "status": {"allocatable": {"cpu": "192", "memory": "2113466040Ki"},
                                                  "images": [{"names": ["x"], "sizeBytes": 1}]}});
        if let Some(g) = gpus {
            n["status"]["allocatable"]["amd.com/gpu"] = serde_json::json!(g);
        }
        n
    }

    /// The labels the labeller writes for `n` GPUs of one device id and VRAM.
    fn labelled(id: &str, vram: &str, n: u32) -> Vec<(String, String)> {
        let mut l = Vec::new();
        for (kind, value) in [("device-id", id), ("vram", vram), ("family", "AI")] {
            l.push((format!("amd.com/gpu.{kind}"), value.to_string()));
            l.push((format!("beta.amd.com/gpu.{kind}"), value.to_string()));
            l.push((format!("beta.amd.com/gpu.{kind}.{value}"), n.to_string()));
        }
        l
    }

    fn list(nodes: Vec<serde_json::Value>) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "List", "items": nodes})).unwrap()
    }

    fn refs(l: &[(String, String)]) -> Vec<(&str, &str)> {
        l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn nodes_of_one_description_are_one_type() {
        let mi300 = labelled("74a1", "192G", 8);
        let mi210 = labelled("740f", "64G", 8);
        let bytes = list(vec![
            node("gpu-a", &refs(&mi300), Some("8")),
            node("gpu-b", &refs(&mi300), Some("8")),
            node("gpu-c", &refs(&mi210), Some("8")),
            node("cpu-1", &[("kubernetes.io/os", "linux")], None),
        ]);
        assert!(is_kube(&bytes));
        let f = read("nodes.json", &bytes).unwrap();
        assert_eq!(f.types.len(), 2, "{f:?}");
        let t = f.types.iter().find(|t| t.label == "MI300X ×8").unwrap();
        assert_eq!(t.gpus.len(), 8);
        assert_eq!((t.gpus[0].gfx.as_deref(), t.gpus[0].vram), (Some("gfx942"), Some(206_141_652_992)));
        assert_eq!(t.source, "nodes.json: 2 nodes (gpu-a, gpu-b)");
        assert_eq!(t.labelled.as_ref().unwrap().nodes, ["gpu-a", "gpu-b"]);
        let t = f.types.iter().find(|t| t.label == "MI210 ×8").unwrap();
        assert_eq!(t.gpus[0].vram, Some(64 << 30));
        assert_eq!(f.unjudged.len(), 1);
        assert!(f.unjudged[0].why.starts_with("no AMD node labeller labels"), "{:?}", f.unjudged);
    }

    #[test]
    fn the_multi_value_form_and_partitions() {
        let mixed = [
            ("amd.com/gpu.device-id.74a1", "4"),
            ("amd.com/gpu.device-id.74a5", "4"),
            ("beta.amd.com/gpu.device-id.74a1", "4"),
            ("beta.amd.com/gpu.device-id.74a5", "4"),
            ("amd.com/gpu.vram.192G", "4"),
            ("amd.com/gpu.vram.256G", "4"),
        ];
        let cpx = [
            ("amd.com/gpu.device-id", "74a1"),
            ("amd.com/gpu.vram", "24G"),
            ("amd.com/gpu.compute-memory-partition", "cpx_nps1"),
        ];
        let f = read("n.yaml", &list(vec![node("mixed", &mixed, Some("8")), node("cpx", &cpx, Some("64"))])).unwrap();
        let m = f.types.iter().find(|t| t.label == "MI300X+MI325X ×8").unwrap_or_else(|| panic!("{f:?}"));
        assert_eq!(m.gpus.iter().filter(|g| g.device_id.as_deref() == Some("74a5")).count(), 4);
        let mi325 = m.gpus.iter().find(|g| g.device_id.as_deref() == Some("74a5")).unwrap();
        assert_eq!(mi325.vram, Some(192 << 30), "the smallest of several VRAM labels bounds every GPU");
        let c = f.types.iter().find(|t| t.label == "MI300X ×64 CPX/NPS1").unwrap_or_else(|| panic!("{f:?}"));
        assert_eq!(
            (c.gpus.len(), c.gpus[0].vram, c.gpus[0].compute_partition.as_deref()),
            (64, Some(24 << 30), Some("CPX"))
        );
    }

    #[test]
    fn what_the_labels_cannot_describe_is_said() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, &'a str);
        let cases: &[Case] = &[
            (&[("amd.com/gpu.device-id", "74a1")], Some("0"), "offers no amd.com/gpu"),
            (&[("amd.com/gpu.device-id", "74a1")], None, "offers no amd.com/gpu"),
            (&[("amd.com/gpu.device-id", "1234")], Some("8"), "device-id 1234 is no AMD Instinct part"),
            (
                &[("amd.com/gpu.device-id", "74a1"), ("beta.amd.com/gpu.device-id", "740f")],
                Some("8"),
                "amd.com/gpu.device-id says 74a1 but beta.amd.com/gpu.device-id says 740f",
            ),
            (
                &[("amd.com/gpu.device-id", "74a1"), ("amd.com/gpu.vram", "64G")],
                Some("8"),
                "device id 74a1 is an AMD Instinct MI300X of 192G, but amd.com/gpu.vram is 64G",
            ),
            (&[("amd.com/gpu.device-id", "74a1")], Some("eight"), "is `eight`, not a count"),
        ];
        for (labels, gpus, said) in cases {
            let f = read("n.json", &list(vec![node("n", labels, *gpus)])).unwrap();
            assert!(f.types.is_empty(), "{said}: {f:?}");
            assert!(f.unjudged[0].why.contains(said), "{said}: {}", f.unjudged[0].why);
        }
        for bad in [&b"{\"kind\": \"Pod\"}"[..], b"{\"kind\": \"List\"}", b"[1, 2]", b"kind: Node\nmetadata: 5\n"] {
            assert!(read("x", bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn yaml_as_kubectl_prints_it() {
        let y = "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-9\n  labels:\n    amd.com/gpu.device-id: \"75a3\"\n    \
                 amd.com/gpu.vram: 288G\nstatus:\n  allocatable:\n    amd.com/gpu: \"8\"\n";
        assert!(is_kube(y.as_bytes()));
        let f = read("n.yaml", y.as_bytes()).unwrap();
        assert_eq!((f.types.len(), f.types[0].label.as_str()), (1, "MI355X ×8"));
        assert_eq!(f.types[0].gpus[0].gfx.as_deref(), Some("gfx950"));
    }
}
