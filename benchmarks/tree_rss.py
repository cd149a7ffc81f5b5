"""Peak resident memory of a command and every process it starts, sampled from /proc.

`/usr/bin/time -v` reports the largest single process that was waited for; a stage that keeps several tracer
subprocesses alive at once needs the sum over the whole process tree too. This script runs a command, polls
/proc every `--interval` seconds, and records the peak of the tree's summed RSS, the peak of any one process
(with its command line) and how many processes were alive at the tree's peak.

    python benchmarks/tree_rss.py --name labels_rss -- opsynth audit rows.parquet --out runs/r --stages labels

prints a table and writes benchmarks/results/NAME.json. Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
RESULTS = Path(__file__).with_name("results")


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids over all processes visible in /proc."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:  # the process ended between listdir and read
            continue
        # the command name may hold spaces and parentheses: fields start after the last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root: int) -> list[int]:
    """root and all its descendants alive now."""
    kids, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (0 once it has ended)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def measure(cmd: list[str], interval: float) -> dict[str, Any]:
    """Run cmd to the end, sampling its process tree's RSS; returns the peaks and the exit code."""
    t0 = time.time()
    proc = subprocess.Popen(cmd)
    peak_tree = peak_one = samples = procs_at_peak = max_procs = 0
    peak_one_cmd = ""
    while proc.poll() is None:
        pids = tree(proc.pid)
        sizes = {p: rss_bytes(p) for p in pids}
        total = sum(sizes.values())
        samples += 1
        max_procs = max(max_procs, len(pids))
        if total > peak_tree:
            peak_tree, procs_at_peak = total, len(pids)
        top = max(sizes, key=sizes.get)
        if sizes[top] > peak_one:
            peak_one, peak_one_cmd = sizes[top], cmdline(top)
        time.sleep(interval)
    # ru_maxrss of waited-for descendants (KiB on Linux): catches a spike shorter than the polling interval
    waited_max = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"command": " ".join(cmd), "exit_code": proc.returncode, "wall_s": round(time.time() - t0, 1),
            "interval_s": interval, "samples": samples, "peak_tree_rss_gb": round(peak_tree / 1e9, 3),
            "processes_at_tree_peak": procs_at_peak, "max_processes": max_procs,
            "peak_process_rss_gb": round(peak_one / 1e9, 3), "peak_process": peak_one_cmd[:200],
            "max_rss_waited_children_gb": round(waited_max / 1e9, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="results/NAME.json")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("give the command after --")
    res = measure(cmd, a.interval)
    width = max(len(k) for k in res)
    for k, v in res.items():
        print(f"{k:<{width}}  {v}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{a.name}.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
