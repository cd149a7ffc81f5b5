-- The queries behind every number in README.md. Run from this folder:
--   duckdb -c ".read queries.sql"      (or paste one query into any DuckDB client)
-- verdicts.parquet has one row per CUDA-Agent-Ops-6K row (source_row = its position in the published file).

-- Q1 rows, and rows refused by the static import check, by reason
SELECT count(*) AS rows FROM 'verdicts.parquet';
SELECT regexp_replace(import_reason, ' \(.*$', '') AS reason, count(*) AS rows
FROM 'verdicts.parquet' WHERE import_reason <> '' GROUP BY reason ORDER BY rows DESC;

-- Q2 byte-identical duplicates (a row whose code equals an earlier row's byte for byte)
SELECT count(*) AS byte_identical_duplicates FROM 'verdicts.parquet' WHERE byte_duplicate_of IS NOT NULL;

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

-- Q6 CPU funnel: rows left after each code-only stage (labels are reported, not rejected, in this audit)
SELECT count(*) AS rows,
       count(*) FILTER (WHERE import_reason = '') AS passed_import,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false)) AS kept_after_decontaminate,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false) AND dedupe_reason = '')
           AS kept_after_dedupe,
       count(*) FILTER (WHERE import_reason = '' AND NOT coalesce(contaminated, false) AND dedupe_reason = ''
                        AND label_finding NOT IN ('wrong label', 'missing label')) AS also_labels_true
FROM 'verdicts.parquet';
SELECT regexp_replace(dedupe_reason, ' of [0-9a-f-]+.*$', '') AS reason, count(*) AS rows
FROM 'verdicts.parquet' WHERE dedupe_reason <> '' GROUP BY reason ORDER BY rows DESC;

-- Q7 GPU part (null until `opsynth profile` has run): rows measured, filter reasons, rows kept
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
