"""How long the fork server's imports take on a cold page cache, with and without reading their files ahead
(pipeline/page_cache.py), in fresh interpreters; prints a table and writes JSON.

    python benchmarks/cold_start.py --out cold_start.json [--packages torch,sympy,...]

Run it first thing on a fresh machine: its first arm is the machine's own cold import. The other arms need the
page cache emptied between them (`/proc/sys/vm/drop_caches`, root); where that is refused they are measured warm
and say so. Arms:
- cold_import: the preload imports on the fresh machine's cache;
- warm_import: the same again, everything cached;
- read_then_import: the cache emptied, the files read ahead (32 threads), then the imports;
- read_beside_import: the cache emptied, the reader started and the imports at once (what the fork server does).
Stdlib only besides the imports it times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.executors import PRELOAD, PRELOAD_COMPILE  # noqa: E402
from pipeline.page_cache import PACKAGES  # noqa: E402

IMPORT = ("import time; t = time.perf_counter(); import {mods}; "
          "print(round(time.perf_counter() - t, 3))")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "OMP_NUM_THREADS": "1"}


def timed_import(modules: list[str]) -> float:
    """Seconds a fresh interpreter takes to import `modules`, from its start."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", IMPORT.format(mods=", ".join(modules))], env=_env(), check=True,
                         capture_output=True, text=True)
    inner = float(out.stdout.strip().splitlines()[-1])
    return round(max(inner, time.perf_counter() - t0), 3)


def start_reader(packages: list[str], budget_s: float = 60.0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline.page_cache", str(budget_s), *packages], env=_env(),
                            stdout=subprocess.PIPE, text=True)


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
    ap.add_argument("--packages", default=",".join(PACKAGES))
    args = ap.parse_args()
    packages = args.packages.split(",")
    modules = [*PRELOAD, *PRELOAD_COMPILE]
    arms: dict[str, dict] = {}
    arms["cold_import"] = {"seconds": timed_import(modules)}
    arms["warm_import"] = {"seconds": timed_import(modules)}
    arms["torch_only_warm"] = {"seconds": timed_import(["torch"])}
    dropped = drop_caches()
    if dropped:
        arms["cold_again"] = {"seconds": timed_import(modules)}
        drop_caches()
    reader = start_reader(packages)
    read = json.loads(reader.communicate()[0].strip().splitlines()[-1])
    arms["read_then_import"] = {"seconds": round(read["seconds"] + timed_import(modules), 3), "read": read,
                                "cache_emptied": dropped}
    if dropped:
        drop_caches()
    t0 = time.perf_counter()
    reader = start_reader(packages)
    beside = timed_import(modules)
    arms["read_beside_import"] = {"seconds": beside, "cache_emptied": dropped,
                                  "reader_s": round(time.perf_counter() - t0, 3)}
    reader.kill()
    reader.wait()
    result = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "modules": modules, "packages": packages,
              "cache_emptied_between_arms": dropped, "arms": arms}
    print(f"{'arm':<20} {'seconds':>8}")
    for name, arm in arms.items():
        print(f"{name:<20} {arm['seconds']:>8.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
