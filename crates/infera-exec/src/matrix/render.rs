//! The matrix written out: a table for people, JSON for machines, JUnit XML for CI reports
//! (a suite per image, a case per tree).

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Column, Row};
use crate::error::Refusal;

/// `writeln!` to a String, which cannot fail.
macro_rules! w {
    ($($t:tt)*) => {{
        let _ = writeln!($($t)*);
    }};
}

/// The table (rows images, columns trees), what each image is, then each refusal in full.
pub fn text(rows: &[Row], columns: &[Column]) -> String {
    let (refused, cells) = super::counts(rows, columns.len());
    let mut o = String::new();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    w!(
        o,
        "infera-exec check: {} × {}, {refused} of {cells} refused\n",
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
    let refusals: Vec<(String, &Refusal)> = refusals(rows, columns).collect();
    if !refusals.is_empty() {
        w!(o, "\nrefusals:");
    }
    for (at, e) in refusals {
        w!(o, "  {}: error[{}]: {}", safe(&at), e.code, safe(&e.message));
        if let Some(h) = &e.hint {
            w!(o, "    hint: {}", safe(h));
        }
    }
    o
}

/// One value on one line, its control characters escaped (a name can hold any byte).
fn safe(s: &str) -> String {
    s.escape_debug().to_string().replace("\\\"", "\"").replace("\\'", "'")
}

/// Each cell's word: `ok`, or `refused: CODE`; the matching tree's name where it was chosen.
fn verdicts<'r>(r: &'r Row, columns: &'r [Column]) -> impl Iterator<Item = String> + 'r {
    columns.iter().enumerate().map(move |(i, c)| match (&r.error, r.cells.get(i)) {
        (Some(e), _) => format!("unreadable: {}", e.code),
        (None, Some(cell)) => {
            let word = cell.error.as_ref().map_or_else(|| "ok".to_string(), |e| format!("refused: {}", e.code));
            match (c, &cell.family) {
                (Column { tree: super::Tree::Matching, .. }, Some(f)) => format!("{word} ({f})"),
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
            cell.error.as_ref().map(|e| (format!("{} with {tree}", r.image), e))
        });
        read.chain(cells)
    })
}

/// Per image its identity, facts and a verdict per tree with the plan or the refusal.
pub fn json(rows: &[Row], columns: &[Column], exit: i32) -> String {
    let images: Vec<Value> = rows
        .iter()
        .map(|r| {
            let Some(e) = &r.error else {
                let cells: Vec<Value> = r
                    .cells
                    .iter()
                    .zip(columns)
                    .map(|(cell, c)| {
                        json!({
                            "column": c.name(),
                            "family": cell.family,
                            "verdict": if cell.error.is_some() { "refused" } else { "ok" },
                            "error": cell.error,
                            "plan": cell.plan,
                        })
                    })
                    .collect();
                let id = r.identity.as_ref();
                return json!({
                    "image": r.image,
                    "manifest_digest": id.and_then(|i| i.manifest_digest.clone()),
                    "config_digest": id.map(|i| i.config_digest.clone()),
                    "layers": id.map(|i| i.layers.clone()),
                    "facts": r.facts,
                    "families": cells,
                });
            };
            json!({ "image": r.image, "verdict": "unreadable", "error": e })
        })
        .collect();
    let columns: Vec<&str> = columns.iter().map(Column::name).collect();
    format!("{:#}\n", json!({ "columns": columns, "images": images, "exit_code": exit }))
}

/// JUnit XML as CI systems read it (Jenkins, GitLab, GitHub's reporters): `<testsuites>`, a
/// `<testsuite>` per image with its digests as properties, a `<testcase>` per tree; a
/// refused cell is a `<failure>`, an image that cannot be read an `<error>` in each case.
pub fn junit(rows: &[Row], columns: &[Column]) -> String {
    let (refused, cells) = super::counts(rows, columns.len());
    let errors = rows.iter().filter(|r| r.error.is_some()).count() * columns.len();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w!(
        o,
        "<testsuites name=\"infera-exec check\" tests=\"{cells}\" failures=\"{}\" errors=\"{errors}\">",
        refused - errors
    );
    for r in rows {
        suite(&mut o, r, columns);
    }
    w!(o, "</testsuites>");
    o
}

fn suite(o: &mut String, r: &Row, columns: &[Column]) {
    let name = xml(&r.image);
    let failures = r.cells.iter().filter(|c| c.error.is_some()).count();
    let errors = if r.error.is_some() { columns.len() } else { 0 };
    w!(o, "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">", columns.len());
    if let Some(i) = &r.identity {
        w!(o, "    <properties>");
        let manifest = i.manifest_digest.as_deref().unwrap_or("");
        for (k, v) in [("manifest_digest", manifest), ("config_digest", &i.config_digest)] {
            w!(o, "      <property name=\"{k}\" value=\"{}\"/>", xml(v));
        }
        w!(o, "      <property name=\"layers\" value=\"{}\"/>", i.layers.len());
        w!(o, "    </properties>");
    }
    for (i, c) in columns.iter().enumerate() {
        let cell = r.cells.get(i);
        let tree = cell.and_then(|c| c.family.as_deref()).unwrap_or(c.name());
        let (tag, e) = match (&r.error, cell.and_then(|c| c.error.as_ref())) {
            (Some(e), _) => ("error", Some(e)),
            (None, e) => ("failure", e),
        };
        let head = format!("    <testcase classname=\"{name}\" name=\"{}\"", xml(tree));
        match e {
            None => w!(o, "{head}/>"),
            Some(e) => {
                let body = format!("exit code {}\n{}", e.exit.code(), e.hint.as_deref().unwrap_or(""));
                w!(o, "{head}>");
                w!(o, "      <{tag} type=\"{}\" message=\"{}\">{}</{tag}>", xml(&e.code), xml(&e.message), xml(&body));
                w!(o, "    </testcase>");
            }
        }
    }
    w!(o, "  </testsuite>");
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

    fn refusal(code: &str, exit: Exit) -> Refusal {
        Refusal { code: code.into(), message: format!("{code} <said> & \"quoted\""), hint: Some("do x".into()), exit }
    }

    fn cell(family: &str, error: Option<Refusal>) -> super::super::Cell {
        super::super::Cell { family: Some(family.into()), plan: json!({ "family": family }), error }
    }

    fn rows() -> (Vec<Row>, Vec<Column>) {
        let columns = vec![
            Column::new(super::super::Tree::Judged("rocm7-py312".into()), None),
            Column::new(super::super::Tree::Judged("rocm7-py310".into()), None),
        ];
        let identity = infera_core::image::Identity {
            reference: "a.tar".into(),
            manifest_digest: Some("sha256:m".into()),
            config_digest: "sha256:c".into(),
            layers: vec!["sha256:l1".into(), "sha256:l2".into()],
        };
        let facts = json!({ "python": { "version": "3.12.3" }, "rocm": { "version": "7.0.2", "hip": { "major": 7 } },
                            "engines": [{ "name": "vllm", "version": "0.9.1" }] });
        let ok = Row {
            image: "a.tar".into(),
            identity: Some(identity),
            facts,
            cells: vec![
                cell("rocm7-py312", None),
                cell("rocm7-py310", Some(refusal("family-mismatch", Exit::Unsupported))),
            ],
            error: None,
        };
        let bad = Row {
            image: "b<&>.tar".into(),
            identity: None,
            facts: Value::Null,
            cells: Vec::new(),
            error: Some(refusal("image-digest-mismatch", Exit::Invalid)),
        };
        (vec![ok, bad], columns)
    }

    #[test]
    fn the_table_names_each_cell_and_each_refusal_in_full() {
        let (rows, columns) = rows();
        let t = text(&rows, &columns);
        assert_eq!(
            t,
            "infera-exec check: 2 images × 2 trees, 3 of 4 refused\n\n\
             IMAGE      rocm7-py312                         rocm7-py310\n\
             a.tar      ok                                  refused: family-mismatch\n\
             b<&>.tar   unreadable: image-digest-mismatch   unreadable: image-digest-mismatch\n\n\
             images:\n  \
             a.tar: config sha256:c, 2 layers; python 3.12.3; HIP ABI 7, ROCm 7.0.2; vllm 0.9.1\n  \
             b<&>.tar: not read: error[image-digest-mismatch]: image-digest-mismatch <said> & \"quoted\"\n\n\
             refusals:\n  \
             a.tar with rocm7-py310: error[family-mismatch]: family-mismatch <said> & \"quoted\"\n    hint: do x\n  \
             b<&>.tar: error[image-digest-mismatch]: image-digest-mismatch <said> & \"quoted\"\n    hint: do x\n"
        );
    }

    #[test]
    fn json_has_per_image_identity_facts_and_verdicts() {
        let (rows, columns) = rows();
        let v: Value = serde_json::from_str(&json(&rows, &columns, 65)).unwrap();
        assert_eq!(v["columns"], json!(["rocm7-py312", "rocm7-py310"]));
        assert_eq!(v["exit_code"], 65);
        let a = &v["images"][0];
        assert_eq!(a["config_digest"], "sha256:c");
        assert_eq!(a["manifest_digest"], "sha256:m");
        assert_eq!(a["layers"], json!(["sha256:l1", "sha256:l2"]));
        assert_eq!(a["facts"]["python"]["version"], "3.12.3");
        assert_eq!(a["families"][0]["verdict"], "ok");
        assert_eq!(a["families"][0]["error"], Value::Null);
        assert_eq!(a["families"][1]["verdict"], "refused");
        assert_eq!(a["families"][1]["error"]["code"], "family-mismatch");
        assert_eq!(a["families"][1]["error"]["exit_code"], 69);
        assert_eq!(a["families"][1]["plan"]["family"], "rocm7-py310");
        assert_eq!(v["images"][1]["verdict"], "unreadable");
        assert_eq!(v["images"][1]["error"]["exit_code"], 65);
    }

    #[test]
    fn junit_is_xml_with_a_suite_per_image_and_a_case_per_tree() {
        let (rows, columns) = rows();
        let x = junit(&rows, &columns);
        let doc = roxmltree::Document::parse(&x).unwrap_or_else(|e| panic!("{e}\n{x}"));
        let top = doc.root_element();
        assert_eq!(top.tag_name().name(), "testsuites");
        assert_eq!(
            (top.attribute("tests"), top.attribute("failures"), top.attribute("errors")),
            (Some("4"), Some("1"), Some("2"))
        );
        let suites: Vec<_> = top.children().filter(|n| n.is_element()).collect();
        assert_eq!(suites.len(), 2);
        assert_eq!(suites[0].attribute("name"), Some("a.tar"));
        assert_eq!(suites[1].attribute("name"), Some("b<&>.tar"), "names are escaped and read back whole");
        let cases: Vec<_> = suites[0].descendants().filter(|n| n.has_tag_name("testcase")).collect();
        assert_eq!(
            cases.iter().map(|c| c.attribute("name").unwrap()).collect::<Vec<_>>(),
            ["rocm7-py312", "rocm7-py310"]
        );
        assert!(cases[0].first_element_child().is_none(), "an ok cell is a bare case");
        let failure = cases[1].first_element_child().unwrap();
        assert_eq!(failure.tag_name().name(), "failure");
        assert_eq!(failure.attribute("type"), Some("family-mismatch"));
        assert_eq!(failure.attribute("message"), Some("family-mismatch <said> & \"quoted\""));
        assert_eq!(failure.text(), Some("exit code 69\ndo x"));
        let props: Vec<_> = suites[0].descendants().filter(|n| n.has_tag_name("property")).collect();
        assert_eq!(props[1].attribute("value"), Some("sha256:c"));
        let errors: Vec<_> = suites[1].descendants().filter(|n| n.has_tag_name("error")).collect();
        assert_eq!(errors.len(), 2, "each tree of an unread image is an error");
    }

    #[test]
    fn xml_escapes_markup_and_names_what_xml_cannot_carry() {
        assert_eq!(xml("a<b>&\"c'\u{1}\u{7f}é"), "a&lt;b&gt;&amp;&quot;c&apos;\\u{1}\u{7f}é");
        roxmltree::Document::parse(&format!("<a b=\"{}\">{}</a>", xml("\u{0}\u{1b}x"), xml("\u{fffe}"))).unwrap();
    }
}
