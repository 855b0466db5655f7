//! Records the commit the launcher is built from, for `infera-exec --version`:
//! `INFERA_BUILD_COMMIT` when the build sets it (an image build without `.git`), else
//! `git describe`-like `<short hash> <commit date>` from the checkout, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=INFERA_BUILD_COMMIT");
    // A new commit moves HEAD or the branch it points at.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    let commit = std::env::var("INFERA_BUILD_COMMIT")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| git(&["log", "-1", "--format=%h %cs"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=INFERA_COMMIT={commit}");
}
