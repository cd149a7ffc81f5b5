"""How long the fork server's imports take, as installed and with our bytecode cache (pipeline/gpu/bytecode.py), in
fresh interpreters; prints a table and writes JSON.

    python benchmarks/cold_start.py --out cold_start.json [--cache DIR]

Arms, in this order (the first is the machine's own cold start only when nothing imported torch before it):
- as_installed: the preload imports with the installation's bytecode, or none;
- as_installed_again: the same, the page cache warm;
- torch_only: `import torch` alone, as installed;
- compile_ahead: an empty cache folder (--cache, removed first), every package compiled ahead on every core;
- from_cache: the preload imports reading that folder's bytecode;
- cache_cold: the page cache emptied (`/proc/sys/vm/drop_caches`, root; said when refused), from_cache again.
Stdlib only besides the imports it times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.gpu.bytecode import COMPILE_AHEAD_VAR, PACKAGES, PREFIX_VAR  # noqa: E402
from pipeline.gpu.executors import PRELOAD, PRELOAD_COMPILE  # noqa: E402

IMPORT = ("import time; t = time.perf_counter(); import {mods}; "
          "print(round(time.perf_counter() - t, 3))")


def _env(cache: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1"}
    if cache is not None:  # as pipeline.gpu.bytecode.with_cache sets it: PYTHONDONTWRITEBYTECODE stays as it is
        env[PREFIX_VAR] = str(cache)
    return env


def _child(code: str, cache: Path | None) -> tuple[float, str]:
    """(seconds from the interpreter's start to its end, its last line of output)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=_env(cache), check=True, capture_output=True, text=True)
    return round(time.perf_counter() - t0, 3), out.stdout.strip().splitlines()[-1]


def timed_import(modules: list[str], cache: Path | None = None) -> float:
    """Seconds a fresh interpreter takes to import `modules`, from its start to its end."""
    return _child(IMPORT.format(mods=", ".join(modules)), cache)[0]


def timed_compile_ahead(packages: list[str], cache: Path) -> dict:
    code = (f"import json, os; os.environ[{COMPILE_AHEAD_VAR!r}] = {','.join(packages)!r}; "
            "from pipeline.gpu.bytecode import compile_ahead_from_env as c; print(json.dumps(c()))")
    seconds, line = _child(code, cache)
    return {"seconds": seconds, **{k: v for k, v in json.loads(line).items() if k != "seconds"}}


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "opsynth-cold-start-pycache")
    args = ap.parse_args()
    modules = [*PRELOAD, *PRELOAD_COMPILE]
    arms: dict[str, dict] = {}
    arms["as_installed"] = {"seconds": timed_import(modules)}
    arms["as_installed_again"] = {"seconds": timed_import(modules)}
    arms["torch_only"] = {"seconds": timed_import(["torch"])}
    shutil.rmtree(args.cache, ignore_errors=True)
    arms["compile_ahead"] = timed_compile_ahead(list(PACKAGES), args.cache)
    arms["from_cache"] = {"seconds": timed_import(modules, args.cache)}
    dropped = drop_caches()
    arms["cache_cold" if dropped else "cache_cold_refused"] = {"seconds": timed_import(modules, args.cache)}
    import torch

    from pipeline.gpu.bytecode import ships_bytecode

    result = {"python": sys.version.split()[0], "torch": torch.__version__, "cpus": os.cpu_count(),
              "torch_ships_bytecode": ships_bytecode("torch"),
              "dont_write_bytecode_env": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")), "modules": modules,
              "packages": list(PACKAGES), "arms": arms}
    print(f"{'arm':<20} {'seconds':>8}")
    for name, arm in arms.items():
        print(f"{name:<20} {arm['seconds']:>8.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
