"""Detector libraries: what a task resembles, not whether a measurement passes. contamination (fingerprints, MinHash,
LCS against a reference index), dedupe (canonical graphs, de-templated code), reference_index (the index files a
sampler or decontaminate reads). numpy and pyarrow only."""
