//! `check` over images × trees, for CI: `--image` repeated, `--family all`, or `--output
//! junit`. Each image is read once (its archive, or `--root`) and its facts gathered once;
//! each cell is the plan `check` makes for that image with that tree, ok or refused with its
//! code. A column of `--family all` is judged, not forced: a tree built for another Python or
//! HIP ABI does not apply to the image (`not-applicable`, skipped in JUnit), and never fails.
//!
//! Exit: the one cell's own code for one image × one tree; else the image's code (65, 66) when
//! an image cannot be read; 1 when an applicable cell is refused (or, with `--fail-on warn`,
//! warned), or an image has no applicable tree at all; else 0.

pub(crate) mod affinity;
pub(crate) mod render;

use serde_json::Value;

use crate::answer::{emit, refuse, refuse_in};
use crate::choices::FailOn;
use crate::choices::Role;
use crate::cli::{Output, ALL_FAMILIES};
use crate::gather::{load_overlay, Gathered, GivenNodes};
use crate::plan::select::TreeChoice;
use crate::request::Request;
use infera_core::error::{Exit, Refusal};
use infera_facts::envvars::Env;

/// The row's facts name no GPU count: each cell's plan has its own (its node's).
static NO_GPUS: Result<infera_facts::gpus::Gpus, infera_facts::gpus::GpuError> =
    Ok(infera_facts::gpus::Gpus { count: None, source: infera_facts::gpus::GpuSource::Nothing });

/// The exit code when several cells were judged and one was refused.
pub(crate) const CELL_REFUSED: i32 = 1;

/// Does the request ask for the matrix rather than one plan?
pub(crate) fn wanted(req: &Request) -> bool {
    req.role == Role::Check
        && (req.image.image.len() > 1
            || req.node.len() > 1
            || req.family.as_deref() == Some(ALL_FAMILIES)
            || matches!(req.output, Output::Junit | Output::Affinity))
}

/// A column: the tree a cell is planned with, on the node (`--node`'s, in order; none given:
/// this node at root `/`, else none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    pub tree: TreeChoice,
    /// The index of the node in `--node`, and its label (its name, or its part).
    pub node: Option<(usize, String)>,
    name: String,
}

impl Column {
    pub(crate) fn new(tree: TreeChoice, node: Option<(usize, String)>) -> Column {
        let name = match &node {
            Some((_, label)) => format!("{} on {label}", tree_name(&tree)),
            None => tree_name(&tree).to_string(),
        };
        Column { tree, node, name }
    }

    /// `rocm7-py312 on mi300x`: what a CI report names a cell's case by.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The node's label (None: no node was given).
    pub(crate) fn node_label(&self) -> Option<&str> {
        self.node.as_ref().map(|(_, l)| l.as_str())
    }
}

/// The tree a column judges, as named.
pub(crate) fn tree_name(t: &TreeChoice) -> &str {
    match t {
        TreeChoice::Matching => "matching tree",
        TreeChoice::Forced(f) | TreeChoice::Judged(f) => f,
    }
}

/// One image's row: what it is, its facts, and a cell per column; or why it cannot be read.
pub(crate) struct Row {
    /// The reference given (`--image`), or the root directory.
    pub image: String,
    /// How long reading the image and judging its cells took, in seconds.
    pub seconds: f64,
    pub identity: Option<infera_core::image::Identity>,
    pub facts: Value,
    /// The image's engine, when it has exactly one.
    pub engine: Option<infera_facts::engines::Engine>,
    pub cells: Vec<Cell>,
    pub error: Option<Refusal>,
}

/// One image with one tree on one node.
pub(crate) struct Cell {
    /// The tree planned with (None: none was selected).
    pub family: Option<String>,
    /// The plan as `check --output json` prints it, without the image's facts (the row's);
    /// kept only for a JSON or YAML report.
    pub plan: Value,
    pub error: Option<Refusal>,
    pub verdict: Verdict,
    /// The plan's warnings, `(code, message)`: reported for a cell that passes too.
    pub warnings: Vec<(String, String)>,
    /// The warnings and refusals the pod accepts (`--allow`): `(code, message, why)`.
    pub accepted: Vec<(String, String, String)>,
    pub seconds: f64,
}

