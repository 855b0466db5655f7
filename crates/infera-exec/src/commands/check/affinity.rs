//! `check -o affinity`: the verdict handed to the scheduler. For one image judged on the
//! fleet's node types, the `nodeAffinity` (`requiredDuringSchedulingIgnoredDuringExecution`)
//! that admits exactly the node types on which every check passed, on the labels the AMD node
//! labeller sets (the device id; the VRAM, the partition mode and the driver version where
//! they are what tells an admitted type from a refused one), as a kustomize Component: a
//! patch for the workers' Deployments, StatefulSets and LeaderWorkerSets (those labelled
//! `app.kubernetes.io/component=worker`) and for an InferaDeployment's `worker` service.

use serde_json::{json, Value};

use super::{Row, Shape, Verdict};
use crate::choices::FailOn;
use infera_core::error::Refusal;
use infera_facts::kube::{Selector, DEVICE_ID, SELECTOR_KEYS};

/// The GPU workloads a patch applies to (the examples label their workers, prefill and
/// decode groups so).
pub(crate) const WORKER_SELECTOR: &str = "app.kubernetes.io/component in (worker,prefill,decode)";
/// The annotation each patched pod template carries: what judged it, for what.
pub(crate) const ANNOTATION: &str = "infera.amd.com/placement";

#[derive(Debug, Clone, PartialEq, thiserror::Error, infera_exec_derive::Refuse)]
pub(crate) enum AffinityError {
    #[error("no node type of --node passes every check for this image: {refused}")]
    #[refuse(
        code = "placement-none",
        exit = Unsupported,
        hint = "the message names each node type's refusal (`check` without -o affinity shows them in full): an image built for those GPUs, a model that fits them, or nodes of another type"
    )]
    NoneAdmitted { refused: String },
    #[error("-o affinity places one image on the nodes of --node: {why}")]
    #[refuse(code = "placement-one-image", exit = Usage, hint = "give one --image (or --root) and at least one --node: a node type each, or `kubectl get nodes -o json`")]
    Shape { why: &'static str },
}

/// A node type's verdict for the image: admitted, or the codes it was refused with.
fn verdict(row: &Row, shape: &Shape, n: usize, fail_on: FailOn) -> Result<(), Vec<String>> {
    let cells: Vec<&super::Cell> = shape
        .of_node(n)
        .filter_map(|(i, _)| row.cells.get(i))
        .filter(|c| c.verdict != Verdict::NotApplicable)
        .collect();
    if cells.is_empty() {
        return Err(vec!["no-applicable-tree".into()]);
    }
    let codes: Vec<String> = cells
        .iter()
        .filter(|c| c.fails(fail_on))
        .map(|c| c.error.as_ref().map_or_else(|| c.warnings[0].0.clone(), |e| e.code.clone()))
        .collect();
    if codes.is_empty() {
        Ok(())
    } else {
        Err(codes)
    }
}

/// A node selector term: `(key, values)`, an empty list for `Exists`.
type Term = Vec<(String, Vec<String>)>;

/// The term that selects `s`'s nodes on the first `level` keys.
fn term(s: &Selector, level: usize) -> Term {
    let mut t = Term::new();
    for key in &SELECTOR_KEYS[..level] {
        if *key == DEVICE_ID && !s.contains_key(DEVICE_ID) {
            // Several device ids: a label each.
            t.extend(s.keys().filter(|k| k.starts_with(&format!("{DEVICE_ID}."))).map(|k| (k.clone(), Vec::new())));
        } else if let Some(v) = s.get(*key) {
            t.push((key.to_string(), v.clone()));
        }
    }
    t
}

/// Whether a node of selector `s` could satisfy `t`.
fn matches(t: &Term, s: &Selector) -> bool {
    t.iter()
        .all(|(k, values)| s.get(k).is_some_and(|have| values.is_empty() || have.iter().any(|v| values.contains(v))))
}

