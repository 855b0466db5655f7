//! The launcher's options read without building a clap parser, for the command lines pods
//! run: `infera-exec [--opt V]... python3 -m infera.engine.vllm ARGS` and `infera-exec
//! worker|server|check [--opt V]... [-- ARGS]`, with the `INFERA_*` variables.
//!
//! Building clap's parser is a fifth of a start's instructions; this reads the same options
//! from a table and gives up (None) on anything it is not sure of: a short or unknown
//! option, an option given twice, a value that is empty, starts with `-` or is not one
//! this table parses exactly as clap does, an empty variable, help, a subcommand-like typo.
//! clap then parses the command line as before, so every message and exit code is clap's.
//! A test compares this reader with clap on every command line and variable it accepts.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::{CommonArgs, EngineArgs, EngineChoice, ExecArgs, Invocation, Options, Output};
use crate::engines::Engine;
use crate::envvars as ev;
use crate::request::Role;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Common,
    Engine,
    Exec,
}

/// (long option, variable, group), in the order the parser declares them: the order clap
/// lists the values it took from variables.
const OPTIONS: [(&str, &str, Group); 23] = [
    ("overlay", ev::INFERA_OVERLAY, Group::Common),
    ("root", ev::INFERA_ROOT, Group::Common),
    ("image-env", ev::INFERA_IMAGE_ENV, Group::Common),
    ("python", ev::INFERA_PYTHON, Group::Common),
    ("require", ev::INFERA_REQUIRE, Group::Common),
    ("require-native", ev::INFERA_REQUIRE_NATIVE, Group::Common),
    ("family", ev::INFERA_FAMILY, Group::Common),
    ("allow", ev::INFERA_ALLOW, Group::Common),
    ("chdir", ev::INFERA_EXEC_CHDIR, Group::Common),
    ("output", ev::INFERA_OUTPUT, Group::Common),
    ("drop-caps", ev::INFERA_DROP_CAPS, Group::Common),
    ("no-new-privs", ev::INFERA_NO_NEW_PRIVS, Group::Common),
    ("engine", ev::INFERA_ENGINE, Group::Engine),
    ("skip-engine-patches", ev::INFERA_SKIP_ENGINE_PATCHES, Group::Engine),
    ("engine-patch-timeout", ev::INFERA_ENGINE_PATCH_TIMEOUT, Group::Engine),
    ("nnodes", ev::INFERA_NNODES, Group::Engine),
    ("node-rank", ev::INFERA_NODE_RANK, Group::Engine),
    ("leader-address", ev::INFERA_LEADER_ADDRESS, Group::Engine),
    ("leader-wait", ev::INFERA_LEADER_WAIT, Group::Engine),
    ("dry-run", ev::INFERA_DRY_RUN, Group::Exec),
    ("init", ev::INFERA_INIT, Group::Exec),
    ("init-group", ev::INFERA_INIT_GROUP, Group::Exec),
    ("init-grace", ev::INFERA_INIT_GRACE, Group::Exec),
];

const FLAGS: [&str; 5] = ["no-new-privs", "skip-engine-patches", "dry-run", "init", "init-group"];

/// The invocation, when this reader is sure of it; None: ask clap.
pub fn parse(argv: &[OsString]) -> Option<Invocation> {
    let first = argv.get(1)?.to_str()?;
    let (role, groups): (Option<Role>, &[Group]) = match first {
        "worker" => (Some(Role::Worker), &[Group::Common, Group::Engine, Group::Exec]),
        "server" => (Some(Role::Server), &[Group::Common, Group::Exec]),
        "check" => (Some(Role::Check), &[Group::Common, Group::Engine]),
        _ if super::near_subcommand(argv).is_some() => return None,
        _ => (None, &[Group::Common, Group::Engine, Group::Exec]),
    };
    let mut given: [Option<&OsStr>; OPTIONS.len()] = [None; OPTIONS.len()];
    let mut i = if role.is_some() { 2 } else { 1 };
    let (end, rest) = match role {
        Some(_) => {
            i = options(argv, i, groups, &mut given)?;
            match argv.get(i) {
                None => (i, Vec::new()),
                Some(a) if a == "--" => (i, argv[i + 1..].to_vec()),
                Some(_) => return None,
            }
        }
        None => {
            let at = super::command_start(argv)?;
            let end = if argv[at - 1] == "--" { at - 1 } else { at };
            (end, argv[at..].to_vec())
        }
    };
    if role.is_none() && options(argv, i, groups, &mut given)? != end {
        return None;
    }
    let options = build(groups, &given)?;
    Some(match role {
        Some(role) => Invocation::Role { role, options, args: rest },
        None => Invocation::Program { options, command: rest },
    })
}

