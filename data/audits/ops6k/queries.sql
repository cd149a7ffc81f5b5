-- The queries behind every number in README.md. Run from this folder:
--   duckdb -c ".read queries.sql"      (or paste one query into any DuckDB client)
-- verdicts.parquet has one row per CUDA-Agent-Ops-6K row (source_row = its position in the published file): the audit
-- run with its GPU sample (profile, filter, then dedupe over the rows the filter kept, as the pipeline runs them).
-- cpu_verdicts.parquet: the same rows and CPU stages, with dedupe run over every row the CPU stages kept (the funnel
-- before any GPU). Static check, label findings and contamination are the same in both.

-- Q1 rows, and rows refused by the static import check, by reason
SELECT count(*) AS rows FROM 'verdicts.parquet';
SELECT regexp_replace(import_reason, ' \(.*$', '') AS reason, count(*) AS rows
FROM 'verdicts.parquet' WHERE import_reason <> '' GROUP BY reason ORDER BY rows DESC;

-- Q2 byte-identical duplicates (a row whose code equals an earlier row's byte for byte), and the stage that drops them
SELECT count(*) AS byte_identical_duplicates FROM 'verdicts.parquet' WHERE byte_duplicate_of IS NOT NULL;
SELECT rejected_by, count(*) AS rows FROM 'cpu_verdicts.parquet' WHERE byte_duplicate_of IS NOT NULL
GROUP BY rejected_by ORDER BY rows DESC;

-- Q3 label findings per row, all rows and torch rows (the published audit's 550 of 5,929 counts torch rows)
SELECT label_finding, count(*) AS rows,
       count(*) FILTER (WHERE data_source LIKE 'torch#%') AS torch_rows
FROM 'verdicts.parquet' GROUP BY label_finding ORDER BY rows DESC;
SELECT count(*) FILTER (WHERE len(wrong_labels) > 0) AS rows_with_a_wrong_label,
       count(*) FILTER (WHERE len(missing_labels) > 0) AS rows_with_a_missing_label,
       count(*) FILTER (WHERE len(wrong_labels) > 0 OR len(missing_labels) > 0) AS rows_with_a_label_error,
       count(*) FILTER (WHERE label_finding IN ('wrong label', 'missing label', 'labels true')) AS judged_rows
FROM 'verdicts.parquet' WHERE data_source LIKE 'torch#%';

-- Q4 the operators behind each finding kind
SELECT 'wrong label' AS kind, op, count(*) AS rows FROM (SELECT unnest(wrong_labels) AS op FROM 'verdicts.parquet') GROUP BY op
UNION ALL SELECT 'missing label', op, count(*) FROM (SELECT unnest(missing_labels) AS op FROM 'verdicts.parquet') GROUP BY op
UNION ALL SELECT 'cannot judge', op, count(*) FROM (SELECT unnest(unknown_labels) AS op FROM 'verdicts.parquet') GROUP BY op
ORDER BY kind DESC, rows DESC, op LIMIT 60;

-- Q5 KernelBench overlaps: exact traced operator signature of a problem, per level, then every detector
SELECT kb_op_signature_level AS level, count(*) AS rows FROM 'verdicts.parquet'
WHERE kb_op_signature_match GROUP BY level ORDER BY level;
SELECT detector, count(*) AS rows FROM (SELECT unnest(detectors_fired) AS detector FROM 'verdicts.parquet')
GROUP BY detector ORDER BY rows DESC;
SELECT count(*) AS contaminated FROM 'verdicts.parquet' WHERE contaminated;

-- Q6 CPU funnel over all 6,000 rows: rows left after each code-only stage (labels are reported, not rejected, here)
SELECT count(*) AS rows,
       count(*) FILTER (WHERE import_reason = '') AS passed_import,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false)) AS kept_after_decontaminate,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false) AND dedupe_reason = '')
           AS kept_after_dedupe,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false) AND dedupe_reason = ''
                        AND label_finding NOT IN ('wrong label', 'missing label')) AS also_labels_true,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false) AND dedupe_reason = ''
                        AND label_finding <> 'wrong label') AS also_no_wrong_label
