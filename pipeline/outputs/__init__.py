"""What is built from a finished run: the published dataset and its card, plots, DuckDB reports, the Hub upload,
the release re-check and audit exports."""
