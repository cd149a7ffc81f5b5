"""Progress of a stage: a tqdm bar on a terminal; elsewhere (CI, nohup, a cluster job) one plain line at a steady
interval, so a log shows progress, not silence.

Off a terminal a background thread prints, every `OPSYNTH_PROGRESS_S` seconds (default 20):

    [profile] 40/72 tasks (56%), 0.83 tasks/s, accepted 33, ETA 38s
    [decontaminate] comparing with 540 reference problems: 72 tasks, 45s so far

The thread prints whatever the stage last reported, so a long single step (a slow trace, a big comparison)
still shows that it is alive.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO

DEFAULT_INTERVAL_S = 20.0


def interval_s() -> float:
    try:
        return max(0.05, float(os.environ.get("OPSYNTH_PROGRESS_S", DEFAULT_INTERVAL_S)))
    except ValueError:
        return DEFAULT_INTERVAL_S


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """`update(n)` as tasks finish, `note(text)` for what the stage adds (accepted so far, top reasons), `phase(text)`
    for a step without per-task counts. Use as a context manager."""

    def __init__(self, stage: str, total: int, initial: int = 0, unit: str = "task", stream: IO[str] | None = None,
                 terminal: bool | None = None) -> None:
        self.stage, self.total, self.unit = stage, total, unit
        self.initial = self.done = initial
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._note = self._phase = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None
        is_tty = terminal if terminal is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        if is_tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=stage, unit=unit, file=self.stream)
        else:
            self._thread = threading.Thread(target=self._beat, name=f"progress-{stage}", daemon=True)
            self._thread.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def note(self, text: str) -> None:
        self._note = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def phase(self, text: str) -> None:
        self._phase = text
        if self._bar is not None:
            self._bar.set_description_str(f"{self.stage}: {text}" if text else self.stage)

    def restart_clock(self) -> None:
        """Measure the rate from now (what came before was instant: tasks skipped, shards already done)."""
        with self._lock:
            self.initial, self.started = self.done, time.monotonic()

    def line(self) -> str:
        """The plain progress line, as printed off a terminal."""
        with self._lock:
            done = self.done
        elapsed = time.monotonic() - self.started
        head = f"[{self.stage}]" + (f" {self._phase}:" if self._phase else "")
        units = f"{self.unit}s"
        now = done - self.initial
        if not now and self._phase:
            text = f"{head} {self.total} {units}, {_duration(elapsed)} so far"
        else:
            pct = f" ({100 * done / self.total:.0f}%)" if self.total else ""
            rate = now / elapsed if elapsed > 0 else 0.0
            eta = f", ETA {_duration((self.total - done) / rate)}" if rate > 0 and done < self.total else ""
            text = f"{head} {done}/{self.total} {units}{pct}, {rate:.2f} {units}/s{eta}"
        return text + (f", {self._note}" if self._note else "")

    def _beat(self) -> None:
        while not self._stop.wait(interval_s()):
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._bar is not None:
            self._bar.close()
