"""Moved to detectors/dedupe.py (a detector library, apart from the measured checks in filters/); this name is the
same module object, so old imports keep working."""

import sys

from detectors import dedupe as _moved

sys.modules[__name__] = _moved
