"""What a profile worker is told: one frozen, typed contract built from the config, sent as JSON on the worker's
stdin and rebuilt (and checked again) in the worker, which reads it by attribute.

Every value comes from the config's own sections, so no default lives here: the profile section (timing,
compilation, memory cap), the filter section (the eager checks' thresholds, the runtime window and peak-memory
cap of early rejects, the verifier tolerance of the input-sensitivity ratio), the weights seed and the target
device's roofline ceilings. stdlib and pipeline.rundir.config only: the worker runs on a bare GPU image.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pipeline.rundir.config import (
    Config,
    ConfigError,
    FilterSection,
    ProfileSection,
    build_section,
    validate_filter,
    validate_profile,
)


@dataclass(frozen=True)
class WorkerSettings:
    profile: ProfileSection
    filter: FilterSection
    seed: int  # weights and input draws (run.seed)
    # (fp32 TFLOP/s without TF32, copy TB/s) of the target device, for the roofline fraction
    peaks: tuple[float, float]
    # workers sharing one GPU, set by the executor: the GPU's task budget leaves each its CUDA context
    workers_per_gpu: int

    @classmethod
    def from_config(cls, cfg: Config, workers_per_gpu: int | None = None) -> WorkerSettings:
        return cls(profile=cfg.profile, filter=cfg.filter, seed=cfg.run.seed,
                   peaks=(cfg.sample.tflops_fp32, cfg.sample.bandwidth_gbps / 1000.0),
                   workers_per_gpu=cfg.run.workers if workers_per_gpu is None else workers_per_gpu)

    def with_profile(self, **changes: Any) -> WorkerSettings:
        """A copy with profile fields replaced (an executor's own needs: no memory cap in-process, say)."""
        return dataclasses.replace(self, profile=dataclasses.replace(self.profile, **changes))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "worker settings") -> WorkerSettings:
        """The settings a parent sent, checked as the config is at load: an unknown, missing, mistyped or
        out-of-range value is one ConfigError line, so a worker of another version fails at once."""
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) != known:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ConfigError(f"config error in {where}: expected keys {sorted(known)}, got {got}; "
                              "start workers from the same checkout as the parent")
        profile = validate_profile(build_section(ProfileSection, data["profile"], where, "profile"), where)
        filt = validate_filter(build_section(FilterSection, data["filter"], where, "filter"), where)
        peaks, seed, wpg = data["peaks"], data["seed"], data["workers_per_gpu"]
        ok_peaks = isinstance(peaks, list | tuple) and len(peaks) == 2 and all(
            isinstance(p, int | float) and not isinstance(p, bool) and p > 0 for p in peaks)
        if not ok_peaks:
            raise ConfigError(f"config error in {where}: peaks must be two numbers > 0 (got {peaks!r})")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigError(f"config error in {where}: seed must be an integer (got {seed!r})")
        if not isinstance(wpg, int) or isinstance(wpg, bool) or wpg < 1:
            raise ConfigError(f"config error in {where}: workers_per_gpu must be an integer >= 1 (got {wpg!r})")
        return cls(profile=profile, filter=filt, seed=seed, peaks=(float(peaks[0]), float(peaks[1])),
                   workers_per_gpu=wpg)
