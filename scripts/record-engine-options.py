"""Record the long options of every vLLM and sglang release the trees support, from each
release's own argument parser, as infera's wrappers build it:

  vLLM    make_arg_parser(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
          (infera/engine/vllm/args.py), with the platform set to CPU first
  sglang  ServerArgs.add_cli_args(argparse.ArgumentParser(add_help=False))
          (infera/engine/sglang/args.py)

and the options are the parser's `_option_string_actions` (vLLM's `--no-…` booleans are only
there): what argparse matches a command line against.

A release's parser is its own Python: the package's files are taken from the release's PyPI
archive (vLLM: its sdist, or its wheel where it has none; sglang: its wheel), only the package's
own files (`vllm/…`, `sglang/…`; no compiled extension), and put first on PYTHONPATH over an
environment that can import them on a CPU (a venv with a nearby vLLM and its dependencies:
torch, transformers, …). `--compare-installed` shows that this gives the same set as the
installed release itself.

    python record-engine-options.py record ENGINE SPEC... OUT_DIR    every release in any SPEC
    python record-engine-options.py check ENGINE VERSION... --dir DIR  each release's set is the
                                                                       committed file's
    python record-engine-options.py compare-installed ENGINE          the installed release's set
                                                                       equals its archive's

Consecutive releases whose sets are equal share one file, `<engine>-<first>.txt`, whose header
names every release its set was recorded from (the build reads those lines).
"""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile

from packaging.specifiers import SpecifierSet
from packaging.version import Version

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("INFERA_PARSERS", os.path.join(HERE, "..", "target", "parsers"))
PYPI = "https://pypi.org/pypi/{}/json"
WRAPPER = {"vllm": "infera.engine.vllm", "sglang": "infera.engine.sglang"}
PY = f"{sys.version_info.major}.{sys.version_info.minor}"

DESCRIBE = {
    "vllm": r"""
import argparse, json, os
import vllm.platforms as P
from vllm.platforms.cpu import CpuPlatform
P._current_platform = CpuPlatform()
def flexible():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return FlexibleArgumentParser(add_help=False, allow_abbrev=False)
wrapper = None
try:  # where infera.engine.vllm imports it from (up to 0.28)
    from vllm.entrypoints.openai.cli_args import make_arg_parser
except ImportError:
    # 0.29-0.32 launchers/, 0.33 common/: the wrapper cannot import it; `vllm serve` parses.
    wrapper = "ImportError: make_arg_parser is not in vllm.entrypoints.openai.cli_args"
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    p = make_arg_parser(flexible())
if wrapper is None:
    try:
        p = make_arg_parser(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
    except TypeError as e:
        # Up to 0.16.0 vLLM passes `deprecated=` to add_argument, which argparse takes from
        # CPython 3.13 on; only its own FlexibleArgumentParser drops it on older ones.
        wrapper = "TypeError: add_argument() got `deprecated=`, which argparse takes from CPython 3.13 on"
        p = make_arg_parser(flexible())
import vllm
print(json.dumps({"version": getattr(vllm, "__version__", None), "file": vllm.__file__, "wrapper": wrapper,
                  "options": sorted(s for s in p._option_string_actions if s.startswith("--"))}))
""",
    "sglang": r"""
import argparse, json
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(add_help=False)
ServerArgs.add_cli_args(p)
import sglang.srt.server_args as s
print(json.dumps({"version": None, "file": s.__file__, "wrapper": None,
                  "options": sorted(x for x in p._option_string_actions if x.startswith("--"))}))
""",
}


def say(*a):
    print("record-engine-options:", *a, file=sys.stderr, flush=True)


def releases(engine, spec):
    """The engine's releases on PyPI in SPEC (pre-releases included), oldest first, with the
    archive each is read from."""
    index = json.load(urllib.request.urlopen(PYPI.format(engine)))
    out = []
    for v, files in index["releases"].items():
        try:
            version = Version(v)
        except Exception:
            continue
        if not files or not SpecifierSet(spec, prereleases=True).contains(version):
            continue
        files = [f for f in files if not f.get("yanked")]
        sdist = [f for f in files if f["packagetype"] == "sdist"]
        wheels = [f for f in files if f["packagetype"] == "bdist_wheel" and
                  ("none-any" in f["filename"] or "x86_64" in f["filename"])]
        pick = (sdist or wheels) if engine == "vllm" else (wheels or sdist)
        if pick:
            url = urllib.parse.urljoin(PYPI.format(engine), pick[0]["url"])
            out.append((version, v, url, pick[0]["filename"]))
    return sorted(out)


def fetch(engine, v, url, filename):
    d = os.path.join(CACHE, "archives")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, filename)
    if not os.path.exists(path):
        say(f"downloading {filename}")
        urllib.request.urlretrieve(url, path + ".part")
        os.rename(path + ".part", path)
    return path


