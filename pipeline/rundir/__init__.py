"""The run store: config, table schemas, the run directory with its shards and markers, stage definitions and the
KernelBench reference index."""