/// Read `--name VALUE`, `--name=VALUE` and `--flag` from `i` on; returns where they end.
fn options<'a>(
    argv: &'a [OsString],
    mut i: usize,
    groups: &[Group],
    given: &mut [Option<&'a OsStr>; OPTIONS.len()],
) -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    while let Some(a) = argv.get(i) {
        let Some(long) = a.as_bytes().strip_prefix(b"--") else { break };
        if long.is_empty() {
            break;
        }
        let (name, inline) = match long.iter().position(|&b| b == b'=') {
            Some(p) => (&long[..p], Some(OsStr::from_bytes(&long[p + 1..]))),
            None => (long, None),
        };
        let k = OPTIONS.iter().position(|(l, _, g)| l.as_bytes() == name && groups.contains(g))?;
        if given[k].is_some() {
            return None;
        }
        if FLAGS.contains(&OPTIONS[k].0) {
            if inline.is_some() {
                return None;
            }
            given[k] = Some(OsStr::new("true"));
            i += 1;
        } else if let Some(v) = inline {
            given[k] = Some(v);
            i += 1;
        } else {
            given[k] = Some(argv.get(i + 1)?.as_os_str());
            i += 2;
        }
    }
    Some(i)
}

/// The options from the command line, else the variables, else the defaults.
fn build(groups: &[Group], given: &[Option<&OsStr>; OPTIONS.len()]) -> Option<Options> {
    let mut o = Options {
        common: CommonArgs {
            overlay: None,
            root: PathBuf::from("/"),
            image_env: Vec::new(),
            python: None,
            require: Vec::new(),
            require_native: None,
            family: None,
            allow: Vec::new(),
            chdir: None,
            output: Output::Text,
            drop_caps: None,
            no_new_privs: false,
        },
        engine: EngineArgs::default(),
        exec: ExecArgs::default(),
        from_env: Vec::new(),
    };
    for (k, (long, var, group)) in OPTIONS.iter().enumerate() {
        if !groups.contains(group) {
            continue;
        }
        match given[k] {
            Some(v) => set(&mut o, long, v)?,
            None => {
                let Some(env) = std::env::var_os(var) else { continue };
                set(&mut o, long, &env)?;
                o.from_env.push((long.to_string(), var.to_string()));
            }
        }
    }
    Some(o)
}

