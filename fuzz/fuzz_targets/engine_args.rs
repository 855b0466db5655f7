//! Engine-arg reading for both dialects: what the reader extracts is what the args say,
//! and appending the launcher's flags never drops or reorders the user's args.
#![no_main]
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use infera_facts::dialect::{self, Setting};
use infera_facts::engines::{Engine, Opt};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, Vec<Vec<u8>>, u8)| {
    let (sglang, raw, pick) = input;
    let engine = if sglang { Engine::Sglang } else { Engine::Vllm };
    let args: Vec<OsString> = raw.into_iter().map(OsString::from_vec).collect();
    let parsed = dialect::read(engine, &args);
    // Integers as Python's int() reads them: a number read back from its own text and from
    // the same text with whitespace around it; what is refused stays refused with it.
    for a in args.iter().filter_map(|a| a.to_str()) {
        let r = dialect::py_int(a);
        assert_eq!(dialect::py_int(&format!(" {a}\n")), r, "{a:?}");
        if let Ok(Some(n)) = r {
            assert_eq!(dialect::py_int(&n.to_string()), Ok(Some(n)));
            assert!(!a.trim().is_empty());
        }
    }
    for (opt, occ) in &parsed.opts {
        // The occurrence points at a real flag of this option...
        let flag = args[occ.index].as_bytes();
        assert!(flag.starts_with(b"-"), "{opt:?} at a non-flag");
        // ...and a value is the inline `=value` or the next argument, byte for byte.
        if let Setting::Value(v) = &occ.setting {
            let inline = flag.iter().position(|b| *b == b'=').map(|p| &flag[p + 1..]);
            match inline {
                Some(x) => assert_eq!(x, v.as_bytes()),
                None => assert_eq!(args.get(occ.index + 1).map(|a| a.as_bytes()), Some(v.as_bytes())),
            }
        }
    }
    // Planning appends flags for options the user did not set; the user's args stay a prefix.
    let opt = Opt::ALL[pick as usize % Opt::ALL.len()];
    if parsed.is_set(opt) || args.iter().any(|a| a.as_bytes() == b"--") {
        return;
    }
    let value = match opt {
        Opt::PrefixCaching => "on",
        Opt::ChunkedPrefill => "off",
        _ => "7",
    };
    let Some(extra) = dialect::render(engine, opt, value) else { return };
    // A dangling value-taking flag at the end would swallow the appended flag, as argparse
    // would; the launcher only appends after complete args, so skip that shape here.
    let mut all = args.clone();
    all.extend(extra.iter().cloned());
    let again = dialect::read(engine, &all);
    assert_eq!(&all[..args.len()], &args[..]);
    if again.get(opt).is_some() {
        for (o, occ) in &parsed.opts {
            assert_eq!(again.opts.get(o).map(|x| &x.setting), Some(&occ.setting), "appending changed {o:?}");
        }
    }
});
