"""Scripts that regenerate the pinned data in operators/ (aten_pins*.json, batch_linear.json, foreign_pins.json,
torch_meta.json, calibration.json): `python -m pinning.NAME`. Nothing in operators, filters, detectors or pipeline
imports them; tests do, to say when a pinned file is stale."""