/// One option's value, parsed as clap parses it; None where clap might disagree.
fn set(o: &mut Options, long: &str, v: &OsStr) -> Option<()> {
    use std::os::unix::ffi::OsStrExt;
    let b = v.as_bytes();
    if b.is_empty() || b[0] == b'-' {
        return None;
    }
    let s = || v.to_str().map(str::to_string);
    let list = || -> Option<Vec<String>> {
        let t = v.to_str()?;
        let items: Vec<String> = t.split(',').map(str::to_string).collect();
        items.iter().all(|i| !i.is_empty()).then_some(items)
    };
    let c = &mut o.common;
    let e = &mut o.engine;
    let x = &mut o.exec;
    match long {
        "overlay" => c.overlay = Some(PathBuf::from(v)),
        "root" => c.root = PathBuf::from(v),
        "image-env" => c.image_env = vec![v.to_os_string()],
        "python" => c.python = Some(v.to_os_string()),
        "require" => c.require = list()?,
        "require-native" => c.require_native = Some(s()?),
        "family" => c.family = Some(s()?),
        "allow" => c.allow = list()?,
        "chdir" => c.chdir = Some(v.to_os_string()),
        "output" => {
            c.output = match b {
                b"text" => Output::Text,
                b"json" => Output::Json,
                _ => return None,
            }
        }
        "drop-caps" => c.drop_caps = Some(list()?),
        "no-new-privs" => c.no_new_privs = boolish(b)?,
        "engine" => {
            e.engine = match v.to_str()? {
                "auto" => EngineChoice::Auto,
                name => EngineChoice::One(Engine::from_name(name)?),
            }
        }
        "skip-engine-patches" => e.skip_engine_patches = boolish(b)?,
        "engine-patch-timeout" => e.engine_patch_timeout = number(b, 1, 3600)?,
        "nnodes" => e.nnodes = Some(s()?),
        "node-rank" => e.node_rank = Some(s()?),
        "leader-address" => e.leader_address = Some(s()?),
        "leader-wait" => e.leader_wait = number(b, 0, 86400)?,
        "dry-run" => x.dry_run = boolish(b)?,
        "init" => x.init = boolish(b)?,
        "init-group" => x.init_group = boolish(b)?,
        "init-grace" => {
            // Plain decimals only: what f64's parser and clap's agree on without doubt.
            let t = v.to_str()?;
            let (int, frac) = t.split_once('.').unwrap_or((t, "0"));
            let digits = |p: &str| !p.is_empty() && p.len() <= 9 && p.bytes().all(|d| d.is_ascii_digit());
            if !(digits(int) && digits(frac)) {
                return None;
            }
            x.init_grace = Some(t.parse().ok()?);
        }
        _ => return None,
    }
    Some(())
}

/// clap's `BoolishValueParser`, for the spellings it takes in lower case.
fn boolish(b: &[u8]) -> Option<bool> {
    match b {
        b"true" | b"yes" | b"on" | b"1" | b"y" | b"t" => Some(true),
        b"false" | b"no" | b"off" | b"0" | b"n" | b"f" => Some(false),
        _ => None,
    }
}