/// What a cell says about its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ok,
    Refused,
    /// A tree of `--family all` built for another CPython or HIP ABI than the image's.
    NotApplicable,
}

impl Verdict {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Refused => "refused",
            Verdict::NotApplicable => "not-applicable",
        }
    }
}

impl Cell {
    /// Does this cell fail the gate?
    pub(crate) fn fails(&self, fail_on: FailOn) -> bool {
        match self.verdict {
            Verdict::Refused => true,
            Verdict::Ok => fail_on == FailOn::Warn && !self.warnings.is_empty(),
            Verdict::NotApplicable => false,
        }
    }
}

impl Row {
    /// An image read whose every cell is not applicable: no tree of the overlay runs it.
    pub(crate) fn none_applies(&self) -> bool {
        self.error.is_none() && !self.cells.is_empty() && self.cells.iter().all(|c| c.verdict == Verdict::NotApplicable)
    }

    /// Why the image cannot run with this overlay, when no tree applies.
    pub(crate) fn no_tree(&self) -> Option<Refusal> {
        self.none_applies().then(|| MatrixError::NoTree { abi: render::abi(&self.facts) }.into())
    }
}

/// An image the matrix judged as a whole.
#[derive(Debug, Clone, PartialEq, thiserror::Error, infera_exec_derive::Refuse)]
pub(crate) enum MatrixError {
    #[error("no tree of this overlay is built for this image's CPython and HIP ABI ({abi}): it cannot run with it")]
    #[refuse(
        code = "no-applicable-tree",
        exit = Unsupported,
        hint = "build the overlay with a tree for this ABI, or run an image of an ABI it has"
    )]
    NoTree { abi: String },
    #[error(
        "`{first}` runs {first_engine} and `{other}` runs {other_engine}, and the args after `--` are one list for \
         every image, which {other_engine}'s parser refuses: {why}"
    )]
    #[refuse(
        code = "matrix-engines-differ",
        exit = Usage,
        hint = format!("one check per engine, each with its own args: `infera-exec check --image {first} … -- ARGS` with {first_engine}'s options, and `infera-exec check --image {other} … -- ARGS` with {other_engine}'s")
    )]
    EnginesDiffer { first: String, first_engine: &'static str, other: String, other_engine: &'static str, why: String },
}

/// Images of different engines judged with one argument list that one of them refuses
/// (`--max-num-seqs` is vLLM's, not sglang's): said as that, with the command to run per engine.
fn engines_differ(req: &Request, rows: &[Row]) -> Option<MatrixError> {
    if req.args.is_empty() || req.engine.is_some() {
        return None;
    }
    let args_refused = |r: &Row| {
        r.cells.iter().filter_map(|c| c.error.as_ref()).find(|e| e.code.starts_with("arg-")).map(|e| e.message.clone())
    };
    let (refused, why) = rows.iter().find_map(|r| args_refused(r).map(|why| (r, why)))?;
    let refused_engine = refused.engine?;
    let (other, other_engine) = rows.iter().find_map(|r| r.engine.filter(|e| *e != refused_engine).map(|e| (r, e)))?;
    Some(MatrixError::EnginesDiffer {
        first: other.image.clone(),
        first_engine: other_engine.name(),
        other: refused.image.clone(),
        other_engine: refused_engine.name(),
        why,
    })
}

/// The matrix's shape: its columns (trees × nodes, node-major), and how many nodes and
/// trees make them.
pub(crate) struct Shape {
    pub columns: Vec<Column>,
    pub nodes: usize,
    pub trees: usize,
    /// The nodes' labels and where each was read from, in `--node`'s order.
    pub node_sources: Vec<(String, String)>,
    /// What each node's GPUs are (their count, gfx, memory, device ids), in the same order.
    pub node_gpus: Vec<GpuSummary>,
    /// The nodes of a Kubernetes `--node` file no node type holds: (name, why).
    pub unjudged: Vec<(String, String)>,
    /// What a node affinity selects each node by (its labeller's labels), or why it cannot.
    pub selectors: Vec<Result<infera_facts::kube::Selector, String>>,
}

