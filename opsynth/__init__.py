"""What every opsynth package shares, below all of them: the error types (errors.py). `from opsynth import verify`
is the library call of the verifier (verify/), re-exported lazily so nothing below it imports verify."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("verify", "verify_batch"):
        from verify.api import verify, verify_batch

        return {"verify": verify, "verify_batch": verify_batch}[name]
    raise AttributeError(f"module 'opsynth' has no attribute {name!r}")