fn number(b: &[u8], lo: u64, hi: u64) -> Option<u64> {
    if b.len() > 6 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(b).ok()?.parse().ok()?;
    (lo..=hi).contains(&n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<OsString> {
        std::iter::once("infera-exec").chain(v.iter().copied()).map(OsString::from).collect()
    }

    /// What clap reads, as text (the invocation's Debug form), or its error's kind.
    fn clap_says(a: &[OsString]) -> String {
        match super::super::with_clap(a.to_vec()) {
            Ok(inv) => format!("{inv:?}"),
            Err(e) => format!("error {:?}", e.kind()),
        }
    }

    fn clear_env() {
        for (_, var, _) in OPTIONS {
            std::env::remove_var(var);
        }
    }

    /// Every command line and variable this reader accepts, it reads as clap does; the
    /// pods' forms are accepted (so the reader is the one that runs).
    #[test]
    fn the_quick_reader_agrees_with_clap_wherever_it_answers() {
        clear_env();
        let heads: [&[&str]; 4] = [&["worker"], &["server"], &["check"], &[]];
        let opts: Vec<Vec<&str>> = vec![
            vec![],
            vec!["--overlay", "/overlay"],
            vec!["--root=/srv/img", "--dry-run"],
            vec!["--engine", "vllm", "--require", "mooncake,hipfile"],
            vec!["--engine=sglang", "--allow", "engine-version", "--output", "json"],
            vec!["--engine", "vlm"],
            vec!["--engine", "auto", "--nnodes", "2", "--node-rank", "1", "--leader-address", "lead"],
            vec!["--leader-wait", "86400", "--engine-patch-timeout", "3600"],
            vec!["--leader-wait", "86401"],
            vec!["--engine-patch-timeout", "0"],
            vec!["--init", "--init-group", "--init-grace", "2.5"],
            vec!["--init-grace", "1e3"],
            vec!["--drop-caps", "sys_admin,net_raw", "--no-new-privs"],
            vec!["--python", "/usr/bin/python3.12", "--chdir", "/work", "--family", "rocm7-py312"],
            vec!["--image-env", "image.json", "--require-native", "mooncake"],
            vec!["--root", "/a", "--root", "/b"],
            vec!["--require", "a,,b"],
            vec!["--dry-run=true"],
            vec!["--skip-engine-patches", "--output", "yaml"],
            vec!["--overlay"],
            vec!["--overlay", "--dry-run"],
            vec!["--help"],
            vec!["-V"],
            vec!["--dryrun"],
        ];
        let tails: [&[&str]; 5] = [
            &[],
            &["--", "--model", "/models/m", "--tensor-parallel-size", "8"],
            &["--"],
            &["python3", "-m", "infera.engine.vllm", "--model", "/m"],
            &["--", "python3", "-m", "infera.server"],
        ];
        let mut answered = 0;
        let mut checked = 0;
        for head in heads {
            for o in &opts {
                for tail in tails {
                    let a = argv(&[head, o.as_slice(), tail].concat());
                    checked += 1;
                    if let Some(q) = parse(&a) {
                        answered += 1;
                        assert_eq!(format!("{q:?}"), clap_says(&a), "argv {a:?}");
                    }
                }
            }
        }
        assert!(answered >= 120, "the reader answered {answered} of {checked}");
        for pod in [
            argv(&["python3", "-m", "infera.engine.vllm", "--model", "/models/m"]),
            argv(&["worker", "--", "--model", "/models/m"]),
            argv(&["worker", "--root", "/r", "--overlay", "/o", "--", "--model", "/m"]),
            argv(&["server", "--", "--worker-urls", "http://w:8000"]),
        ] {
            assert!(parse(&pod).is_some(), "{pod:?} goes to clap");
        }
    }

    /// Values from the variables: the same values, the same `from_env`, the same refusals
    /// left to clap (an empty or unparsable value).
    #[test]
    fn variables_are_read_as_clap_reads_them() {
        let cases: [&[(&str, &str)]; 12] = [
            &[("INFERA_OVERLAY", "/payload"), ("INFERA_ENGINE", "sglang")],
            &[("INFERA_DRY_RUN", "1"), ("INFERA_OUTPUT", "json")],
            &[("INFERA_DRY_RUN", "yes"), ("INFERA_NO_NEW_PRIVS", "off")],
            &[("INFERA_DRY_RUN", "maybe")],
            &[("INFERA_REQUIRE", "mooncake,hipfile"), ("INFERA_ALLOW", "engine-version")],
            &[("INFERA_DROP_CAPS", "net_raw"), ("INFERA_IMAGE_ENV", "PATH=/usr/bin")],
            &[("INFERA_LEADER_WAIT", "30"), ("INFERA_NNODES", "2"), ("INFERA_NODE_RANK", "0")],
            &[("INFERA_LEADER_WAIT", "-1")],
            &[("INFERA_ROOT", "")],
            &[("INFERA_ENGINE", "vlm")],
            &[("INFERA_INIT_GRACE", "10"), ("INFERA_INIT", "true"), ("INFERA_INIT_GROUP", "0")],
            &[("INFERA_PYTHON", "python3.12"), ("INFERA_FAMILY", "rocm7-py310"), ("INFERA_EXEC_CHDIR", "/w")],
        ];
        let lines = [
            argv(&["worker", "--", "--model", "/m"]),
            argv(&["server", "--dry-run", "--", "--worker-urls", "http://w:8000"]),
            argv(&["check"]),
            argv(&["--root", "/r", "python3", "-m", "infera.engine.vllm"]),
            argv(&["worker", "--engine", "vllm", "--output", "text", "--", "--model", "/m"]),
        ];
        let mut answered = 0;
        for vars in cases {
            clear_env();
            for (k, v) in vars {
                std::env::set_var(k, v);
            }
            for a in &lines {
                if let Some(q) = parse(a) {
                    answered += 1;
                    assert_eq!(format!("{q:?}"), clap_says(a), "argv {a:?}, variables {vars:?}");
                }
            }
        }
        clear_env();
        assert!(answered >= 40, "the reader answered only {answered} times");
    }
}
