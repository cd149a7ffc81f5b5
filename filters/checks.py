"""The measured checks, in the order the filter applies them, and which of them the eager runs alone decide.

The filter stage applies CHECKS to every measurement; a profile worker applies EAGER_CHECKS before compiling, so
a task they reject is not compiled, and UNTIMED_CHECKS before its timed runs, so a task they reject is not timed.
Both read them here, with the config's filter section as settings.
"""

from __future__ import annotations

from filters.degenerate import OUTPUT_CHECKS
from filters.determinism import compiles_and_agrees, deterministic
from filters.labels import labels_match
from filters.runtime import eager_in_window, peak_memory_under_cap, ran_ok, timed, timing_undisturbed
from filters.shortcut_checks import no_shortcuts

# what the eager runs alone decide (the runtime window is not among them: eager timing comes last)
EAGER_CHECKS = (deterministic, *OUTPUT_CHECKS, no_shortcuts)
# what is decided before the timed runs: a task they reject is not timed (profile.skip_timing_when_rejected)
UNTIMED_CHECKS = (*EAGER_CHECKS, compiles_and_agrees)
# order matters: the first failing check is the reason recorded, so the eager checks come before the compile's;
# `timed` comes last: a task not timed because a check rejected it is rejected for that check's reason
CHECKS = (ran_ok, eager_in_window, timing_undisturbed, *EAGER_CHECKS, peak_memory_under_cap, compiles_and_agrees,
          labels_match, timed)