def keep(name, engine):
    """A file of the package itself: Python and the data files it reads, no compiled code."""
    parts = name.split("/")
    return parts[0] == engine and not name.endswith((".so", ".cu", ".cuh", ".cpp", ".h", ".hip")) and not name.endswith("/")


def extract(engine, v, archive):
    """The release's package files under CACHE/src/<engine>-<v>/ (PYTHONPATH for it)."""
    dest = os.path.join(CACHE, "src", f"{engine}-{v}")
    if os.path.exists(os.path.join(dest, ".done")):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if keep(n, engine):
                    z.extract(n, dest)
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                name = m.name.split("/", 1)[1] if "/" in m.name else ""
                if m.isfile() and keep(name, engine):
                    target = os.path.join(dest, name)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with t.extractfile(m) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
    version_py = os.path.join(dest, engine, "_version.py")
    if not os.path.exists(version_py):
        # setuptools-scm writes it at build time; an sdist of some releases has none.
        open(version_py, "w").write(f"__version__ = version = {v!r}\n")
    open(os.path.join(dest, ".done"), "w").close()
    return dest


# Releases whose imports need older libraries than the environment's (vLLM 0.9 registers
# its own `aimv2` config, which transformers has from 4.54 on): a `pip --target` directory
# after the release's files.
COMPAT = [
    ("vllm", "<0.10", "tf-4.53", ["transformers==4.53.3", "tokenizers==0.21.4", "huggingface_hub==0.36.0",
                                   "kernels==0.7.0"]),
    # sglang 0.4's utils import triton.runtime.cache.default_cache_dir, gone from triton 3.3.
    ("sglang", "<0.5", "triton-3.2", ["triton==3.2.0"]),
    # sglang 0.5.11 to 0.5.18 register their own `qwen3_asr` config, which later transformers
    # have (they pin transformers 5.6 to 5.12).
    ("sglang", ">=0.5.11, <0.5.19", "tf-5.12", ["transformers==5.12.1", "tokenizers==0.22.2", "huggingface_hub==1.33.0",
                                             "kernels==0.15.2"]),
]


def compat_path(engine, version):
    for e, spec, name, pins in COMPAT:
        if e == engine and SpecifierSet(spec, prereleases=True).contains(version):
            d = os.path.join(CACHE, "compat", name)
            if not os.path.exists(os.path.join(d, ".done")):
                say(f"installing {' '.join(pins)} into {d} for {engine} {spec}")
                subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", d, *pins],
                               check=True)
                open(os.path.join(d, ".done"), "w").close()
            return d
    return None


def describe(engine, src, version=None):
    """The parser's long options from the files at `src` (None: the installed release), and
    what infera's wrapper meets building it (None: it builds)."""
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", VLLM_LOGGING_LEVEL="ERROR",
               # No plugin of the environment's own vLLM is loaded into another release.
               VLLM_PLUGINS="")
    path = [p for p in (src, version and compat_path(engine, version)) if p]
    if path:
        env["PYTHONPATH"] = ":".join(path)
    else:
        env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-c", DESCRIBE[engine]], env=env, capture_output=True, text=True, cwd="/")
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if src and not got["file"].startswith(src):
        raise RuntimeError(f"imported {got['file']}, not the release's files under {src}")
    return got["options"], got["wrapper"]


def record_one(engine, version, v, url, filename):
    """The release's options and wrapper verdict, kept in CACHE/results (a release's files
    do not change; delete the directory to record again)."""
    kept = os.path.join(CACHE, "results", f"{engine}-{v}.json")
    if os.path.exists(kept):
        got = json.load(open(kept))
        return got["options"], got["wrapper"]
    options, wrapper = describe(engine, extract(engine, v, fetch(engine, v, url, filename)), version)
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    json.dump({"options": options, "wrapper": wrapper}, open(kept, "w"))
    return options, wrapper


def runs(recorded, every):
    """Consecutive releases (oldest first) with equal sets (and the same wrapper verdict), as
    [(versions, options, wrapper)]. Releases are consecutive when no release of `every` (all of
    the engine's on PyPI) lies between them: a run proves the range it spans."""
    out, position = [], {v: i for i, v in enumerate(every)}
    for v, opts, wrapper, spec in recorded:
        last = out[-1] if out else None
        if last and last[1:] == (opts, wrapper, spec) and position[v] == position[last[0][-1]] + 1:
            last[0].append(v)
        else:
            out.append(([v], opts, wrapper, spec))
    return out