FROM 'cpu_verdicts.parquet';
SELECT regexp_replace(dedupe_reason, ' of [0-9a-f-]+.*$', '') AS reason, count(*) AS rows,
       count(*) FILTER (WHERE byte_duplicate_of IS NOT NULL) AS byte_identical
FROM 'cpu_verdicts.parquet' WHERE dedupe_reason <> '' GROUP BY reason ORDER BY rows DESC;

-- Q7 GPU part (null for rows outside the measured sample): rows measured, first filter reason, rows kept
SELECT count(*) FILTER (WHERE profiled) AS profiled, count(*) FILTER (WHERE profiled AND filter_reason = '') AS passed_filter,
       count(*) FILTER (WHERE kept) AS kept
FROM 'verdicts.parquet';
SELECT regexp_replace(filter_reason, ' \(.*$', '') AS reason, count(*) AS rows
FROM 'verdicts.parquet' WHERE profiled AND filter_reason <> '' GROUP BY reason ORDER BY rows DESC;

-- Q8 the transformers rows: 71 by data_source, 57 refused as needing the package (26 import it at module level, 31
-- only inside get_init_inputs, to build a config), the other 14 carry the model's code inline and import nothing
-- from it (13 traced, their class-name labels cannot be judged, 1 refused for importing torch._dynamo)
SELECT data_source = 'transformers' AS transformers_source,
       CASE WHEN import_reason LIKE 'needs package ''transformers''%'
            THEN regexp_extract(import_reason, 'imported (at module level|inside [A-Za-z_.]+\(\))', 0)
            ELSE coalesce(nullif(regexp_replace(import_reason, ' \(line.*$', ''), ''), 'passed the static check') END AS import,
       label_finding, count(*) AS rows
FROM 'verdicts.parquet' WHERE data_source = 'transformers' OR import_reason LIKE '%transformers%'
GROUP BY ALL ORDER BY rows DESC;

-- Q9 the measured sample: the first rows of the run's seeded random order (run_order) that the time-boxed profile
-- reached, `skipped` rows were dropped before the GPU (static check, decontaminate) and count in the sample
SELECT min(run_order) AS first, max(run_order) AS last, count(*) AS sample_rows,
       count(*) FILTER (WHERE profiled) AS profiled, count(*) FILTER (WHERE status = 'skipped') AS skipped,
       max(run_order) + 1 - count(*) AS positions_without_a_measurement
FROM 'verdicts.parquet' WHERE status IS NOT NULL;
SELECT status, rejected_by, count(*) AS rows FROM 'verdicts.parquet' WHERE status IS NOT NULL
GROUP BY ALL ORDER BY rows DESC;
-- the positions without a measurement: one contiguous batch of 64 rows (one shard)
SELECT min(run_order) AS from_position, max(run_order) AS to_position, count(*) AS rows FROM 'verdicts.parquet'
WHERE status IS NULL AND run_order <= (SELECT max(run_order) FROM 'verdicts.parquet' WHERE status IS NOT NULL);

-- Q10 GPU verdicts of the profiled rows, grouped by what the filter checks (each row counts under its first reason)
SELECT CASE WHEN filter_reason = '' THEN 'passed'
            WHEN filter_reason LIKE 'too fast%' OR filter_reason LIKE 'too slow%' THEN 'runtime window (1-100 ms eager)'
            WHEN filter_reason LIKE 'compile disagrees%' THEN 'compile agreement'
            WHEN filter_reason LIKE 'non-deterministic%' THEN 'determinism'
            WHEN filter_reason LIKE 'fakeable%' OR filter_reason LIKE 'input-insensitive%' THEN 'fakeable'
            WHEN filter_reason LIKE 'degenerate%' THEN 'degenerate output'
            WHEN filter_reason LIKE 'early_reject%' OR filter_reason LIKE 'oom%' THEN 'memory (over 8 GiB, or OOM)'
            WHEN filter_reason LIKE 'timing disturbed%' THEN 'timing disturbed by allocator retries'
            ELSE regexp_replace(filter_reason, ':.*$', '') END AS check_, count(*) AS rows,
       round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS pct_of_profiled
