"""The pinned GPU calibration of the cost model (operators/calibration.json), read once per process.

The roofline (operators/cost.py) and the peak model (operators/peak.py) price every ATen op alike; a GPU run
shows some whose CUDA kernels are far from that: a sort-based kthvalue two orders of magnitude slower than its
bytes, an index_select that reads a few rows of the tensor the roofline charges in full, a cdist or nansum that
holds a copy of its inputs. The file lists only those, each with the tasks of the run that show it:

- `runtime`: ATen op -> factor on its kernels' roofline time (the launch overhead is left alone);
- `peak_workspace`: ATen op -> bytes held inside the kernel as multiples of its inputs' and output's bytes,
  replacing the op's `WORKSPACE` entry;
- `output_share`: the largest task output, as a share of the sampler's peak cap, that the profile worker ran
  (it holds a reference output beside a further forward).

`python -m pinning.calibrate --run DIR` regenerates it from a profiled run; tests check that every key is a
pinned ATen op and that the base WORKSPACE entries it was fitted over have not changed since.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


@cache
def calibration() -> dict[str, Any]:
    """The pinned calibration (an empty one when the file is absent)."""
    if not CALIBRATION_FILE.exists():
        return {"runtime": {}, "peak_workspace": {}, "output_share": None}
    return json.loads(CALIBRATION_FILE.read_text())


@cache
def runtime_factors() -> dict[str, float]:
    """ATen op -> factor on its roofline kernel time."""
    return {name: float(e["factor"]) for name, e in calibration().get("runtime", {}).items()}


@cache
def peak_workspaces() -> dict[str, tuple[float, float]]:
    """ATen op -> (multiple of input bytes, multiple of output bytes) held inside the kernel."""
    return {name: (float(e["in"]), float(e["out"])) for name, e in calibration().get("peak_workspace", {}).items()}


def output_share() -> float | None:
    """Largest output bytes over the sampler's peak cap that the profile worker ran (None: no bound)."""
    v = calibration().get("output_share")
    return None if v is None else float(v["share"])


def reload() -> None:
    """Forget the cached file (after regenerating it in-process)."""
    for f in (calibration, runtime_factors, peak_workspaces):
        f.cache_clear()
