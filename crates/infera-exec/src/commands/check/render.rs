//! The matrix written out: a table for people, JSON for machines, JUnit XML for CI reports
//! (a suite per image, a case per tree × node).

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Column, Row, Shape, Verdict};
use crate::answer::xml;
use crate::choices::FailOn;
use infera_core::error::Refusal;

/// The version of the JSON report's shape (and of the JUnit report's properties): a field
/// removed or changed in meaning raises it; a field added does not.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The tool that wrote a report, as `infera-exec --version` says it.
pub(crate) fn tool() -> String {
    format!("infera-exec {} ({})", env!("CARGO_PKG_VERSION"), env!("INFERA_COMMIT"))
}

/// An image's CPython and HIP ABI, from its facts: what a tree must be built for.
pub(crate) fn abi(facts: &Value) -> String {
    let python = facts["python"]["version"].as_str().map_or("no CPython".to_string(), |v| format!("CPython {v}"));
    let hip = facts["rocm"]["hip"]["major"].as_u64().map_or("no HIP".to_string(), |h| format!("HIP ABI {h}"));
    format!("{python}, {hip}")
}

/// The name a CI report gives an image: the names its archive gives it (`localhost/vllm:v1`),
/// else the reference as given (an OCI layout names its image by a bare tag, `latest`, which
/// two layouts share); an image given twice is told apart by its reference.
fn suite_names(rows: &[Row]) -> Vec<String> {
    let name = |r: &Row| match r.identity.as_ref().map(|i| i.names.as_slice()) {
        Some(names) if !names.is_empty() && names.iter().all(|n| n.contains(['/', ':'])) => names.join(", "),
        _ => r.image.clone(),
    };
    let names: Vec<String> = rows.iter().map(name).collect();
    let twice = |n: &String| names.iter().filter(|m| *m == n).count() > 1;
    names.iter().zip(rows).map(|(n, r)| if twice(n) { format!("{n} ({})", r.image) } else { n.clone() }).collect()
}