FROM 'verdicts.parquet' WHERE profiled GROUP BY check_ ORDER BY rows DESC;
SELECT regexp_replace(filter_reason, ' \(.*$', '') AS reason, count(*) AS rows,
       round(min(eager_ms), 3) AS min_eager_ms, round(quantile_cont(eager_ms, 0.5), 3) AS median_eager_ms,
       round(max(eager_ms), 3) AS max_eager_ms
FROM 'verdicts.parquet' WHERE profiled AND (filter_reason LIKE 'too %' OR filter_reason LIKE 'error%')
GROUP BY reason;

-- Q11 rows kept, extrapolated from the sample to all 6,000 rows, with a 95% Wilson interval (no finite-population
-- correction, so a little wide). Two estimates bracket the full run: `as_run` dedupes only within the sample (misses
-- duplicates whose twin is outside it, so high), `full_dedupe` also drops sample rows that dedupe over all rows drops
-- (cpu_verdicts: a duplicate whose twin later fails the filter would have been kept, so low)
WITH s AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE v.kept) AS as_run,
           count(*) FILTER (WHERE v.profiled AND v.filter_reason = '' AND c.kept) AS full_dedupe
    FROM 'verdicts.parquet' v JOIN 'cpu_verdicts.parquet' c USING (source_row) WHERE v.status IS NOT NULL),
e AS (SELECT unnest(['as_run', 'full_dedupe']) AS estimate, unnest([as_run, full_dedupe]) AS k, n FROM s),
w AS (SELECT *, k / n AS p, 1.96 AS z FROM e)
SELECT estimate, k AS kept_in_sample, n AS sample_rows, round(100 * p, 1) AS pct,
       round(6000 * p) AS of_6000,
       round(6000 * ((p + z * z / (2 * n)) - z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)) AS ci95_low,
       round(6000 * ((p + z * z / (2 * n)) + z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)) AS ci95_high
FROM w ORDER BY estimate;

-- Q12 the kept sample rows by label finding (labels are reported, not rejected, in this audit)
SELECT label_finding, count(*) AS kept FROM 'verdicts.parquet' WHERE kept AND status IS NOT NULL
GROUP BY label_finding ORDER BY kept DESC;

-- Q13 the same sample with the runtime window's floor removed (gpu_without_runtime_floor.parquet: `opsynth filter`
-- and `opsynth dedupe` again on the run with filter.min_eager_ms = 0, every other threshold the same), what the rows
-- under 1 ms would have failed next, and the kept estimate as in Q11
SELECT regexp_replace(n.filter_reason, ' \(.*$', '') AS next_reason, count(*) AS rows
FROM 'verdicts.parquet' v JOIN 'gpu_without_runtime_floor.parquet' n USING (source_row)
WHERE v.filter_reason LIKE 'too fast%' GROUP BY next_reason ORDER BY rows DESC;
WITH s AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE n.kept) AS as_run,
           count(*) FILTER (WHERE n.profiled AND n.filter_reason = '' AND c.kept) AS full_dedupe
    FROM 'gpu_without_runtime_floor.parquet' n JOIN 'cpu_verdicts.parquet' c USING (source_row)
    WHERE n.status IS NOT NULL),
e AS (SELECT unnest(['as_run', 'full_dedupe']) AS estimate, unnest([as_run, full_dedupe]) AS k, n FROM s),
w AS (SELECT *, k / n AS p, 1.96 AS z FROM e)
SELECT estimate, k AS kept_in_sample, n AS sample_rows, round(100 * p, 1) AS pct, round(6000 * p) AS of_6000,
       round(6000 * ((p + z * z / (2 * n)) - z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)) AS ci95_low,
       round(6000 * ((p + z * z / (2 * n)) + z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)) AS ci95_high
FROM w ORDER BY estimate;

-- Q14 rows naming operators foreign to the sampler's catalog (pinned in operators/foreign_pins.json)
SELECT op, count(*) AS rows FROM (SELECT DISTINCT source_row, unnest(ops) AS op FROM 'verdicts.parquet')
WHERE op IN ('nn.LSTM', 'nn.AdaptiveLogSoftmaxWithLoss', 'torch.isin', 'torch.stft', 'nn.SyncBatchNorm',
             'torch.view_as_complex') GROUP BY op ORDER BY rows DESC;
