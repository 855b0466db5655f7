//! The matrix written out: a table for people, JSON for machines, JUnit XML for CI reports
//! (a suite per image, a case per tree).

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Column, Row, Verdict};
use crate::choices::FailOn;
use crate::error::Refusal;

/// The version of the JSON report's shape (and of the JUnit report's properties): a field
/// removed or changed in meaning raises it; a field added does not.
pub const SCHEMA_VERSION: u32 = 1;

/// The tool that wrote a report, as `infera-exec --version` says it.
fn tool() -> String {
    format!("infera-exec {} ({})", env!("CARGO_PKG_VERSION"), env!("INFERA_COMMIT"))
}

/// An image's CPython and HIP ABI, from its facts: what a tree must be built for.
pub fn abi(facts: &Value) -> String {
    let python = facts["python"]["version"].as_str().map_or("no CPython".to_string(), |v| format!("CPython {v}"));
    let hip = facts["rocm"]["hip"]["major"].as_u64().map_or("no HIP".to_string(), |h| format!("HIP ABI {h}"));
    format!("{python}, {hip}")
}

/// The name a CI report gives an image: the names its archive gives it, else the path.
fn suite_name(r: &Row) -> String {
    match r.identity.as_ref().map(|i| i.names.as_slice()) {
        Some([]) | None => r.image.clone(),
        Some(names) => names.join(", "),
    }
}

/// `writeln!` to a String, which cannot fail.
macro_rules! w {
    ($($t:tt)*) => {{
        let _ = writeln!($($t)*);
    }};
}

/// The table (rows images, columns trees), what each image is, then each refusal in full.
pub fn text(rows: &[Row], columns: &[Column], fail_on: FailOn) -> String {
    let (failed, cells) = super::counts(rows, columns.len(), fail_on);
    let mut o = String::new();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    w!(
        o,
        "infera-exec check: {} × {}, {failed} of {cells} failed\n",
        plural(rows.len(), "image"),
        plural(columns.len(), "tree")
    );
    let mut table =
        vec![std::iter::once("IMAGE".to_string()).chain(columns.iter().map(|c| c.name().to_string())).collect()];
    table.extend(rows.iter().map(|r| std::iter::once(safe(&r.image)).chain(verdicts(r, columns)).collect::<Vec<_>>()));
    aligned(&mut o, &table);
    w!(o, "\nimages:");
    for r in rows {
        w!(o, "  {}: {}", safe(&r.image), safe(&about(r)));
    }
    let no_tree: Vec<(String, Refusal)> = rows.iter().filter_map(|r| Some((r.image.clone(), r.no_tree()?))).collect();
    let refusals: Vec<(String, &Refusal)> =
        refusals(rows, columns).chain(no_tree.iter().map(|(at, e)| (at.clone(), e))).collect();
    if !refusals.is_empty() {
        w!(o, "\nrefusals:");
    }
    for (at, e) in refusals {
        w!(o, "  {}: error[{}]: {}", safe(&at), e.code, safe(&e.message));
        if let Some(h) = &e.hint {
            w!(o, "    hint: {}", safe(h));
        }
    }
    let warned: Vec<String> = rows
        .iter()
        .flat_map(|r| r.cells.iter().zip(columns).map(move |(cell, c)| (r, cell, c)))
        .filter(|(_, cell, _)| cell.verdict == Verdict::Ok)
        .flat_map(|(r, cell, c)| {
            let tree = cell.family.clone().unwrap_or_else(|| c.name().to_string());
            cell.warnings
                .iter()
                .map(move |(code, m)| format!("  {} with {tree}: warn[{code}]: {}", safe(&r.image), safe(m)))
        })
        .collect();
    if !warned.is_empty() {
        let fails = if fail_on == FailOn::Warn { " (failing: --fail-on warn)" } else { "" };
        w!(o, "\nwarnings{fails}:");
        for line in warned {
            w!(o, "{line}");
        }
    }
    o
}

/// One value on one line, its control characters escaped (a name can hold any byte).
fn safe(s: &str) -> String {
    s.escape_debug().to_string().replace("\\\"", "\"").replace("\\'", "'")
}

/// Each cell's word: `ok` (with its warnings' count), `refused: CODE` or `n/a`; the matching
/// tree's name where it was chosen.
fn verdicts<'r>(r: &'r Row, columns: &'r [Column]) -> impl Iterator<Item = String> + 'r {
    columns.iter().enumerate().map(move |(i, c)| match (&r.error, r.cells.get(i)) {
        (Some(e), _) => format!("unreadable: {}", e.code),
        (None, Some(cell)) => {
            let word = match (cell.verdict, &cell.error, cell.warnings.len()) {
                (Verdict::NotApplicable, ..) => "n/a".to_string(),
                (_, Some(e), _) => format!("refused: {}", e.code),
                (_, None, 0) => "ok".to_string(),
                (_, None, 1) => "ok, 1 warning".to_string(),
                (_, None, n) => format!("ok, {n} warnings"),
            };
            match (c, &cell.family) {
                (Column { tree: crate::plan::TreeChoice::Matching, .. }, Some(f)) => format!("{word} ({f})"),
                _ => word,
            }
        }
        (None, None) => String::new(),
    })
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

/// `(where, refusal)` for each refused cell, and once for an image that was not read.
fn refusals<'r>(rows: &'r [Row], columns: &'r [Column]) -> impl Iterator<Item = (String, &'r Refusal)> + 'r {
    rows.iter().flat_map(move |r| {
        let read = r.error.iter().map(move |e| (r.image.clone(), e));
        let cells = r.cells.iter().zip(columns).filter_map(move |(cell, c)| {
            let tree = cell.family.as_deref().unwrap_or(c.name());
            let refused = cell.error.as_ref().filter(|_| cell.verdict == Verdict::Refused);
            refused.map(|e| (format!("{} with {tree}", r.image), e))
        });
        read.chain(cells)
    })
}