impl Shape {
    /// The columns of node `n` (every column when no node was given).
    pub(crate) fn of_node(&self, n: usize) -> impl Iterator<Item = (usize, &Column)> {
        self.columns.iter().enumerate().filter(move |(_, c)| c.node.as_ref().map_or(0, |x| x.0) == n)
    }
}

/// Judge every image with every column, print the matrix, and exit as the module says.
pub(crate) fn run(req: &Request, env: &Env, given: GivenNodes) -> i32 {
    let (overlay, opts) = load_overlay(req);
    let mut shape = match shape(req, &overlay, &given.nodes) {
        Ok(c) => c,
        Err(r) => return refuse_in(&r, req.output, env),
    };
    shape.unjudged = given.unjudged.iter().map(|u| (u.node.clone(), u.why.clone())).collect();
    let sources: Vec<Option<&std::ffi::OsStr>> = match req.image.image.as_slice() {
        [] => vec![None],
        refs => refs.iter().map(|r| Some(r.as_os_str())).collect(),
    };
    let keep_plans = matches!(req.output, Output::Json | Output::Yaml);
    let judge = Judge { req, env, overlay: &overlay, opts: &opts, given: &given.nodes, keep_plans };
    let rows: Vec<Row> = sources.into_iter().map(|s| judge.row(s, &shape.columns)).collect();
    if let Some(e) = engines_differ(req, &rows) {
        return refuse_in(&e.into(), req.output, env);
    }
    let code = exit(&rows, &shape, req.fail_on);
    let width = crate::term::columns(env);
    let out = match req.output {
        Output::Text => render::text(&rows, &shape, req.fail_on, width),
        Output::Json => render::json(&rows, &shape, code, req.fail_on),
        Output::Yaml => crate::report::yaml(&render::json(&rows, &shape, code, req.fail_on)).unwrap_or_default(),
        Output::Junit => render::junit(&rows, &shape, req.fail_on),
        Output::Affinity => match affinity::render(&rows, &shape, req.fail_on) {
            Ok(text) => text,
            Err(r) => return refuse(&r, env),
        },
    };
    if req.output == Output::Affinity {
        return match emit(&out) {
            Ok(()) => Exit::Ok.code(),
            Err(c) => c,
        };
    }
    if let Err(c) = emit(&out) {
        return c;
    }
    if code != 0 {
        let (failed, cells) = counts(&rows, &shape, req.fail_on);
        let what = if req.fail_on == FailOn::Warn { "failed" } else { "refused" };
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("check: {failed} of {cells} applicable cells {what} (exit {code}); the matrix is on stdout\n")
                .as_bytes(),
        );
    }
    code
}

/// The columns: every tree of the overlay for `--family all`, else the one `--family` forces,
/// else the tree each image's ABI selects; each on every `--node` (labels made unique).
fn shape(
    req: &Request,
    overlay: &Result<infera_overlay::overlay::Overlay, Refusal>,
    given: &[std::sync::Arc<infera_facts::node::NodeFacts>],
) -> Result<Shape, Refusal> {
    let trees = match req.family.as_deref() {
        Some(ALL_FAMILIES) => {
            let ov = overlay.as_ref().map_err(Clone::clone)?;
            ov.trees.iter().map(|t| TreeChoice::Judged(t.family.clone())).collect()
        }
        Some(f) => vec![TreeChoice::Forced(f.to_string())],
        None => vec![TreeChoice::Matching],
    };
    let mut labels: Vec<String> = Vec::new();
    for n in given {
        let seen = labels.iter().filter(|l| **l == n.label || l.starts_with(&format!("{} #", n.label))).count();
        labels.push(if seen == 0 { n.label.clone() } else { format!("{} #{}", n.label, seen + 1) });
    }
    let nodes: Vec<Option<(usize, String)>> = match labels.as_slice() {
        [] => vec![None],
        _ => labels.iter().cloned().enumerate().map(Some).collect(),
    };
    let columns = nodes.iter().flat_map(|n| trees.iter().map(|t| Column::new(t.clone(), n.clone()))).collect();
    let node_sources = labels.into_iter().zip(given).map(|(l, n)| (l, n.source.clone())).collect();
    let node_gpus = given.iter().map(|n| GpuSummary::of(n)).collect();
    let selectors = given.iter().map(|n| infera_facts::kube::selector(n)).collect();
    let (nodes, trees) = (nodes.len(), trees.len());
    Ok(Shape { columns, nodes, trees, node_sources, node_gpus, unjudged: Vec::new(), selectors })
}