/// `writeln!` to a String, which cannot fail.
macro_rules! w {
    ($($t:tt)*) => {{
        let _ = writeln!($($t)*);
    }};
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The table (rows images, columns nodes, a cell an image on a node with the trees that
/// apply), fitted to `width` in blocks of columns; then the nodes, what each image is, and
/// each refusal, warning and accepted finding in full, once for the nodes it holds on.
pub(crate) fn text(rows: &[Row], shape: &Shape, fail_on: FailOn, width: usize) -> String {
    let (failed, cells) = super::counts(rows, shape, fail_on);
    let mut o = String::new();
    let nodes =
        if shape.node_sources.is_empty() { String::new() } else { format!(" × {}", plural(shape.nodes, "node")) };
    let what = if fail_on == FailOn::Warn { "failed" } else { "refused" };
    w!(
        o,
        "infera-exec check: {}{nodes} ({}): {failed} of {} {what}\n",
        plural(rows.len(), "image"),
        plural(shape.trees, "tree"),
        plural(cells, "applicable cell")
    );
    let heads: Vec<String> = (0..shape.nodes)
        .map(|n| shape.of_node(n).next().and_then(|(_, c)| c.node_label()).unwrap_or("verdict").to_string())
        .collect();
    let body: Vec<(String, Vec<String>)> = rows.iter().map(|r| (row_label(r), verdicts(r, shape))).collect();
    blocks(&mut o, &heads, &body, width);
    if !shape.node_sources.is_empty() {
        w!(o, "\nnodes:");
        for (label, source) in &shape.node_sources {
            w!(o, "  {}: {}", safe(label), safe(source));
        }
    }
    if !shape.unjudged.is_empty() {
        let fails = if fail_on == FailOn::Warn { " (failing: --fail-on warn)" } else { "" };
        w!(o, "\nnodes not judged{fails}: no node type holds them, no cell says they pass");
        for (name, why) in &shape.unjudged {
            w!(o, "  {}: {}", safe(name), safe(why));
        }
    }
    w!(o, "\nimages:");
    for r in rows {
        w!(o, "  {}: {}", safe(&r.image), safe(&about(r)));
    }
    details(&mut o, rows, shape, fail_on);
    o
}

/// The tables: the image column, then as many node columns as fit `width`, a block each.
fn blocks(o: &mut String, heads: &[String], body: &[(String, Vec<String>)], width: usize) {
    let len = |s: &str| s.chars().count();
    let first = body.iter().map(|(l, _)| len(l)).chain([len("IMAGE")]).max().unwrap_or(0);
    let col =
        |i: usize| body.iter().map(|(_, v)| v.get(i).map_or(0, |c| len(c))).chain([len(&heads[i])]).max().unwrap_or(0);
    let mut start = 0;
    while start < heads.len() {
        let mut end = start + 1;
        let mut used = first + 3 + col(start);
        while end < heads.len() && used + 3 + col(end) <= width {
            used += 3 + col(end);
            end += 1;
        }
        if start > 0 {
            w!(o);
        }
        let mut table =
            vec![std::iter::once("IMAGE".to_string()).chain(heads[start..end].iter().map(|h| safe(h))).collect()];
        for (label, cells) in body {
            table.push(
                std::iter::once(label.clone()).chain(cells[start..end.min(cells.len())].iter().cloned()).collect(),
            );
        }
        aligned(o, &table);
        start = end;
    }
}

/// An image as its row names it: with the tree that applies to it, where one does.
fn row_label(r: &Row) -> String {
    match applicable_trees(r).as_slice() {
        [one] => format!("{} ({one})", safe(&r.image)),
        _ => safe(&r.image),
    }
}

/// The trees that apply to the image (on any node), in order.
fn applicable_trees(r: &Row) -> Vec<String> {
    let mut trees: Vec<String> = Vec::new();
    for c in r.cells.iter().filter(|c| c.verdict != Verdict::NotApplicable) {
        if let Some(f) = c.family.as_ref().filter(|f| !trees.contains(f)) {
            trees.push(f.clone());
        }
    }
    trees
}

/// `writeln!` of the refusals, warnings and accepted findings, each said once for the nodes
/// it holds on.
fn details(o: &mut String, rows: &[Row], shape: &Shape, fail_on: FailOn) {
    let no_tree: Vec<(usize, String, Refusal)> =
        rows.iter().enumerate().filter_map(|(n, r)| Some((n, safe(&r.image), r.no_tree()?))).collect();
    let mut refused = Grouped::default();
    let mut warned = Grouped::default();
    let mut accepted = Grouped::default();
    for (n, r) in rows.iter().enumerate() {
        if let Some(e) = &r.error {
            refused.add((n, safe(&r.image)), None, line("error", &e.code, &e.message, e.hint.as_deref()));
        }
        for (cell, c) in r.cells.iter().zip(&shape.columns) {
            let at =
                (n, format!("{} with {}", safe(&r.image), cell.family.as_deref().unwrap_or(super::tree_name(&c.tree))));
            let node = c.node_label().map(safe);
            if let Some(e) = cell.error.as_ref().filter(|_| cell.verdict == Verdict::Refused) {
                refused.add(at.clone(), node.clone(), line("error", &e.code, &e.message, e.hint.as_deref()));
            }
            for (code, m) in cell.warnings.iter().filter(|_| cell.verdict == Verdict::Ok) {
                warned.add(at.clone(), node.clone(), line("warn", code, m, None));
            }
            for (code, m, by) in &cell.accepted {
                accepted.add(at.clone(), node.clone(), format!("accepted[{code}] by {}: {}", safe(by), safe(m)));
            }
        }
    }
    for (n, at, e) in &no_tree {
        refused.add((*n, at.clone()), None, line("error", &e.code, &e.message, e.hint.as_deref()));
    }
    refused.write(o, "refusals:", shape.nodes);
    let fails = if fail_on == FailOn::Warn { " (failing: --fail-on warn)" } else { "" };
    warned.write(o, &format!("warnings{fails}:"), shape.nodes);
    accepted.write(o, "accepted (--allow; failing nothing):", shape.nodes);
}

/// `error[code]: message`, and its hint on a line of its own.
fn line(level: &str, code: &str, message: &str, hint: Option<&str>) -> String {
    let hint = hint.map_or(String::new(), |h| format!("\n    hint: {}", safe(h)));
    format!("{level}[{code}]: {}{hint}", safe(message))
}

/// What was said, each once, with where it was said (the row, the image with its tree) and
/// the nodes it holds on, in the order first said.
#[derive(Default)]
struct Grouped {
    items: Vec<Said>,
}

struct Said {
    at: (usize, String),
    said: String,
    nodes: Vec<String>,
}

/// The most nodes a line names one by one; past it, the first of them and how many more.
const NODES_NAMED: usize = 6;

impl Grouped {
    fn add(&mut self, at: (usize, String), node: Option<String>, said: String) {
        match self.items.iter_mut().find(|i| i.at == at && i.said == said) {
            Some(i) => i.nodes.extend(node.filter(|n| !i.nodes.contains(n))),
            None => self.items.push(Said { at, said, nodes: node.into_iter().collect() }),
        }
    }

    /// Each item on a line: where, on which nodes (of the `all` there are), what was said.
    fn write(&self, o: &mut String, heading: &str, all: usize) {
        if self.items.is_empty() {
            return;
        }
        w!(o, "\n{heading}");
        for Said { at: (_, at), said, nodes } in &self.items {
            let on = match nodes.len() {
                0 => String::new(),
                n if n == all && n > NODES_NAMED => format!(" on every node ({n})"),
                n if n > NODES_NAMED => {
                    format!(" on {} and {} more", nodes[..NODES_NAMED - 1].join(", "), n - (NODES_NAMED - 1))
                }
                _ => format!(" on {}", nodes.join(", ")),
            };
            w!(o, "  {at}{on}: {said}");
        }
    }
}

/// One value on one line, its control characters escaped (a name can hold any byte).
fn safe(s: &str) -> String {
    s.escape_debug().to_string().replace("\\\"", "\"").replace("\\'", "'")
}

/// Each node's cell for the image: the verdict of the tree that applies (`ok`, `ok, 1
/// warning`, `refused: CODE`), each tree's where several do (`tree: verdict`), `n/a` where
/// none does, `unreadable: CODE` for an image not read.
fn verdicts(r: &Row, shape: &Shape) -> Vec<String> {
    let several = applicable_trees(r).len() > 1;
    (0..shape.nodes)
        .map(|n| {
            if let Some(e) = &r.error {
                return format!("unreadable: {}", e.code);
            }
            let said: Vec<String> = shape
                .of_node(n)
                .filter_map(|(i, c)| Some((r.cells.get(i)?, c)))
                .filter(|(cell, _)| cell.verdict != Verdict::NotApplicable)
                .map(|(cell, c)| {
                    let word = word(cell);
                    let tree = cell.family.as_deref().unwrap_or(super::tree_name(&c.tree));
                    if several {
                        format!("{tree}: {word}")
                    } else {
                        word
                    }
                })
                .collect();
            if said.is_empty() {
                "n/a".to_string()
            } else {
                said.join(", ")
            }
        })
        .collect()
}

fn word(cell: &super::Cell) -> String {
    let accepted = match cell.accepted.len() {
        0 => String::new(),
        n => format!(", {n} accepted"),
    };
    match (&cell.error, cell.warnings.len()) {
        (Some(e), _) => format!("refused: {}", e.code),
        (None, 0) => format!("ok{accepted}"),
        (None, 1) => format!("ok, 1 warning{accepted}"),
        (None, n) => format!("ok, {n} warnings{accepted}"),
    }
}

fn aligned(o: &mut String, table: &[Vec<String>]) {
    let n = table.first().map_or(0, Vec::len);
    let widths: Vec<usize> =
        (0..n).map(|i| table.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0)).collect();
    for r in table {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        w!(o, "{}", line.join("   ").trim_end());
    }
}

/// What an image is: its digests and layers, its Python, ROCm and engines.
fn about(r: &Row) -> String {
    if let Some(e) = &r.error {
        return format!("not read: error[{}]: {}", e.code, e.message);
    }
    let f = &r.facts;
    let mut parts = Vec::new();
    if let Some(i) = &r.identity {
        let n = i.layers.len();
        parts.push(format!("config {}, {n} layer{}", i.config_digest, if n == 1 { "" } else { "s" }));
    }
    let s = |v: &Value| v.as_str().map(str::to_string);
    parts.push(s(&f["python"]["version"]).map_or("no python".into(), |v| format!("python {v}")));
    let hip = f["rocm"]["hip"]["major"].as_u64();
    parts.push(match (hip, s(&f["rocm"]["version"])) {
        (Some(h), Some(v)) => format!("HIP ABI {h}, ROCm {v}"),
        (Some(h), None) => format!("HIP ABI {h}"),
        _ => "no ROCm".into(),
    });
    for e in f["engines"].as_array().into_iter().flatten() {
        parts.push(format!("{} {}", s(&e["name"]).unwrap_or_default(), s(&e["version"]).unwrap_or_default()));
    }
    parts.join("; ")
}

/// Per image its identity, facts and a verdict per tree × node with the plan or the refusal,
/// its warnings and what was accepted; the nodes and trees; the report's schema version and
/// the tool that wrote it (docs/command-line.md documents the shape).
pub(crate) fn json(rows: &[Row], shape: &Shape, exit: i32, fail_on: FailOn) -> String {
    let images: Vec<Value> = rows.iter().map(|r| json_row(r, &shape.columns, fail_on)).collect();
    let columns: Vec<&str> = shape.columns.iter().map(Column::name).collect();
    let nodes: Vec<Value> = shape
        .node_sources
        .iter()
        .zip(&shape.node_gpus)
        .map(|((l, s), g)| json!({ "label": l, "source": s, "gpus": g }))
        .collect();
    let mut trees: Vec<&str> = shape.columns.iter().map(|c| super::tree_name(&c.tree)).collect();
    trees.dedup();
    let fail_on = if fail_on == FailOn::Warn { "warn" } else { "refusal" };
    let report = json!({
        "schema_version": SCHEMA_VERSION,
        "tool": tool(),
        "fail_on": fail_on,
        "columns": columns,
        "nodes": nodes,
        "unjudged_nodes": shape.unjudged.iter().map(|(n, why)| json!({ "node": n, "why": why })).collect::<Vec<_>>(),
        "trees": trees,
        "images": images,
        "exit_code": exit,
    });
    format!("{report:#}\n")
}

fn json_row(r: &Row, columns: &[Column], fail_on: FailOn) -> Value {
    let Some(e) = &r.error else {
        let cells: Vec<Value> = r
            .cells
            .iter()
            .zip(columns)
            .map(|(cell, c)| {
                let findings: Vec<Value> = cell
                    .warnings
                    .iter()
                    .map(|(code, m)| json!({ "level": "warn", "code": code, "message": m }))
                    .collect();
                let accepted: Vec<Value> =
                    cell.accepted.iter().map(|(code, m, by)| json!({ "code": code, "message": m, "by": by })).collect();
                json!({
                    "column": c.name(),
                    "node": c.node_label(),
                    "tree": cell.family.as_deref().unwrap_or(super::tree_name(&c.tree)),
                    "family": cell.family,
                    "verdict": cell.verdict.name(),
                    "fails": cell.fails(fail_on),
                    "error": cell.error,
                    "findings": findings,
                    "accepted": accepted,
                    "seconds": cell.seconds,
                    "plan": cell.plan,
                })
            })
            .collect();
        let id = r.identity.as_ref();
        return json!({
            "image": r.image,
            "names": id.map(|i| i.names.clone()),
            "verdict": if r.none_applies() { "no-applicable-tree" } else { "read" },
            "error": r.no_tree(),
            "manifest_digest": id.and_then(|i| i.manifest_digest.clone()),
            "config_digest": id.map(|i| i.config_digest.clone()),
            "layers": id.map(|i| i.layers.clone()),
            "seconds": r.seconds,
            "facts": r.facts,
            "families": cells,
        });
    };
    json!({ "image": r.image, "verdict": "unreadable", "error": e, "seconds": r.seconds })
}

/// JUnit XML as CI systems read it (Jenkins, GitLab, GitHub's reporters; the attributes Jenkins'
/// JUnit schema, xunit-plugin's junit-10.xsd, allows: `skipped` on a suite only, no properties
/// in a case): `<testsuites>`, a `<testsuite>` per image (named by the names its archive gives
/// it) with its digests, the tool and the schema version as properties, a `<testcase>` per
/// tree × node named `TREE on NODE` (a CI system keys its history by it), its time, and its
/// node and tree first in its `<system-out>`; a failed cell is a `<failure>`, a tree that does
/// not apply `<skipped>`, an image that cannot be read an `<error>` in each case, an image no
/// tree applies to a failed case of its own; each case's warnings and accepted findings in its
/// `<system-out>`.
pub(crate) fn junit(rows: &[Row], shape: &Shape, fail_on: FailOn) -> String {
    let columns = &shape.columns;
    let unjudged = shape.unjudged.len();
    let failed: usize = rows.iter().map(|r| suite_failures(r, fail_on)).sum::<usize>()
        + if fail_on == FailOn::Warn { unjudged } else { 0 };
    let errors = rows.iter().filter(|r| r.error.is_some()).count() * columns.len();
    let tests: usize = rows.iter().map(|r| columns.len() + usize::from(r.none_applies())).sum::<usize>() + unjudged;
    let time: f64 = rows.iter().map(|r| r.seconds).sum();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w!(
        o,
        "<testsuites name=\"infera-exec check\" tests=\"{tests}\" failures=\"{failed}\" errors=\"{errors}\" time=\"{time:.3}\">"
    );
    for (r, name) in rows.iter().zip(suite_names(rows)) {
        suite(&mut o, r, &name, shape, fail_on);
    }
    unjudged_suite(&mut o, shape, fail_on);
    w!(o, "</testsuites>");
    o
}

/// The nodes no node type holds: a case each, skipped (a failure under `--fail-on warn`).
fn unjudged_suite(o: &mut String, shape: &Shape, fail_on: FailOn) {
    let n = shape.unjudged.len();
    if n == 0 {
        return;
    }
    let (failures, skipped) = if fail_on == FailOn::Warn { (n, 0) } else { (0, n) };
    w!(
        o,
        "  <testsuite name=\"nodes not judged\" tests=\"{n}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"0.000\">"
    );
    for (name, why) in &shape.unjudged {
        w!(o, "    <testcase classname=\"nodes not judged\" name=\"{}\" time=\"0.000\">", xml(name));
        match fail_on {
            FailOn::Warn => w!(o, "      <failure type=\"node-not-judged\" message=\"{}\"/>", xml(why)),
            FailOn::Refusal => w!(o, "      <skipped message=\"not judged: {}\"/>", xml(why)),
        }
        w!(o, "    </testcase>");
    }
    w!(o, "  </testsuite>");
}

fn suite_failures(r: &Row, fail_on: FailOn) -> usize {
    r.cells.iter().filter(|c| c.fails(fail_on)).count() + usize::from(r.none_applies())
}

fn suite(o: &mut String, r: &Row, name: &str, shape: &Shape, fail_on: FailOn) {
    let columns = &shape.columns;
    let name = xml(name);
    let failures = suite_failures(r, fail_on);
    let skipped = r.cells.iter().filter(|c| c.verdict == Verdict::NotApplicable).count();
    let errors = if r.error.is_some() { columns.len() } else { 0 };
    let tests = columns.len() + usize::from(r.none_applies());
    w!(
        o,
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{:.3}\">",
        r.seconds
    );
    properties(o, r);
    for (i, c) in columns.iter().enumerate() {
        let source = c.node.as_ref().and_then(|(n, _)| shape.node_sources.get(*n)).map(|(_, s)| s.as_str());
        case(o, &name, r, r.cells.get(i), (c, source), fail_on);
    }
    if let Some(e) = r.no_tree() {
        w!(o, "    <testcase classname=\"{name}\" name=\"any tree\" time=\"0.000\">");
        w!(o, "      <failure type=\"{}\" message=\"{}\">{}</failure>", xml(&e.code), xml(&e.message), xml(&body(&e)));
        w!(o, "    </testcase>");
    }
    w!(o, "  </testsuite>");
}

fn properties(o: &mut String, r: &Row) {
    w!(o, "    <properties>");
    let mut props = vec![("tool", tool()), ("schema_version", SCHEMA_VERSION.to_string()), ("image", r.image.clone())];
    if let Some(i) = &r.identity {
        let none = "none: a docker-archive of the legacy layout records no manifest (its image is named by the config's digest)";
        props.push(("manifest_digest", i.manifest_digest.clone().unwrap_or_else(|| none.into())));
        props.push(("config_digest", i.config_digest.clone()));
        props.push(("layers", i.layers.len().to_string()));
    }
    for (k, v) in props {
        w!(o, "      <property name=\"{k}\" value=\"{}\"/>", xml(&v));
    }
    w!(o, "    </properties>");
}

fn body(e: &Refusal) -> String {
    format!("exit code {}\n{}", e.exit.code(), e.hint.as_deref().unwrap_or(""))
}

/// One case: the cell of column `c` (with its node's source) for the image.
fn case(
    o: &mut String,
    suite: &str,
    r: &Row,
    cell: Option<&super::Cell>,
    (c, source): (&Column, Option<&str>),
    fail_on: FailOn,
) {
    let tree = cell.and_then(|c| c.family.as_deref()).unwrap_or(super::tree_name(&c.tree));
    let name = match c.node_label() {
        Some(n) => format!("{tree} on {n}"),
        None => tree.to_string(),
    };
    let time = cell.map_or(0.0, |c| c.seconds);
    w!(o, "    <testcase classname=\"{suite}\" name=\"{}\" time=\"{time:.3}\">", xml(&name));
    match (&r.error, cell) {
        (Some(e), _) => {
            w!(o, "      <error type=\"{}\" message=\"{}\">{}</error>", xml(&e.code), xml(&e.message), xml(&body(e)))
        }
        (None, Some(cell)) => match (cell.verdict, &cell.error) {
            (Verdict::NotApplicable, Some(e)) => {
                w!(o, "      <skipped message=\"not applicable: {}\"/>", xml(&e.message))
            }
            (Verdict::Refused, Some(e)) => {
                w!(
                    o,
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>",
                    xml(&e.code),
                    xml(&e.message),
                    xml(&body(e))
                )
            }
            _ if cell.fails(fail_on) => {
                let (code, m) = &cell.warnings[0];
                let n = cell.warnings.len();
                w!(
                    o,
                    "      <failure type=\"{}\" message=\"{n} warning(s) and --fail-on warn: {}\"/>",
                    xml(code),
                    xml(m)
                )
            }
            _ => {}
        },
        (None, None) => {}
    }
    let mut out = String::new();
    if let Some(n) = c.node_label() {
        let _ = writeln!(out, "node: {n}{}", source.map_or(String::new(), |s| format!(" ({s})")));
    }
    let _ = writeln!(out, "tree: {tree}");
    for cell in cell.into_iter() {
        for (code, m) in &cell.warnings {
            let _ = writeln!(out, "warn[{code}]: {m}");
        }
        for (code, m, by) in &cell.accepted {
            let _ = writeln!(out, "accepted[{code}] by {by}: {m}");
        }
    }
    w!(o, "      <system-out>{}</system-out>", xml(&out));
    w!(o, "    </testcase>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::check::Cell;
    use crate::plan::select::TreeChoice;
    use infera_core::error::Exit;

    fn refusal(code: &str, exit: Exit) -> Refusal {
        Refusal { code: code.into(), message: format!("{code} <said> & \"quoted\""), hint: Some("do x".into()), exit }
    }

    fn cell(family: &str, error: Option<Refusal>, verdict: Verdict, warned: bool) -> Cell {
        let warnings =
            if warned { vec![("model-unreadable".to_string(), "cannot read it".to_string())] } else { vec![] };
        let plan = json!({ "family": family });
        Cell { family: Some(family.into()), plan, error, verdict, warnings, accepted: vec![], seconds: 0.25 }
    }

    fn na() -> Option<Refusal> {
        Some(refusal("family-mismatch", Exit::Unsupported))
    }

    /// The two trees on each node given (none: one set of columns, no node).
    fn shape(nodes: &[&str]) -> Shape {
        let trees = ["rocm7-py312", "rocm7-py310"].map(|t| TreeChoice::Judged(t.to_string()));
        let on: Vec<Option<(usize, String)>> = match nodes {
            [] => vec![None],
            n => n.iter().enumerate().map(|(i, l)| Some((i, l.to_string()))).collect(),
        };
        let columns = on.iter().flat_map(|n| trees.iter().map(|t| Column::new(t.clone(), n.clone()))).collect();
        let node_sources = nodes.iter().map(|l| (l.to_string(), format!("{l}:8 (a part)"))).collect();
        let missing = |_: &std::path::Path| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let part = |l: &&str| {
            infera_facts::fleet::from_spec(l, missing).ok().map(|g| crate::commands::check::GpuSummary::of(&g.nodes[0]))
        };
        let node_gpus = nodes.iter().map(|l| part(l).unwrap_or_default()).collect();
        Shape { columns, nodes: on.len(), trees: 2, node_sources, node_gpus, unjudged: vec![], selectors: vec![] }
    }

    fn row(image: &str, identity: Option<infera_core::image::Identity>, facts: Value, cells: Vec<Cell>) -> Row {
        Row { image: image.into(), seconds: 1.5, identity, facts, engine: None, cells, error: None }
    }

    fn rows() -> Vec<Row> {
        let identity = infera_core::image::Identity {
            reference: "a.tar".into(),
            manifest_digest: Some("sha256:m".into()),
            config_digest: "sha256:c".into(),
            names: vec!["localhost/vllm:0.28".into()],
            layers: vec!["sha256:l1".into(), "sha256:l2".into()],
        };
        let facts = json!({ "python": { "version": "3.12.3" }, "rocm": { "version": "7.0.2", "hip": { "major": 7 } },
                            "engines": [{ "name": "vllm", "version": "0.9.1" }] });
        let ok = row(
            "a.tar",
            Some(identity),
            facts.clone(),
            vec![
                cell("rocm7-py312", None, Verdict::Ok, true),
                cell("rocm7-py310", na(), Verdict::NotApplicable, false),
            ],
        );
        let refused = row(
            "c.tar",
            None,
            facts,
            vec![
                cell("rocm7-py312", Some(refusal("engine-version", Exit::Unsupported)), Verdict::Refused, false),
                cell("rocm7-py310", na(), Verdict::NotApplicable, false),
            ],
        );
        let facts311 = json!({ "python": { "version": "3.11.9" }, "rocm": { "hip": { "major": 7 } } });
        let none = row(
            "d.tar",
            None,
            facts311,
            vec![
                cell("rocm7-py312", na(), Verdict::NotApplicable, false),
                cell("rocm7-py310", na(), Verdict::NotApplicable, false),
            ],
        );
        let bad = Row {
            image: "b<&>.tar".into(),
            seconds: 0.5,
            identity: None,
            facts: Value::Null,
            engine: None,
            cells: Vec::new(),
            error: Some(refusal("image-digest-mismatch", Exit::Invalid)),
        };
        vec![ok, refused, none, bad]
    }

    #[test]
    fn the_table_names_each_cell_each_refusal_and_each_warning_in_full() {
        let (rows, shape) = (rows(), shape(&[]));
        let t = text(&rows, &shape, FailOn::Refusal, 100);
        assert_eq!(
            t,
            "infera-exec check: 4 images (2 trees): 3 of 4 applicable cells refused\n\n\
             IMAGE                 verdict\n\
             a.tar (rocm7-py312)   ok, 1 warning\n\
             c.tar (rocm7-py312)   refused: engine-version\n\
             d.tar                 n/a\n\
             b<&>.tar              unreadable: image-digest-mismatch\n\n\
             images:\n  \
             a.tar: config sha256:c, 2 layers; python 3.12.3; HIP ABI 7, ROCm 7.0.2; vllm 0.9.1\n  \
             c.tar: python 3.12.3; HIP ABI 7, ROCm 7.0.2; vllm 0.9.1\n  \
             d.tar: python 3.11.9; HIP ABI 7\n  \
             b<&>.tar: not read: error[image-digest-mismatch]: image-digest-mismatch <said> & \"quoted\"\n\n\
             refusals:\n  \
             c.tar with rocm7-py312: error[engine-version]: engine-version <said> & \"quoted\"\n    hint: do x\n  \
             b<&>.tar: error[image-digest-mismatch]: image-digest-mismatch <said> & \"quoted\"\n    hint: do x\n  \
             d.tar: error[no-applicable-tree]: no tree of this overlay is built for this image's CPython and HIP ABI (CPython 3.11.9, HIP ABI 7): it cannot run with it\n    \
             hint: build the overlay with a tree for this ABI, or run an image of an ABI it has\n\n\
             warnings:\n  \
             a.tar with rocm7-py312: warn[model-unreadable]: cannot read it\n"
        );
        let warn = text(&rows, &shape, FailOn::Warn, 100);
        assert!(warn.contains("warnings (failing: --fail-on warn):"), "{warn}");
        assert!(warn.starts_with("infera-exec check: 4 images (2 trees): 4 of 4 applicable cells failed\n"), "{warn}");
    }

    /// Each image's cells on three nodes, the tree that applies named once.
    fn on_nodes(cells: [(&str, Option<Refusal>); 3], other_tree: &str) -> Vec<Cell> {
        cells
            .into_iter()
            .flat_map(|(tree, e)| {
                let v = if e.is_some() { Verdict::Refused } else { Verdict::Ok };
                [cell(tree, e, v, false), cell(other_tree, na(), Verdict::NotApplicable, false)]
            })
            .collect()
    }

    #[test]
    fn at_fleet_size_columns_are_nodes_and_each_refusal_names_its_nodes() {
        let shape = shape(&["mi300x", "mi355x", "gpu-node-17"]);
        let vram = || Some(refusal("weights-exceed-vram", Exit::Refused));
        let facts = json!({ "python": { "version": "3.12.3" } });
        let kimi = [("rocm7-py312", vram()), ("rocm7-py312", None), ("rocm7-py312", vram())];
        let kimi = row("kimi.tar", None, facts.clone(), on_nodes(kimi, "rocm7-py310"));
        let fine: [(&str, Option<Refusal>); 3] = [("rocm7-py312", None), ("rocm7-py312", None), ("rocm7-py312", None)];
        let ok = row("qwen.tar", None, facts, on_nodes(fine, "rocm7-py310"));
        let t = text(&[kimi, ok], &shape, FailOn::Refusal, 100);
        assert!(
            t.starts_with("infera-exec check: 2 images × 3 nodes (2 trees): 2 of 6 applicable cells refused\n\n"),
            "{t}"
        );
        assert!(t.contains("IMAGE                    mi300x                         mi355x   gpu-node-17\n"), "{t}");
        assert!(
            t.contains(
                "kimi.tar (rocm7-py312)   refused: weights-exceed-vram   ok       refused: weights-exceed-vram\n"
            ),
            "{t}"
        );
        assert!(t.contains("\nnodes:\n  mi300x: mi300x:8 (a part)\n"), "{t}");
        assert!(
            t.contains("  kimi.tar with rocm7-py312 on mi300x, gpu-node-17: error[weights-exceed-vram]: "),
            "one refusal, said once, naming its nodes: {t}"
        );
        // A narrow terminal: the node columns in blocks, each with the images.
        let narrow = text(&rows_again(), &shape, FailOn::Refusal, 60);
        let tables: Vec<&str> = narrow.split("\n\nnodes:").next().unwrap().split("\n\n").skip(1).collect();
        assert!(tables.len() >= 2, "{narrow}");
        assert!(tables.iter().all(|b| b.lines().all(|l| l.chars().count() <= 60)), "{narrow}");
        assert!(tables.iter().all(|b| b.starts_with("IMAGE ")), "{narrow}");
    }

    fn rows_again() -> Vec<Row> {
        let facts = json!({ "python": { "version": "3.12.3" } });
        let e = || Some(refusal("weights-exceed-vram", Exit::Refused));
        vec![row(
            "kimi.tar",
            None,
            facts,
            on_nodes([("rocm7-py312", e()), ("rocm7-py312", e()), ("rocm7-py312", e())], "rocm7-py310"),
        )]
    }

    #[test]
    fn json_has_per_image_identity_facts_verdicts_and_warnings() {
        let (rows, shape) = (rows(), shape(&[]));
        let v: Value = serde_json::from_str(&json(&rows, &shape, 65, FailOn::Refusal)).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert!(v["tool"].as_str().unwrap().starts_with("infera-exec "));
        assert_eq!(v["columns"], json!(["rocm7-py312", "rocm7-py310"]));
        assert_eq!(v["trees"], json!(["rocm7-py312", "rocm7-py310"]));
        assert_eq!(v["exit_code"], 65);
        let a = &v["images"][0];
        assert_eq!(a["names"], json!(["localhost/vllm:0.28"]));
        assert_eq!(a["config_digest"], "sha256:c");
        assert_eq!(a["manifest_digest"], "sha256:m");
        assert_eq!(a["layers"], json!(["sha256:l1", "sha256:l2"]));
        assert_eq!(a["facts"]["python"]["version"], "3.12.3");
        assert_eq!(a["families"][0]["verdict"], "ok");
        assert_eq!(a["families"][0]["node"], Value::Null);
        assert_eq!(a["families"][0]["tree"], "rocm7-py312");
        assert_eq!(a["families"][0]["fails"], false);
        assert_eq!(a["families"][0]["findings"][0]["code"], "model-unreadable");
        assert_eq!(a["families"][1]["verdict"], "not-applicable");
        assert_eq!(a["families"][1]["error"]["code"], "family-mismatch");
        assert_eq!(v["images"][1]["families"][0]["verdict"], "refused");
        assert_eq!(v["images"][1]["families"][0]["error"]["exit_code"], 69);
        assert_eq!(v["images"][2]["verdict"], "no-applicable-tree");
        assert_eq!(v["images"][2]["error"]["code"], "no-applicable-tree");
        assert_eq!(v["images"][3]["verdict"], "unreadable");
        assert_eq!(v["images"][3]["error"]["exit_code"], 65);
        let warn: Value = serde_json::from_str(&json(&rows, &shape, 1, FailOn::Warn)).unwrap();
        assert_eq!(warn["images"][0]["families"][0]["fails"], true);
        let nodes: Value =
            serde_json::from_str(&json(&rows_again(), &super::tests::shape(&["mi300x", "b", "c"]), 1, FailOn::Warn))
                .unwrap();
        let gpus = json!({ "count": 8, "gfx": ["gfx942"], "vram": [206_141_652_992_u64], "device_ids": ["74a1"] });
        assert_eq!(nodes["nodes"][0], json!({ "label": "mi300x", "source": "mi300x:8 (a part)", "gpus": gpus }));
        assert_eq!(nodes["images"][0]["families"][0]["column"], "rocm7-py312 on mi300x");
        assert_eq!(nodes["images"][0]["families"][0]["node"], "mi300x");
    }

    #[test]
    fn junit_is_xml_with_a_suite_per_image_a_case_per_tree_and_node_skips_and_warnings() {
        let (rows, shape) = (rows(), shape(&[]));
        let x = junit(&rows, &shape, FailOn::Refusal);
        let doc = roxmltree::Document::parse(&x).unwrap_or_else(|e| panic!("{e}\n{x}"));
        let top = doc.root_element();
        assert_eq!(top.tag_name().name(), "testsuites");
        let attrs = |n: roxmltree::Node, names: &[&str]| {
            names.iter().map(|a| n.attribute(*a).map(str::to_string)).collect::<Vec<_>>()
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(attrs(top, &["tests", "failures", "errors", "skipped"]), [s("9"), s("2"), s("2"), None]);
        let suites: Vec<_> = top.children().filter(|n| n.is_element()).collect();
        assert_eq!(suites.len(), 4);
        assert_eq!(suites[0].attribute("name"), Some("localhost/vllm:0.28"), "named by the archive's own name");
        assert_eq!(suites[0].attribute("time"), Some("1.500"));
        assert_eq!(suites[3].attribute("name"), Some("b<&>.tar"), "names are escaped and read back whole");
        let cases = |i: usize| suites[i].descendants().filter(|n| n.has_tag_name("testcase")).collect::<Vec<_>>();
        let a = cases(0);
        assert_eq!(a.iter().map(|c| c.attribute("name").unwrap()).collect::<Vec<_>>(), ["rocm7-py312", "rocm7-py310"]);
        assert_eq!(a[0].attribute("time"), Some("0.250"));
        let out = a[0].first_element_child().unwrap();
        assert_eq!(
            (out.tag_name().name(), out.text()),
            ("system-out", Some("tree: rocm7-py312\nwarn[model-unreadable]: cannot read it\n"))
        );
        assert_eq!(a[1].first_element_child().unwrap().tag_name().name(), "skipped");
        let failure = cases(1)[0].first_element_child().unwrap();
        assert_eq!(failure.tag_name().name(), "failure");
        assert_eq!(failure.attribute("type"), Some("engine-version"));
        assert_eq!(failure.attribute("message"), Some("engine-version <said> & \"quoted\""));
        assert_eq!(failure.text(), Some("exit code 69\ndo x"));
        let d = cases(2);
        assert_eq!(d.len(), 3, "an image no tree applies to fails a case of its own");
        assert_eq!(d[2].first_element_child().unwrap().attribute("type"), Some("no-applicable-tree"));
        let props: Vec<_> = suites[0].descendants().filter(|n| n.has_tag_name("property")).collect();
        let prop = |k: &str| props.iter().find(|p| p.attribute("name") == Some(k)).and_then(|p| p.attribute("value"));
        assert_eq!(prop("config_digest"), Some("sha256:c"));
        assert_eq!(prop("schema_version"), Some("1"));
        assert!(prop("tool").unwrap().starts_with("infera-exec "));
        let errors: Vec<_> = suites[3].descendants().filter(|n| n.has_tag_name("error")).collect();
        assert_eq!(errors.len(), 2, "each tree of an unread image is an error");
        let warn = junit(&rows, &shape, FailOn::Warn);
        assert!(
            warn.contains("<failure type=\"model-unreadable\" message=\"1 warning(s) and --fail-on warn"),
            "{warn}"
        );
        // On nodes: a case per tree × node, each named by both, its node and tree said first.
        let x = junit(&rows_again(), &super::tests::shape(&["mi300x", "mi355x"]), FailOn::Refusal);
        let doc = roxmltree::Document::parse(&x).unwrap();
        let names: Vec<&str> =
            doc.descendants().filter(|n| n.has_tag_name("testcase")).filter_map(|c| c.attribute("name")).collect();
        assert_eq!(
            names,
            ["rocm7-py312 on mi300x", "rocm7-py310 on mi300x", "rocm7-py312 on mi355x", "rocm7-py310 on mi355x"]
        );
        let out = doc.descendants().find(|n| n.has_tag_name("system-out")).and_then(|n| n.text()).unwrap();
        assert!(out.starts_with("node: mi300x (mi300x:8 (a part))\ntree: rocm7-py312\n"), "{out}");
    }

    #[test]
    fn xml_escapes_markup_and_names_what_xml_cannot_carry() {
        assert_eq!(xml("a<b>&\"c'\u{1}\u{7f}é"), "a&lt;b&gt;&amp;&quot;c&apos;\\u{1}\u{7f}é");
        roxmltree::Document::parse(&format!("<a b=\"{}\">{}</a>", xml("\u{0}\u{1b}x"), xml("\u{fffe}"))).unwrap();
    }
}