/// The Component, or why no node type can be admitted.
pub(crate) fn render(rows: &[Row], shape: &Shape, fail_on: FailOn) -> Result<String, Refusal> {
    let [row] = rows else { return Err(AffinityError::Shape { why: "give one image" }.into()) };
    if shape.node_sources.is_empty() {
        return Err(AffinityError::Shape { why: "give the nodes (--node)" }.into());
    }
    if let Some(e) = &row.error {
        return Err(e.clone());
    }
    let label = |n: usize| shape.node_sources[n].0.clone();
    let verdicts: Vec<Result<(), Vec<String>>> = (0..shape.nodes).map(|n| verdict(row, shape, n, fail_on)).collect();
    let refused: Vec<&Selector> = (0..shape.nodes)
        .filter(|n| verdicts[*n].is_err())
        .filter_map(|n| shape.selectors.get(n)?.as_ref().ok())
        .collect();
    let (mut terms, mut admitted, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    for n in (0..shape.nodes).filter(|n| verdicts[*n].is_ok()) {
        match shape.selectors.get(n) {
            Some(Ok(s)) => match (1..=SELECTOR_KEYS.len())
                .map(|l| term(s, l))
                .find(|t| !refused.iter().any(|r| matches(t, r)))
            {
                Some(t) => {
                    terms.push(t);
                    admitted.push(label(n));
                }
                None => notes.push(format!("{}: passes, but its labels are a refused type's: not admitted", label(n))),
            },
            Some(Err(why)) => notes.push(format!("{}: passes, but {why}: not admitted", label(n))),
            None => {}
        }
    }
    let refusals: Vec<String> = (0..shape.nodes)
        .filter_map(|n| verdicts[n].as_ref().err().map(|codes| format!("{} ({})", label(n), codes.join(", "))))
        .collect();
    if terms.is_empty() {
        let mut said = refusals.clone();
        said.extend(notes);
        return Err(AffinityError::NoneAdmitted { refused: said.join(", ") }.into());
    }
    Ok(component(row, shape, &terms, (&admitted, &refusals, &notes)))
}

/// The image as the placement names it: its config digest, or the root read.
fn judged(row: &Row) -> String {
    match &row.identity {
        Some(i) => format!("{} (config {})", i.names.first().unwrap_or(&row.image), i.config_digest),
        None => row.image.clone(),
    }
}

fn component(
    row: &Row,
    shape: &Shape,
    terms: &[Term],
    (admitted, refused, notes): (&[String], &[String], &[String]),
) -> String {
    let tool = super::render::tool();
    let note = format!("{tool} judged {}: admits {}", judged(row), admitted.join(", "));
    let expressions = |t: &Term| -> Vec<Value> {
        t.iter()
            .map(|(k, v)| match v.is_empty() {
                true => json!({ "key": k, "operator": "Exists" }),
                false => json!({ "key": k, "operator": "In", "values": v }),
            })
            .collect()
    };
    let terms: Vec<Value> = terms.iter().map(|t| json!({ "matchExpressions": expressions(t) })).collect();
    let affinity =
        json!({ "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": terms } } });
    let template = json!({ "metadata": { "annotations": { ANNOTATION: note } }, "spec": { "affinity": affinity } });
    let smp = |api: &str, kind: &str, spec: Value, meta: Value| {
        let mut m = json!({ "name": "infera-placement" });
        if let (Some(o), Value::Object(extra)) = (m.as_object_mut(), meta) {
            o.extend(extra);
        }
        yaml(&json!({ "apiVersion": api, "kind": kind, "metadata": m, "spec": spec }))
    };
    let workers = |group: &str, kind: &str| json!({ "group": group, "kind": kind, "labelSelector": WORKER_SELECTOR });
    let pod = json!({ "template": template });
    let lws = json!({ "leaderWorkerTemplate": { "leaderTemplate": template, "workerTemplate": template } });
    let cr = json!({ "services": { "worker": { "extraPodSpec": { "affinity": affinity } } } });
    let patches = json!([
        { "target": workers("apps", "Deployment"), "patch": smp("apps/v1", "Deployment", pod.clone(), json!({})) },
        { "target": workers("apps", "StatefulSet"), "patch": smp("apps/v1", "StatefulSet", pod, json!({})) },
        { "target": workers("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
          "patch": smp("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", lws, json!({})) },
        { "target": { "group": "infera.amd.com", "kind": "InferaDeployment" },
          "patch": smp("infera.amd.com/v1alpha1", "InferaDeployment", cr, json!({ "annotations": { ANNOTATION: note } })) },
    ]);
    let doc = json!({ "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component", "patches": patches });
    let mut o = String::new();
    let comment = |o: &mut String, text: &str| {
        for line in text.lines() {
            o.push_str(&format!("# {line}\n"));
        }
    };
    comment(&mut o, &format!("The node affinity {tool} judged for {}.", judged(row)));
    comment(&mut o, &format!("Admits: {}.", admitted.join(", ")));
    if !refused.is_empty() {
        comment(&mut o, &format!("Refused: {}.", refused.join(", ")));
    }
    for n in notes {
        comment(&mut o, n);
    }
    if !shape.unjudged.is_empty() {
        let names: Vec<&str> = shape.unjudged.iter().map(|(n, _)| n.as_str()).collect();
        comment(&mut o, &format!("Not judged (no term admits them): {}.", names.join(", ")));
    }
    comment(
        &mut o,
        &format!(
            "A kustomize Component: save it as DIR/kustomization.yaml and add `components: [DIR]` to the\n\
             kustomization of the workers (or copy its patches into its `patches:`). It patches the\n\
             Deployments, StatefulSets and LeaderWorkerSets labelled {WORKER_SELECTOR} (a group's leader\n\
             and worker templates: a LeaderWorkerSet without a leaderTemplate takes the worker patch only,\n\
             remove `leaderTemplate` from its patch) and the `worker` service of an InferaDeployment. The\n\
             required terms replace any the templates had."
        ),
    );
    o.push_str(&yaml(&doc));
    o
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(pairs: &[(&str, &[&str])]) -> Selector {
        pairs.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn terms_add_labels_until_they_tell_types_apart() {
        let mi300 = sel(&[(DEVICE_ID, &["74a1"]), ("amd.com/gpu.vram", &["192G"])]);
        let cpx = sel(&[(DEVICE_ID, &["74a1"]), ("amd.com/gpu.vram", &["24G"]), (SELECTOR_KEYS[2], &["cpx_nps1"])]);
        let mi210 = sel(&[(DEVICE_ID, &["740f"]), ("amd.com/gpu.vram", &["64G"])]);
        // The device id alone tells MI300X from MI210.
        assert!(!matches(&term(&mi300, 1), &mi210));
        // Not from its partitioned self: the VRAM does.
        assert!(matches(&term(&mi300, 1), &cpx));
        assert!(!matches(&term(&mi300, 2), &cpx));
        // A part admits every variant of itself.
        let part = sel(&[(DEVICE_ID, &["74a1", "74a9", "74bd", "74b5"])]);
        assert!(matches(&term(&part, 1), &sel(&[(DEVICE_ID, &["74b5"])])));
        // A node of several device ids: a label each, Exists.
        let mixed = sel(&[("amd.com/gpu.device-id.74a1", &["4"]), ("amd.com/gpu.device-id.74a5", &["4"])]);
        let t = term(&mixed, 1);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|(_, v)| v.is_empty()));
        assert!(!matches(&t, &mi300), "a node of one device id has no per-id labels");
    }
}

#[cfg(test)]
mod yaml_tests {
    /// Label values that YAML would read as numbers or booleans stay strings (a device id of
    /// digits, `true`): the API server refuses a number in `values`.
    #[test]
    fn values_that_look_like_numbers_are_quoted() {
        let y = super::yaml(&serde_json::json!({ "values": ["7408", "75a3", "true", "1e3", "010"] }));
        for v in ["7408", "true", "1e3", "010"] {
            assert!(y.contains(&format!("'{v}'")) || y.contains(&format!("\"{v}\"")), "{v}: {y}");
        }
    }
}