/// A node's GPUs as the matrix's JSON says them: how many, and each distinct gfx target,
/// memory size and PCI device id among them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct GpuSummary {
    pub count: usize,
    pub gfx: Vec<String>,
    pub vram: Vec<u64>,
    pub device_ids: Vec<String>,
}

impl GpuSummary {
    pub(crate) fn of(node: &infera_facts::node::NodeFacts) -> GpuSummary {
        fn distinct<T: Ord + Clone>(v: impl Iterator<Item = T>) -> Vec<T> {
            v.collect::<std::collections::BTreeSet<T>>().into_iter().collect()
        }
        let g = &node.gpus;
        GpuSummary {
            count: g.len(),
            gfx: distinct(g.iter().filter_map(|g| g.gfx.clone())),
            vram: distinct(g.iter().filter_map(|g| g.vram)),
            device_ids: distinct(g.iter().filter_map(|g| g.device_id.clone())),
        }
    }
}

/// What every row is judged with.
struct Judge<'a> {
    req: &'a Request,
    env: &'a Env,
    overlay: &'a Result<infera_overlay::overlay::Overlay, Refusal>,
    opts: &'a infera_overlay::overlay::LoadOptions,
    given: &'a [std::sync::Arc<infera_facts::node::NodeFacts>],
    keep_plans: bool,
}

impl Judge<'_> {
    /// One image read and judged with every column.
    fn row(&self, image: Option<&std::ffi::OsStr>, columns: &[Column]) -> Row {
        let (req, started) = (self.req, std::time::Instant::now());
        let name = image.map_or_else(|| req.root.display().to_string(), |i| i.to_string_lossy().into_owned());
        let mut g = match Gathered::read(req, self.env, image, self.given) {
            Ok(g) => g,
            Err(e) => {
                let seconds = started.elapsed().as_secs_f64();
                return Row {
                    image: name,
                    seconds,
                    identity: None,
                    facts: Value::Null,
                    engine: None,
                    cells: Vec::new(),
                    error: Some(e),
                };
            }
        };
        g.read_models(req);
        let (node, gpus) = match g.nodes.as_slice() {
            [one] => (one.facts.as_deref(), &one.gpus),
            _ => (None, &NO_GPUS),
        };
        let view = g.facts.view(&g.models, node, gpus);
        let facts = serde_json::to_value(view).unwrap_or(Value::Null);
        let cells = columns.iter().map(|c| self.cell(&g, c)).collect();
        let identity = g.facts.root.image().cloned();
        let engine = match g.facts.engines.as_slice() {
            [one] => Some(one.engine),
            _ => None,
        };
        Row { image: name, seconds: started.elapsed().as_secs_f64(), identity, facts, engine, cells, error: None }
    }

    /// One image with one column's tree on its node.
    fn cell(&self, g: &Gathered, c: &Column) -> Cell {
        let started = std::time::Instant::now();
        let Some(node) = g.nodes.get(c.node.as_ref().map_or(0, |n| n.0)) else {
            let error = Some(infera_core::error::internal("no node for this column"));
            let (warnings, accepted) = (vec![], vec![]);
            return Cell {
                family: None,
                plan: Value::Null,
                error,
                verdict: Verdict::Refused,
                warnings,
                accepted,
                seconds: 0.0,
            };
        };
        let (plan, error, family) = g.with_plan(self.req, &c.tree, node, self.overlay, self.opts, judged);
        let verdict = match &error {
            None => Verdict::Ok,
            Some(e) if matches!(c.tree, TreeChoice::Judged(_)) && e.code == "family-mismatch" => Verdict::NotApplicable,
            Some(_) => Verdict::Refused,
        };
        let findings = plan["findings"].as_array().into_iter().flatten().filter(|f| f["level"] == "warn");
        let text = |f: &Value, k: &str| f[k].as_str().unwrap_or_default().to_string();
        let (accepted, warnings): (Vec<&Value>, Vec<&Value>) = findings.partition(|f| f["accepted"].is_string());
        let warnings = warnings.into_iter().map(|f| (text(f, "code"), text(f, "message"))).collect();
        let accepted =
            accepted.into_iter().map(|f| (text(f, "code"), text(f, "message"), text(f, "accepted"))).collect();
        let seconds = started.elapsed().as_secs_f64();
        let plan = if self.keep_plans { without_facts(plan) } else { Value::Null };
        Cell { family, plan, error, verdict, warnings, accepted, seconds }
    }
}

