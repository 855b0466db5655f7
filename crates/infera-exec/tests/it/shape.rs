//! The checks that certify the code's shape certify what the docs say: `scripts/module-graph`
//! finds a circle through a parent (a folder, or the crate root) and counts a multi-line
//! string by its lines; docs/development.md's "Where a change goes" names only paths there are.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// A crate `name` of `files` (path under `src/` → text) in `crates/`, named in the Layout.
fn fake_crate(root: &Path, name: &str, files: &[(&str, &str)], layout: &str) {
    for (path, text) in files {
        let p = root.join("crates").join(name).join("src").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(root.join("docs")).unwrap();
    let doc = root.join("docs/development.md");
    let mut text = std::fs::read_to_string(&doc).unwrap_or_default();
    text.push_str(&format!("- `crates/{name}/` — {layout}\n"));
    std::fs::write(doc, text).unwrap();
}

fn module_graph(root: &Path) -> Out {
    let o = Command::new(repo().join("scripts/module-graph"))
        .args(["--check", "--crates"])
        .arg(root.join("crates"))
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// A root that names a child which names the root back, and two folders that name each other
/// through a file inside one of them: circles, each said; a crate without them passes.
#[test]
fn a_circle_through_a_parent_is_a_circle() {
    let t = tempfile::tempdir().unwrap();
    let clean = [
        ("lib.rs", "mod a;\nmod b;\npub fn run() { a::f(); }\n"),
        ("a.rs", "pub fn f() { crate::b::g(); }\n"),
        ("b.rs", "pub fn g() {}\n"),
    ];
    fake_crate(t.path(), "clean", &clean, "`a`, `b`");
    let o = module_graph(t.path());
    assert_eq!((o.code, o.stdout.as_str()), (0, "clean: 3 modules, no circle (between files, nor between folders)\n"));

    let root = [
        ("lib.rs", "mod a;\npub(crate) fn helper() {}\npub fn run() { a::f(); }\n"),
        ("a.rs", "pub fn f() { crate::helper(); }\n"),
    ];
    fake_crate(t.path(), "root", &root, "`a`");
    let folders = [
        ("lib.rs", "mod x;\nmod y;\n"),
        ("x/mod.rs", "mod inner;\npub fn g() { inner::h(); }\n"),
        ("x/inner.rs", "pub fn h() { crate::y::k(); }\n"),
        ("y.rs", "pub fn k() { crate::x::g(); }\n"),
    ];
    fake_crate(t.path(), "folders", &folders, "`x`, `inner`, `y`");
    let o = module_graph(t.path());
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("root: a circle of 2 modules: lib, a\n"), "{}", o.stdout);
    assert!(o.stdout.contains("folders: a circle of 2 modules: x, y\n"), "{}", o.stdout);
}

/// A function of 81 source lines, five of them one string literal, is over the 80 a screen
/// holds; 80 is not.
#[test]
fn a_multi_line_string_counts_by_its_lines() {
    let t = tempfile::tempdir().unwrap();
    let body = |lines: usize| {
        let mut f = String::from("pub fn long() {\n    let _s = \"one\ntwo\nthree\nfour\nfive\";\n");
        f.push_str(&"    let _ = 1;\n".repeat(lines - 7));
        f.push_str("}\n");
        assert_eq!(f.lines().count(), lines);
        f
    };
    fake_crate(t.path(), "long", &[("lib.rs", &body(81))], "");
    fake_crate(t.path(), "short", &[("lib.rs", &body(80))], "");
    let o = module_graph(t.path());
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("long: lib::long is 81 lines (at most 80: split it)\n"), "{}", o.stdout);
    assert!(!o.stdout.contains("short: lib::long"), "{}", o.stdout);
}

/// docs/development.md's "Where a change goes" (the one such map: the README points to it)
/// names files and directories that are in the repository.
#[test]
fn where_a_change_goes_names_paths_there_are() {
    let doc = std::fs::read_to_string(repo().join("docs/development.md")).unwrap();
    let section = doc.split("## Where a change goes").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let mut named = 0;
    for (i, _) in section.match_indices('`') {
        let rest = &section[i + 1..];
        let Some(end) = rest.find('`') else { break };
        let word = &rest[..end];
        if !word.contains('/') || word.contains(' ') || word.contains('<') || word.starts_with("--") {
            continue;
        }
        if section[..i].matches('`').count() % 2 == 1 {
            continue; // a closing backtick
        }
        assert!(repo().join(word).exists(), "docs/development.md, Where a change goes: `{word}` is not in the tree");
        named += 1;
    }
    assert!(named >= 15, "{named} paths named");
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(!readme.contains("## Where a change goes"), "one map of where a change goes: docs/development.md's");
}
