"""The one error type the CLI turns into a single readable line (what is wrong, and the fix)."""


class OpsynthError(Exception):
    """A user-facing problem: bad input, a config mismatch, a missing dependency."""


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (Ctrl-C, SIGTERM from a scheduler), here or in a worker."""


def require(module: str, extra: str):
    """Import an optional heavy package, or fail with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise OpsynthError(f"{module} is not installed; run: pip install 'opsynth[{extra}]'") from None