def header(engine, versions, n, wrapper, spec):
    how = ("vllm.entrypoints.openai.cli_args.make_arg_parser(argparse.ArgumentParser(add_help=False, "
           "allow_abbrev=False)), the platform set to CPU" if engine == "vllm" else
           "ServerArgs.add_cli_args(argparse.ArgumentParser(add_help=False))")
    return (f"# {engine} long options ({n}), the same set from each of these releases' own parsers:\n"
            f"# releases: {' '.join(versions)}\n"
            f"# range: {spec} (every release of it on PyPI is recorded, in these files)\n"
            f"# parser: {how}; its _option_string_actions\n"
            f"# recorded by: scripts/check-engine-parsers --options {engine}\n"
            + (f"# wrapper-fails: {WRAPPER[engine]} on CPython {PY}: {wrapper}; the set is the release's own "
               f"FlexibleArgumentParser's (`vllm serve`)\n" if wrapper else ""))


def write(engine, out_dir, groups):
    for old in os.listdir(out_dir):
        if old.startswith(f"{engine}-") and old.endswith(".txt"):
            os.remove(os.path.join(out_dir, old))
    for versions, opts, wrapper, spec in groups:
        path = os.path.join(out_dir, f"{engine}-{versions[0]}.txt")
        with open(path, "w") as f:
            f.write(header(engine, versions, len(opts), wrapper, spec))
            f.write("\n".join(opts) + "\n")
        say(f"{path}: {len(opts)} options, releases {' '.join(versions)}")


def committed(out_dir, engine):
    """{release: (options, whether the wrapper fails)} from the committed files."""
    sets = {}
    for name in sorted(os.listdir(out_dir)):
        if not (name.startswith(f"{engine}-") and name.endswith(".txt")):
            continue
        lines = open(os.path.join(out_dir, name)).read().splitlines()
        rel = next(l for l in lines if l.startswith("# releases:")).split(":", 1)[1].split()
        opts = [l for l in lines if l.startswith("--")]
        fails = any(l.startswith("# wrapper-fails:") for l in lines)
        for r in rel:
            sets[r] = (opts, fails)
    return sets


def main():
    cmd, engine = sys.argv[1], sys.argv[2]
    if cmd == "record":
        specs, out_dir = sys.argv[3:-1], sys.argv[-1]
        every = [x[1] for x in releases(engine, ">=0")]
        wanted = sorted({(x, spec) for spec in specs for x in releases(engine, spec)})
        recorded, failed = [], []
        for (version, v, url, filename), spec in wanted:
            try:
                opts, wrapper = record_one(engine, version, v, url, filename)
                say(f"{engine} {v}: {len(opts)} options" + (f" (the wrapper fails: {wrapper})" if wrapper else ""))
                recorded.append((v, opts, wrapper, spec))
            except Exception as e:  # noqa: BLE001 - said, and the run fails
                say(f"{engine} {v}: FAILED: {e}")
                failed.append(v)
        if failed:
            say(f"not recorded: {' '.join(failed)}; nothing written")
            sys.exit(1)
        write(engine, out_dir, runs(recorded, every))
    elif cmd == "check":
        args = sys.argv[3:]
        out_dir = args[args.index("--dir") + 1]
        wanted = [a for i, a in enumerate(args) if a != "--dir" and (i == 0 or args[i - 1] != "--dir")]
        have = committed(out_dir, engine)
        index = {v: (version, v, url, fn) for version, v, url, fn in releases(engine, ">=0")}
        bad = 0
        for v in wanted:
            version, v, url, fn = index[v]
            # From the parser itself, never from CACHE/results.
            opts, wrapper = describe(engine, extract(engine, v, fetch(engine, v, url, fn)), version)
            want, fails = have.get(v, (None, None))
            if want is None:
                say(f"{engine} {v}: no committed list names this release")
                bad += 1
            elif fails != (wrapper is not None):
                say(f"{engine} {v}: the committed list says the wrapper {'fails' if fails else 'builds'}; it {wrapper or 'builds'}")
                bad += 1
            elif opts != want:
                extra, gone = sorted(set(opts) - set(want)), sorted(set(want) - set(opts))
                say(f"{engine} {v}: the committed list differs from its parser: parser only {extra}, list only {gone}")
                bad += 1
            else:
                say(f"{engine} {v}: {len(opts)} options, as committed" + (f" (the wrapper fails: {wrapper})" if wrapper else ""))
        sys.exit(1 if bad else 0)
    elif cmd == "compare-installed":
        import importlib.metadata as md
        v = md.version(engine)
        index = {x[1]: x for x in releases(engine, ">=0")}
        installed, _ = describe(engine, None)
        from_archive, _ = record_one(engine, *index[v])
        if installed != from_archive:
            say(f"{engine} {v}: installed {len(installed)} options, from its archive {len(from_archive)}: "
                f"{sorted(set(installed) ^ set(from_archive))}")
            sys.exit(1)
        say(f"{engine} {v}: the installed release and its archive's files give the same {len(installed)} options")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
