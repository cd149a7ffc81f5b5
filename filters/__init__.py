"""Checks: a record (a measurement, a task's code) and the config's section in, None (keep) or a one-line reason
(drop) out. checks.py lists the measured ones in the filter's order and which the eager runs alone decide."""
