"""CUDA's Multi-Process Service (MPS) for the profile workers of one machine (profile.mps).

Without MPS the CUDA contexts of different processes take turns on a GPU in time slices: a worker's checks,
compiled agreement draws and Triton autotuning benchmarks never run beside a neighbour's, however few SMs their
kernels fill. Under an MPS server they run side by side. Timed runs are unaffected: they hold the GPU lock
alone, so no neighbour has work on the GPU then (on the H200, 256 tasks measured in three arms on one machine:
eager medians within 0.06%, compiled within 0.05%; 18% less worker time per task).

The executor starts a private control daemon per GPU (its pipe and log folders in the executor's temporary folder,
passed to that GPU's workers in CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY; the daemon sees that GPU alone)
and stops it when it closes, so a run leaves no daemon behind and never touches one an administrator runs. What MPS
changes for faults: a fatal GPU fault of one client (an illegal memory access) is reported to every client of that
GPU, and its server takes no new client until they have all exited, so the executor replaces that GPU's idle workers
and measures again, once and alone on the GPU, each task whose worker saw its CUDA context poisoned
(pipeline.gpu.executors); a daemon per GPU keeps the other GPUs out of it.
Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"


class MpsDaemon:
    """One private MPS control daemon: `start` (a one-line problem or None), `env` for the workers, `stop`."""

    def __init__(self, root: Path, gpu: str | None = None) -> None:
        self.pipe, self.log = root / "mps-pipe", root / "mps-log"
        self.gpu = gpu  # the one GPU its server may use (CUDA_VISIBLE_DEVICES); None: what this process sees
        self.exe: str | None = None

    @property
    def running(self) -> bool:
        return self.exe is not None

    def _folders(self) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    def env(self) -> dict[str, str]:
        """What a worker's environment needs to be a client of this daemon ({} when it is not running)."""
        return self._folders() if self.running else {}

    def _env(self) -> dict[str, str]:
        """The control program's environment: ours, its folders, and the one GPU its server may use."""
        return {**os.environ, **self._folders(), **({"CUDA_VISIBLE_DEVICES": self.gpu} if self.gpu is not None else {})}

    def start(self) -> str | None:
        """Start the daemon; None when it runs, else why not (the workers then take turns on the GPU)."""
        exe = shutil.which(CONTROL)
        if exe is None:
            return (f"profile.mps: {CONTROL} is not on PATH (it ships with the NVIDIA driver), so the workers take "
                    "turns on the GPU; install it or set profile.mps = false")
        self.pipe.mkdir(parents=True, exist_ok=True)
        self.log.mkdir(parents=True, exist_ok=True)
        try:
            r = subprocess.run([exe, "-d"], env=self._env(), capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"profile.mps: `{CONTROL} -d` failed ({type(e).__name__}); the workers take turns on the GPU"
        if r.returncode != 0:
            why = (r.stderr or r.stdout).decode(errors="replace").strip().splitlines()
            return (f"profile.mps: `{CONTROL} -d` exited with {r.returncode} ({why[-1] if why else 'no output'}); "
                    "the workers take turns on the GPU")
        self.exe = exe
        return None

    def stop(self) -> None:
        """Ask the daemon to quit (its server goes with it once the workers are gone); no wait: nothing after it
        needs the daemon gone, and a profile call's seconds count until here."""
        if self.exe is None:
            return
        exe, self.exe = self.exe, None
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([exe], input=b"quit\n", env=self._env(), capture_output=True, timeout=30)