fn without_facts(mut plan: Value) -> Value {
    if let Some(o) = plan.as_object_mut() {
        o.remove("facts");
    }
    plan
}

/// What failed of what was judged: (failed cells, applicable cells). A cell is an image on a
/// node with a tree that applies; an image not read, or with no tree that applies, is one
/// failed cell on each node.
fn counts(rows: &[Row], shape: &Shape, fail_on: FailOn) -> (usize, usize) {
    let (mut failed, mut cells) = (0, 0);
    for r in rows {
        for n in 0..shape.nodes {
            let here: Vec<&Cell> = shape.of_node(n).filter_map(|(i, _)| r.cells.get(i)).collect();
            let applicable: Vec<&&Cell> = here.iter().filter(|c| c.verdict != Verdict::NotApplicable).collect();
            if r.error.is_some() || applicable.is_empty() {
                (failed, cells) = (failed + 1, cells + 1);
                continue;
            }
            failed += applicable.iter().filter(|c| c.fails(fail_on)).count();
            cells += applicable.len();
        }
    }
    (failed, cells)
}

/// The exit code of the matrix (the module's rule).
fn exit(rows: &[Row], shape: &Shape, fail_on: FailOn) -> i32 {
    if let ([r], 1) = (rows, shape.columns.len()) {
        let cell = r.cells.first();
        if let Some(e) = r.error.as_ref().or_else(|| cell.filter(|c| c.verdict == Verdict::Refused)?.error.as_ref()) {
            return e.exit.code();
        }
    }
    if let Some(e) = rows.iter().find_map(|r| r.error.as_ref()) {
        return e.exit.code();
    }
    // A node not judged is a warning of the fleet's: `--fail-on warn` fails on it.
    if counts(rows, shape, fail_on).0 > 0 || (fail_on == FailOn::Warn && !shape.unjudged.is_empty()) {
        return CELL_REFUSED;
    }
    Exit::Ok.code()
}

