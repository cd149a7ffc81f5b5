"""Moved to detectors/contamination.py (a detector library, apart from the measured checks in filters/); this name
is the same module object, so old imports and monkeypatches keep working."""

import sys

from detectors import contamination as _moved

sys.modules[__name__] = _moved
