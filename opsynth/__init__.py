"""What every opsynth package shares, below all of them: the error types (errors.py)."""
