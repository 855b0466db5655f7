//! What one `--node` gives: a part, a profile file, or the cluster's own nodes as Kubernetes
//! describes them — each read by its own module, told apart here.

use std::path::Path;

use crate::kube;
use crate::node::{one_of, unreadable, NodeFacts, NodeSpecError, SpecProblem, Unjudged, PARTS};

/// What one `--node` gives: its node types (one for a part or a profile), and the nodes of a
/// Kubernetes file that no type holds, with why.
#[derive(Debug, Default)]
pub struct Given {
    pub nodes: Vec<NodeFacts>,
    pub unjudged: Vec<Unjudged>,
}

/// `--node PART[:N]` or `--node FILE`: a profile `infera-exec node -o json` wrote, or
/// Kubernetes nodes as `kubectl get nodes -o json|yaml` prints them (a node type each).
pub fn from_spec(spec: &str, read: impl Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<Given, NodeSpecError> {
    let err = |kind, why: String| NodeSpecError { spec: spec.to_string(), why, kind };
    let name = spec.split(':').next().unwrap_or(spec);
    if PARTS.iter().any(|p| p.name.eq_ignore_ascii_case(name)) {
        return one_of(spec, read).map(|n| Given { nodes: vec![n], unjudged: Vec::new() });
    }
    let bytes = read(Path::new(spec)).map_err(|e| unreadable(spec, &e))?;
    if !kube::is_kube(&bytes) {
        return one_of(spec, |_| Ok(bytes.clone())).map(|n| Given { nodes: vec![n], unjudged: Vec::new() });
    }
    let fleet = kube::read(spec, &bytes).map_err(|why| err(SpecProblem::Invalid, why))?;
    if fleet.types.is_empty() {
        let why: Vec<String> = fleet.unjudged.iter().take(3).map(|u| format!("{}: {}", u.node, u.why)).collect();
        return Err(err(
            SpecProblem::Invalid,
            format!("no node of it is described by the AMD node labeller's labels ({})", why.join("; ")),
        ));
    }
    Ok(Given { nodes: fleet.types, unjudged: fleet.unjudged })
}
