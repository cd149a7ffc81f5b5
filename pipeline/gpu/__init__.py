"""The GPU runtime: what a worker does with one task (harness), the executors and fork server that run workers,
GPU sharing, timing locks, caches and warm-up. Imports torch and pyarrow only."""
