"""Moved to opsynth/errors.py (below every package, so operators and filters import it without reaching up)."""

from opsynth.errors import Interrupted, OpsynthError, require

__all__ = ["Interrupted", "OpsynthError", "require"]
