"""Build every CUDA candidate of this corpus once, ahead of verification, into one torch extensions directory.

    python benchmarks/verify_cuda/prebuild.py --ext-dir DIR --jobs N

Each candidate file builds its extension with load_inline at import; this imports every candidate listed in
pairs.jsonl (or named on the command line) in a process pool with TORCH_EXTENSIONS_DIR=DIR and
TORCH_CUDA_ARCH_LIST (default "9.0", the H200), printing one line per file: the build time or the compiler's
message. Verify later loads the cached builds when it runs with the same directory and the same arch list
(`verify(..., extensions_dir=DIR)`, or TORCH_EXTENSIONS_DIR=DIR in its environment, which its worker inherits):
torch's JIT loader keys a build on the sources and flags, and ninja rebuilds when the nvcc command line changes,
so a different TORCH_CUDA_ARCH_LIST means a rebuild (still correct, only slower)."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def listed(pairs: Path) -> list[Path]:
    return [ROOT / json.loads(ln)["candidate"] for ln in pairs.read_text().splitlines() if ln.strip()]


def build_one(path: str) -> tuple[str, bool, float, str]:
    """Import one candidate file in this (fresh) process: its load_inline call builds or loads the extension."""
    t0 = time.monotonic()
    try:
        src = Path(path).read_text()
        ns: dict = {"__name__": "candidate"}
        exec(compile(src, path, "exec"), ns)  # noqa: S102 - the corpus's own files
        ok = "ModelNew" in ns
        return path, ok, time.monotonic() - t0, "" if ok else "no ModelNew"
    except Exception as e:  # noqa: BLE001 - the compiler's message is the result
        return path, False, time.monotonic() - t0, f"{type(e).__name__}: {e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="candidate files (default: every one in pairs.jsonl)")
    ap.add_argument("--ext-dir", required=True, help="TORCH_EXTENSIONS_DIR shared with the verifier")
    ap.add_argument("--jobs", type=int, default=4, help="concurrent builds")
    ap.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST (9.0: H100/H200)")
    ap.add_argument("--pairs", default=str(HERE / "pairs.jsonl"))
    a = ap.parse_args(argv)
    files = [Path(f).resolve() for f in a.files] or listed(Path(a.pairs))
    Path(a.ext_dir).mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(a.ext_dir).resolve())  # inherited by the spawned builders
    os.environ["TORCH_CUDA_ARCH_LIST"] = a.arch
    os.environ.setdefault("MAX_JOBS", str(max(1, (os.cpu_count() or 4) // max(1, a.jobs))))
    failed = 0
    t0 = time.monotonic()
    with mp.get_context("spawn").Pool(max(1, a.jobs)) as pool:
        for path, ok, secs, msg in pool.imap_unordered(build_one, [str(f) for f in files]):
            name = Path(path).name
            if ok:
                print(f"{name}: built in {secs:.1f} s", flush=True)
            else:
                failed += 1
                print(f"{name}: FAILED after {secs:.1f} s: {msg[-3000:]}", flush=True)
    print(f"{len(files) - failed}/{len(files)} built into {a.ext_dir} in {time.monotonic() - t0:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
