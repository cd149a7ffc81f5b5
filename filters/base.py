"""The filter contract: a check looks at one record and returns None (keep) or a one-line reason (drop)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

_TASK_ID = re.compile(r"\b[0-9a-f]{16}\b")
_QUANTITY = re.compile(r"\b\d+(?:\.\d+)? ?(GiB|MiB|KiB|GB|MB|ms|s)\b")
_ADDRESS = re.compile(r"\bat 0x[0-9a-f]+\b")  # an object's repr in an exception: differs per process

Check = Callable[[dict[str, Any], Any], "str | None"]


def decide(record: dict[str, Any], checks: Sequence[Check], settings: Any) -> tuple[bool, str]:
    """Apply checks in order; the first reason wins, so every drop names exactly one cause."""
    for check in checks:
        reason = check(record, settings)
        if reason:
            return False, reason
    return True, ""


def reason_kind(reason: str) -> str:
    """The countable part of a reason: details in parentheses, task ids and measured quantities dropped, so
    reasons group ("peak memory 8.63 GiB > 8 GiB" and "peak memory 10.7 GiB > 8 GiB" are one kind)."""
    return _ADDRESS.sub("at 0x...", _QUANTITY.sub(r"N \1", _TASK_ID.sub("another task", reason.split(" (")[0]))).strip()
