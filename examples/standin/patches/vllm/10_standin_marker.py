"""STAND-IN engine patch, staged as patches/<engine>/ and patches/<engine>_<part>/.

The real patches fix vendor code before the engine starts (e.g. the Mooncake connector that
unpacks every Mamba-family layer as a 2-tuple, which Kimi-K3's KDA layers are not). Like them,
this one finds its target through the installed package without importing it, is idempotent,
and writes into the image (its site-packages), never into the payload: it leaves a marker
beside the engine package. Knobs for tests: INFERA_STANDIN_PATCH=fail exits 3, =hang sleeps, =hang-with-child
sleeps after starting `sleep N` (N: INFERA_STANDIN_HELPER_SECONDS, default 3599; a test's own).
"""
import importlib.util
import os
import sys
import time

engine = os.path.basename(os.path.dirname(os.path.abspath(__file__))).split("_")[0]
mode = os.environ.get("INFERA_STANDIN_PATCH", "")
if mode == "fail":
    print(f"standin patch for {engine}: anchor not found", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    time.sleep(3600)
if mode == "hang-with-child":  # a helper it started, holding the launcher's stderr
    import subprocess
    subprocess.Popen(["sleep", os.environ.get("INFERA_STANDIN_HELPER_SECONDS", "3599")])
    time.sleep(3600)
spec = importlib.util.find_spec(engine)
if spec is None or not spec.submodule_search_locations:
    print(f"standin patch for {engine}: no {engine} here, nothing to do")
    sys.exit(0)
marker = os.path.join(list(spec.submodule_search_locations)[0], ".infera-standin-patched")
with open(marker, "a") as f:
    f.write(f"{os.path.basename(__file__)} cwd={os.getcwd()}\n")
print(f"standin patch for {engine}: marked {marker}")
