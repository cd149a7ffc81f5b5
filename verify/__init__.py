"""The reward a training job calls: `verify(task, candidate)` checks a candidate `ModelNew` against a task's `Model`
(correctness on fresh draws and shape variants, hack checks, interleaved timing) and returns the CUDA Agent reward."""

from verify.api import verify, verify_batch

__all__ = ["verify", "verify_batch"]