/// A cell's plan as JSON, its refusal, and the tree it used.
fn judged(p: &crate::plan::Plan) -> (serde_json::Value, Option<Refusal>, Option<String>) {
    match serde_json::to_value(p) {
        Ok(json) => (json, p.error.clone(), p.family.clone()),
        Err(e) => {
            let r = infera_core::error::internal(&format!("the plan cannot be written as JSON: {e}"));
            (serde_json::Value::Null, Some(r), p.family.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell: `Some(exit)` refused, `None` ok; `W` ok with a warning; `NA` not applicable.
    const W: Option<Exit> = Some(Exit::Ok);
    const NA: Option<Exit> = Some(Exit::Usage);

    fn row(cells: &[Option<Exit>], error: Option<Exit>) -> Row {
        let refusal = |e: Exit| Refusal { code: "x".into(), message: "m".into(), hint: None, exit: e };
        let cell = |e: &Option<Exit>| {
            let (verdict, error, warnings) = match *e {
                None => (Verdict::Ok, None, vec![]),
                W => (Verdict::Ok, None, vec![("w".to_string(), "warned".to_string())]),
                NA => (Verdict::NotApplicable, Some(refusal(Exit::Unsupported)), vec![]),
                Some(x) => (Verdict::Refused, Some(refusal(x)), vec![]),
            };
            Cell { family: None, plan: Value::Null, error, verdict, warnings, accepted: vec![], seconds: 0.0 }
        };
        Row {
            image: "i".into(),
            seconds: 0.0,
            identity: None,
            facts: Value::Null,
            engine: None,
            cells: cells.iter().map(cell).collect(),
            error: error.map(refusal),
        }
    }

    /// `trees` columns on each of `nodes` nodes (none given: one column set, no node).
    fn shape(trees: usize, nodes: usize) -> Shape {
        let node = |n: usize| (nodes > 0).then(|| (n, format!("n{n}")));
        let columns = (0..nodes.max(1))
            .flat_map(|n| (0..trees).map(move |t| Column::new(TreeChoice::Judged(format!("t{t}")), node(n))))
            .collect();
        let node_gpus = vec![];
        Shape {
            columns,
            nodes: nodes.max(1),
            trees,
            node_sources: vec![],
            node_gpus,
            unjudged: vec![],
            selectors: vec![],
        }
    }

    #[test]
    fn one_cell_exits_with_its_own_code_a_matrix_with_1_or_the_archives() {
        let r = FailOn::Refusal;
        assert_eq!(exit(&[row(&[None], None)], &shape(1, 0), r), 0);
        assert_eq!(exit(&[row(&[Some(Exit::Refused)], None)], &shape(1, 0), r), 78);
        assert_eq!(exit(&[row(&[], Some(Exit::Invalid))], &shape(1, 0), r), 65);
        assert_eq!(exit(&[row(&[None, None], None)], &shape(2, 0), r), 0);
        assert_eq!(exit(&[row(&[None, Some(Exit::Refused)], None)], &shape(2, 0), r), CELL_REFUSED);
        assert_eq!(exit(&[row(&[Some(Exit::Unsupported)], None), row(&[None], None)], &shape(1, 0), r), CELL_REFUSED);
        let rows = [row(&[Some(Exit::Unsupported)], None), row(&[], Some(Exit::Invalid))];
        assert_eq!(exit(&rows, &shape(1, 0), r), 65);
        let rows = [row(&[Some(Exit::Unsupported), None], None), row(&[], Some(Exit::Invalid))];
        assert_eq!(counts(&rows, &shape(2, 0), r), (2, 3), "an unread image is one failed cell");
    }

    #[test]
    fn a_cell_is_an_image_on_a_node_with_a_tree_that_applies() {
        let r = FailOn::Refusal;
        // Two trees on three nodes, one tree applying to each image: 3 cells an image.
        let na_ok = [NA, None, NA, Some(Exit::Refused), NA, None];
        let ok_na = [None, NA, None, NA, Some(Exit::Unsupported), NA];
        assert_eq!(counts(&[row(&na_ok, None), row(&ok_na, None)], &shape(2, 3), r), (2, 6));
        assert_eq!(counts(&[row(&[], Some(Exit::Invalid))], &shape(2, 3), r), (3, 3), "unread: a cell per node");
    }

    #[test]
    fn cells_that_do_not_apply_never_fail_but_an_image_none_applies_to_does() {
        let r = FailOn::Refusal;
        assert_eq!(exit(&[row(&[None, NA], None)], &shape(2, 0), r), 0);
        assert_eq!(exit(&[row(&[None, NA], None), row(&[NA, None], None)], &shape(2, 0), r), 0);
        assert_eq!(counts(&[row(&[None, NA], None)], &shape(2, 0), r), (0, 1));
        assert_eq!(exit(&[row(&[NA, NA], None), row(&[None, NA], None)], &shape(2, 0), r), CELL_REFUSED);
        assert_eq!(counts(&[row(&[NA, NA], None)], &shape(2, 0), r), (1, 1));
        assert_eq!(exit(&[row(&[NA], None)], &shape(1, 0), r), CELL_REFUSED);
    }

    #[test]
    fn a_warning_fails_only_with_fail_on_warn() {
        assert_eq!(exit(&[row(&[W, NA], None)], &shape(2, 0), FailOn::Refusal), 0);
        assert_eq!(exit(&[row(&[W, NA], None)], &shape(2, 0), FailOn::Warn), CELL_REFUSED);
        assert_eq!(exit(&[row(&[W], None)], &shape(1, 0), FailOn::Warn), CELL_REFUSED);
        assert_eq!(exit(&[row(&[None, NA], None)], &shape(2, 0), FailOn::Warn), 0);
    }
}
