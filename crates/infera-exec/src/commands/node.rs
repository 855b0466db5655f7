//! `infera-exec node`: this node's profile, as the DaemonSet prints it for `check --node`.

use crate::answer::{emit, refuse};
use crate::cli;
use crate::error::{self};
use crate::{plan, report};
use infera_core::error::{Exit, Refusal};
use infera_facts::envvars::Env;

/// `node`: this node's profile (root `/`), as JSON or YAML with its findings, or as text
/// with what in it would fail an engine; exit 69 (`node-no-gpus`) where no GPU engine can
/// run, the profile printed all the same.
pub(crate) fn node_profile(output: cli::NodeOutput, name: Option<String>, env: &Env) -> i32 {
    let root = infera_core::rootfs::Root::new(std::path::Path::new("/"));
    let name = name.map(|n| n.trim().to_string()).filter(|n| !n.is_empty());
    if let Some(n) = name.as_ref().filter(|n| !infera_facts::node::is_node_name(n)) {
        return refuse(
            &Refusal::from(error::UsageError::NodeName { name: infera_core::term::escape_all(n).into_owned() }),
            env,
        );
    }
    let Some(mut node) = infera_facts::node::gather(&root, name) else {
        return refuse(&infera_core::error::internal("the node at root `/` cannot be read"), env);
    };
    let (findings, refusal) = plan::node_findings(&node);
    node.findings.extend(findings);
    let text = if output == cli::NodeOutput::Text {
        let mut o = format!(
            "infera-exec node ({}{})\n",
            node.source,
            node.name.as_ref().map_or(String::new(), |n| format!(", {n}"))
        );
        report::node_section(&mut o, &node);
        for f in &node.findings {
            report::finding_line(&mut o, f);
        }
        o
    } else {
        let mut json = serde_json::to_value(&node).unwrap_or_default();
        if let (Some(r), Some(o)) = (&refusal, json.as_object_mut()) {
            o.insert("error".into(), serde_json::to_value(r).unwrap_or_default());
        }
        report::structured(format!("{json:#}\n"), output == cli::NodeOutput::Yaml).unwrap_or_default()
    };
    if let Err(code) = emit(&text) {
        return code;
    }
    match refusal {
        Some(r) => refuse(&r, env),
        None => Exit::Ok.code(),
    }
}
