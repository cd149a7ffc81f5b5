"""Off a terminal a stage prints plain progress lines at a steady interval (tasks done, rate, accepted, ETA)."""

import io
import time

from pipeline.progress import Progress


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def _wait_for(log: _Log, text: str, timeout: float = 5.0) -> str:
    end = time.monotonic() + timeout
    while text not in log.getvalue() and time.monotonic() < end:
        time.sleep(0.02)
    return log.getvalue()


def test_plain_lines_show_count_rate_accepted_and_eta(monkeypatch):
    monkeypatch.setenv("OPSYNTH_PROGRESS_S", "0.05")
    log = _Log()
    with Progress("profile", total=10, initial=2, stream=log) as bar:
        bar.update(3)
        bar.note("accepted 2 | fakeable 1")
        text = _wait_for(log, "5/10")
    line = [x for x in text.splitlines() if "5/10" in x][-1]
    assert line.startswith("[profile] 5/10 tasks (50%), ") and "tasks/s, ETA " in line
    assert line.endswith(", accepted 2 | fakeable 1")
    n = len(log.getvalue().splitlines())
    time.sleep(0.2)
    assert len(log.getvalue().splitlines()) == n  # closed: no more lines


def test_a_long_step_without_counts_still_prints(monkeypatch):
    monkeypatch.setenv("OPSYNTH_PROGRESS_S", "0.05")
    log = _Log()
    with Progress("decontaminate", total=72, stream=log) as bar:
        bar.phase("comparing with 540 reference problems")
        text = _wait_for(log, "so far")
    assert "[decontaminate] comparing with 540 reference problems: 72 tasks, 0s so far" in text


def test_on_a_terminal_no_plain_lines():
    class Tty(_Log):
        def isatty(self) -> bool:
            return True

    log = Tty()
    with Progress("sample", total=4, stream=log) as bar:
        bar.update(4)
    assert "[sample]" not in log.getvalue()
