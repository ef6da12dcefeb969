-- name: providers
-- Per provider named (see provider_names): its newest run, when it last succeeded, the
-- throughput of its newest processed run and its failures in the window; each an index probe.
SELECT n.provider,
       last.id AS last_run_id,
       last.status::text AS last_status,
       last.started_at AS last_started_at,
       extract(epoch FROM now() - last.started_at)::float8 AS last_age,
       last.plans_staged, last.plans_skipped, last.plans_written, last.rows_failed,
       last.reason AS last_reason,
       ok.processed_at AS last_success_at,
       CASE WHEN ok.processed_at > ok.started_at
            THEN ok.plans_staged / extract(epoch FROM ok.processed_at - ok.started_at)::float8
       END AS throughput,
       (SELECT count(*) FROM pgenough.runs f
        WHERE f.provider = n.provider AND f.status = 'FAILED'
          AND f.started_at > now() - %(window)s * interval '1 second') AS runs_failed
FROM unnest(%(names)s::text[]) AS n (provider)
CROSS JOIN LATERAL (
    SELECT * FROM pgenough.runs r WHERE r.provider = n.provider
    ORDER BY r.started_at DESC LIMIT 1
) last
LEFT JOIN LATERAL (
    SELECT * FROM pgenough.runs r WHERE r.provider = n.provider AND r.status = 'PROCESSED'
    ORDER BY r.started_at DESC LIMIT 1
) ok ON true
ORDER BY n.provider

-- name: failures_since
-- What went wrong in the window: failed runs and rows that could not be written (the jobs'
-- side is the core's job_failures); and the database's now.
SELECT
    now() AS at,
    (SELECT count(*) FROM pgenough.runs
     WHERE status = 'FAILED' AND failed_at > now() - %(window)s * interval '1 second')
        AS runs_failed,
    (SELECT count(*) FROM pgenough.plan_failures
     WHERE at > now() - %(window)s * interval '1 second') AS rows_failed

-- name: throughput
-- Plans processed per minute over the window, from the runs that finished in it (a run's
-- plans are counted in the minute it finished).
SELECT date_trunc('minute', processed_at) AS minute, sum(plans_staged)::bigint AS plans
FROM pgenough.runs
WHERE status = 'PROCESSED' AND processed_at > now() - %(window)s * interval '1 second'
GROUP BY 1
ORDER BY 1

-- name: list_runs
-- Runs newest first, optionally of one status and/or provider; keyset-paged by id.
SELECT id, provider, status::text, started_at,
       coalesce(processed_at, failed_at) AS finished_at,
       extract(epoch FROM coalesce(processed_at, failed_at, now()) - started_at)::float8
           AS duration,
       bytes, plans_staged, plans_skipped, plans_duplicate, plans_written, rows_failed,
       chunks_total, chunks_done, reason
FROM pgenough.runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::pgenough.run_status)
  AND (%(provider)s::text IS NULL OR provider = %(provider)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: run_detail
-- One run with everything known about it.
SELECT id, provider, status::text, started_at,
       coalesce(processed_at, failed_at) AS finished_at,
       extract(epoch FROM coalesce(processed_at, failed_at, now()) - started_at)::float8
           AS duration,
       bytes, plans_staged, plans_skipped, plans_duplicate, plans_written, rows_failed,
       chunks_total, chunks_done, reason, url, owner, heartbeat_at, staged_at, processed_at,
       failed_at, variant, attempts, skip_samples, phase
FROM pgenough.runs
WHERE id = %(id)s

-- name: run_row_failures
-- Rows of a run that could not be written, in staging order.
SELECT seq, base_plan_id, plan_id, error, at
FROM pgenough.plan_failures
WHERE run_id = %(id)s
ORDER BY seq
LIMIT %(limit)s

-- name: provider_names
-- Every provider that has a run, by a loose index scan over runs_provider_idx (one probe per
-- provider), not by reading every run.
WITH RECURSIVE names AS (
    (SELECT provider FROM pgenough.runs ORDER BY provider LIMIT 1)
    UNION ALL
    SELECT (SELECT r.provider FROM pgenough.runs r
            WHERE r.provider > names.provider ORDER BY r.provider LIMIT 1)
    FROM names
    WHERE names.provider IS NOT NULL
)
SELECT provider FROM names WHERE provider IS NOT NULL ORDER BY provider

-- name: failed_runs_since
-- Runs that failed in the window, newest first (what `pgenough failures` lists).
SELECT id, provider, status::text, started_at, failed_at AS finished_at,
       extract(epoch FROM failed_at - started_at)::float8 AS duration,
       bytes, plans_staged, plans_skipped, plans_duplicate, plans_written, rows_failed,
       chunks_total, chunks_done, reason
FROM pgenough.runs
WHERE status = 'FAILED' AND failed_at > now() - %(window)s * interval '1 second'
ORDER BY failed_at DESC, id DESC
LIMIT %(limit)s