/// Per image its identity, facts and a verdict per tree with the plan or the refusal, and
/// its warnings; the report's schema version and the tool that wrote it
/// (docs/command-line.md documents the shape).
pub fn json(rows: &[Row], columns: &[Column], exit: i32, fail_on: FailOn) -> String {
    let images: Vec<Value> = rows.iter().map(|r| json_row(r, columns, fail_on)).collect();
    let columns: Vec<&str> = columns.iter().map(Column::name).collect();
    let fail_on = if fail_on == FailOn::Warn { "warn" } else { "refusal" };
    let report = json!({
        "schema_version": SCHEMA_VERSION,
        "tool": tool(),
        "fail_on": fail_on,
        "columns": columns,
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
                json!({
                    "column": c.name(),
                    "family": cell.family,
                    "verdict": cell.verdict.name(),
                    "fails": cell.fails(fail_on),
                    "error": cell.error,
                    "findings": findings,
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
/// JUnit schema, xunit-plugin's junit-10.xsd, allows: `skipped` on a suite only): `<testsuites>`, a
/// `<testsuite>` per image (named by the names its archive gives it) with its digests, the
/// tool and the schema version as properties, a `<testcase>` per tree with its time; a failed
/// cell is a `<failure>`, a tree that does not apply `<skipped>`, an image that cannot be read
/// an `<error>` in each case, an image no tree applies to a failed case of its own; each
/// case's warnings in its `<system-out>`.
pub fn junit(rows: &[Row], columns: &[Column], fail_on: FailOn) -> String {
    let (failed, _) = super::counts(rows, columns.len(), fail_on);
    let errors = rows.iter().filter(|r| r.error.is_some()).count() * columns.len();
    let tests: usize = rows.iter().map(|r| columns.len() + usize::from(r.none_applies())).sum();
    let time: f64 = rows.iter().map(|r| r.seconds).sum();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w!(
        o,
        "<testsuites name=\"infera-exec check\" tests=\"{tests}\" failures=\"{}\" errors=\"{errors}\" time=\"{time:.3}\">",
        failed - errors
    );
    for r in rows {
        suite(&mut o, r, columns, fail_on);
    }
    w!(o, "</testsuites>");
    o
}

fn suite(o: &mut String, r: &Row, columns: &[Column], fail_on: FailOn) {
    let name = xml(&suite_name(r));
    let failures = r.cells.iter().filter(|c| c.fails(fail_on)).count() + usize::from(r.none_applies());
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
        case(o, &name, r, r.cells.get(i), c, fail_on);
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
        props.push(("manifest_digest", i.manifest_digest.clone().unwrap_or_default()));
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

fn case(o: &mut String, suite: &str, r: &Row, cell: Option<&super::Cell>, c: &Column, fail_on: FailOn) {
    let tree = cell.and_then(|c| c.family.as_deref()).unwrap_or(c.name());
    let time = cell.map_or(0.0, |c| c.seconds);
    w!(o, "    <testcase classname=\"{suite}\" name=\"{}\" time=\"{time:.3}\">", xml(tree));
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
    if let Some(cell) = cell.filter(|c| !c.warnings.is_empty()) {
        let text: String = cell.warnings.iter().map(|(code, m)| format!("warn[{code}]: {m}\n")).collect();
        w!(o, "      <system-out>{}</system-out>", xml(&text));
    }
    w!(o, "    </testcase>");
}

/// The report of a refusal before any image was judged (no overlay, a usage error): one
/// case, in error, so that CI still gets a report.
pub fn junit_error(e: &Refusal) -> String {
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w!(o, "<testsuites name=\"infera-exec check\" tests=\"1\" failures=\"0\" errors=\"1\">");
    w!(o, "  <testsuite name=\"infera-exec check\" tests=\"1\" failures=\"0\" errors=\"1\">");
    w!(o, "    <testcase classname=\"infera-exec\" name=\"check\">");
    let body = format!("exit code {}\n{}", e.exit.code(), e.hint.as_deref().unwrap_or(""));
    w!(o, "      <error type=\"{}\" message=\"{}\">{}</error>", xml(&e.code), xml(&e.message), xml(&body));
    w!(o, "    </testcase>");
    w!(o, "  </testsuite>");
    w!(o, "</testsuites>");
    o
}

/// Text as XML 1.0 character data or an attribute value: the five markup characters as
/// entities, tab, newline and carriage return as character references (an attribute's would
/// read back as spaces), and the characters XML 1.0 cannot carry at all (the other C0
/// controls, U+FFFE/U+FFFF) as `\u{…}` so that nothing is dropped silently.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Exit;
    use crate::matrix::Cell;

    fn refusal(code: &str, exit: Exit) -> Refusal {
        Refusal { code: code.into(), message: format!("{code} <said> & \"quoted\""), hint: Some("do x".into()), exit }
    }

    fn cell(family: &str, error: Option<Refusal>, verdict: Verdict, warned: bool) -> Cell {
        let warnings =
            if warned { vec![("model-unreadable".to_string(), "cannot read it".to_string())] } else { vec![] };
        Cell { family: Some(family.into()), plan: json!({ "family": family }), error, verdict, warnings, seconds: 0.25 }
    }

    fn na() -> Option<Refusal> {
        Some(refusal("family-mismatch", Exit::Unsupported))
    }

    fn rows() -> (Vec<Row>, Vec<Column>) {
        let columns = vec![
            Column::new(crate::plan::TreeChoice::Judged("rocm7-py312".into()), None),
            Column::new(crate::plan::TreeChoice::Judged("rocm7-py310".into()), None),
        ];
        let identity = infera_core::image::Identity {
            reference: "a.tar".into(),
            manifest_digest: Some("sha256:m".into()),
            config_digest: "sha256:c".into(),
            names: vec!["localhost/vllm:0.28".into()],
            layers: vec!["sha256:l1".into(), "sha256:l2".into()],
        };
        let facts = json!({ "python": { "version": "3.12.3" }, "rocm": { "version": "7.0.2", "hip": { "major": 7 } },
                            "engines": [{ "name": "vllm", "version": "0.9.1" }] });
        let row = |image: &str, identity, facts, cells| Row {
            image: image.into(),
            seconds: 1.5,
            identity,
            facts,
            cells,
            error: None,
        };
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
            cells: Vec::new(),
            error: Some(refusal("image-digest-mismatch", Exit::Invalid)),
        };
        (vec![ok, refused, none, bad], columns)
    }

    #[test]
    fn the_table_names_each_cell_each_refusal_and_each_warning_in_full() {
        let (rows, columns) = rows();
        let t = text(&rows, &columns, FailOn::Refusal);
        assert_eq!(
            t,
            "infera-exec check: 4 images × 2 trees, 4 of 8 failed\n\n\
             IMAGE      rocm7-py312                         rocm7-py310\n\
             a.tar      ok, 1 warning                       n/a\n\
             c.tar      refused: engine-version             n/a\n\
             d.tar      n/a                                 n/a\n\
             b<&>.tar   unreadable: image-digest-mismatch   unreadable: image-digest-mismatch\n\n\
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
        assert!(text(&rows, &columns, FailOn::Warn).contains("warnings (failing: --fail-on warn):"));
    }

    #[test]
    fn json_has_per_image_identity_facts_verdicts_and_warnings() {
        let (rows, columns) = rows();
        let v: Value = serde_json::from_str(&json(&rows, &columns, 65, FailOn::Refusal)).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert!(v["tool"].as_str().unwrap().starts_with("infera-exec "));
        assert_eq!(v["columns"], json!(["rocm7-py312", "rocm7-py310"]));
        assert_eq!(v["exit_code"], 65);
        let a = &v["images"][0];
        assert_eq!(a["names"], json!(["localhost/vllm:0.28"]));
        assert_eq!(a["config_digest"], "sha256:c");
        assert_eq!(a["manifest_digest"], "sha256:m");
        assert_eq!(a["layers"], json!(["sha256:l1", "sha256:l2"]));
        assert_eq!(a["facts"]["python"]["version"], "3.12.3");
        assert_eq!(a["families"][0]["verdict"], "ok");
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
        let warn: Value = serde_json::from_str(&json(&rows, &columns, 1, FailOn::Warn)).unwrap();
        assert_eq!(warn["images"][0]["families"][0]["fails"], true);
    }

    #[test]
    fn junit_is_xml_with_a_suite_per_image_a_case_per_tree_skips_and_warnings() {
        let (rows, columns) = rows();
        let x = junit(&rows, &columns, FailOn::Refusal);
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
            ("system-out", Some("warn[model-unreadable]: cannot read it\n"))
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
        let warn = junit(&rows, &columns, FailOn::Warn);
        assert!(
            warn.contains("<failure type=\"model-unreadable\" message=\"1 warning(s) and --fail-on warn"),
            "{warn}"
        );
    }

    #[test]
    fn xml_escapes_markup_and_names_what_xml_cannot_carry() {
        assert_eq!(xml("a<b>&\"c'\u{1}\u{7f}é"), "a&lt;b&gt;&amp;&quot;c&apos;\\u{1}\u{7f}é");
        roxmltree::Document::parse(&format!("<a b=\"{}\">{}</a>", xml("\u{0}\u{1b}x"), xml("\u{fffe}"))).unwrap();
    }
}
