-- Every statement on plans.runs, run by plans/runs.py. The SELECT lists of the read
-- models are written once, here, as the fragments run_summary_columns and run_detail_columns,
-- and spliced into the statements that read them ({summary}, {detail}); tests/plan_service/ingest/
-- test_runs.py pins each list to its record's fields.

-- name: run_summary_columns
-- A run in a list (RunSummary): its counts, and its duration so far.
id, provider, status::text AS status, started_at,
coalesce(processed_at, failed_at) AS finished_at,
extract(epoch FROM coalesce(processed_at, failed_at, now()) - started_at)::float8 AS duration,
bytes, plans_staged, plans_skipped, plans_duplicate, plans_written, rows_failed,
chunks_total, chunks_done, reason

-- name: run_detail_columns
-- What a Run adds to its summary.
url, owner, heartbeat_at, staged_at, processed_at, failed_at, variant, attempts,
skip_samples, phase

-- name: open_run
-- Start a run; its started_at is the snapshot's time for the stale-snapshot guard.
INSERT INTO plans.runs (provider, url, owner)
VALUES (%(provider)s, %(url)s, %(owner)s)
RETURNING id

-- name: fail_orphaned_runs
-- Called while holding the provider's lock: any run of it still RUNNING has lost its owner
-- (killed, or cut off from the database). The reason says what that run was doing.
UPDATE plans.runs
SET status = 'FAILED', failed_at = now(),
    reason = 'fetch worker died or lost its database connection (its provider lock was free)'
             || ' while ' || coalesce(phase, 'opening the run')
WHERE provider = %(provider)s AND status = 'RUNNING'
RETURNING id, provider, reason

-- name: fail_stale_runs
-- Runs whose fetch worker stopped heartbeating, whatever the provider.
UPDATE plans.runs
SET status = 'FAILED', failed_at = now(),
    reason = 'fetch worker stopped heartbeating at ' || heartbeat_at::text || ' while '
             || coalesce(phase, 'opening the run')
WHERE status = 'RUNNING' AND heartbeat_at < now() - %(stale_after)s * interval '1 second'
RETURNING id, provider, reason

-- name: heartbeat_run
-- Progress of a streaming run, what it is doing, and proof its worker is alive.
UPDATE plans.runs
SET heartbeat_at = now(), bytes = %(bytes)s, plans_staged = %(staged)s,
    plans_skipped = %(skipped)s, phase = %(phase)s
WHERE id = %(id)s AND status = 'RUNNING'
RETURNING id

-- name: record_attempt
-- One HTTP attempt of a run, success or not.
UPDATE plans.runs
SET attempts = attempts || jsonb_build_array(%(attempt)s::jsonb), heartbeat_at = now()
WHERE id = %(id)s

-- name: seal_run
-- The snapshot is fully staged: STAGED, counted, and (in the same transaction) its chunks
-- become claimable.
UPDATE plans.runs
SET status = 'STAGED', staged_at = clock_timestamp(), heartbeat_at = now(), bytes = %(bytes)s,
    variant = %(variant)s, plans_staged = %(staged)s, plans_skipped = %(skipped)s,
    plans_duplicate = %(duplicates)s, skip_samples = %(samples)s::jsonb,
    chunks_total = %(chunks)s
WHERE id = %(id)s AND status = 'RUNNING'
RETURNING id

-- name: fail_run
-- The run failed; its staged rows are dropped in the same transaction. Matched on its owner
-- and provider too: after a failover with asynchronous replication the new primary may have
-- handed the id of a run it never received to another fetch's run.
UPDATE plans.runs
SET status = 'FAILED', failed_at = clock_timestamp(), reason = %(reason)s,
    bytes = %(bytes)s, plans_staged = %(staged)s, plans_skipped = %(skipped)s,
    skip_samples = %(samples)s::jsonb
WHERE id = %(id)s AND status = 'RUNNING' AND provider = %(provider)s AND owner = %(owner)s
RETURNING id

-- name: fail_staged_run
-- A sealed run that cannot be applied (its staging was lost); its chunks then skip it.
UPDATE plans.runs
SET status = 'FAILED', failed_at = clock_timestamp(), reason = %(reason)s
WHERE id = %(id)s AND status = 'STAGED'
RETURNING id

-- name: chunk_done
-- Count a processed chunk; returns whether it was the run's last.
UPDATE plans.runs
SET chunks_done = chunks_done + 1, plans_written = plans_written + %(written)s,
    rows_failed = rows_failed + %(failed)s
WHERE id = %(id)s AND status = 'STAGED'
RETURNING chunks_done >= chunks_total AS last

-- name: mark_processed
-- The run's last chunk is in.
UPDATE plans.runs
SET status = 'PROCESSED', processed_at = clock_timestamp()
WHERE id = %(id)s AND status = 'STAGED'
RETURNING plans_written, rows_failed

-- name: get_run
-- One run with everything known about it (Run).
SELECT {summary}, {detail}
FROM plans.runs
WHERE id = %(id)s

-- name: list_runs
-- Runs newest first, optionally of one status and/or provider; keyset-paged by id.
SELECT {summary}
FROM plans.runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::plans.run_status)
  AND (%(provider)s::text IS NULL OR provider = %(provider)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: failed_runs_since
-- Runs that failed in the window, newest first (what `pgenough failures` lists).
SELECT {summary}
FROM plans.runs
WHERE status = 'FAILED' AND failed_at > now() - %(window)s * interval '1 second'
ORDER BY failed_at DESC, id DESC
LIMIT %(limit)s

-- name: count_failed_since
-- How many runs failed in the window (the overview's count).
SELECT count(*)
FROM plans.runs
WHERE status = 'FAILED' AND failed_at > now() - %(window)s * interval '1 second'

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
       (SELECT count(*) FROM plans.runs f
        WHERE f.provider = n.provider AND f.status = 'FAILED'
          AND f.started_at > now() - %(window)s * interval '1 second') AS runs_failed
FROM unnest(%(names)s::text[]) AS n (provider)
CROSS JOIN LATERAL (
    SELECT * FROM plans.runs r WHERE r.provider = n.provider
    ORDER BY r.started_at DESC LIMIT 1
) last
LEFT JOIN LATERAL (
    SELECT * FROM plans.runs r WHERE r.provider = n.provider AND r.status = 'PROCESSED'
    ORDER BY r.started_at DESC LIMIT 1
) ok ON true
ORDER BY n.provider

-- name: throughput
-- Plans processed per minute over the window, from the runs that finished in it (a run's
-- plans are counted in the minute it finished).
SELECT date_trunc('minute', processed_at) AS minute, sum(plans_staged)::bigint AS plans
FROM plans.runs
WHERE status = 'PROCESSED' AND processed_at > now() - %(window)s * interval '1 second'
GROUP BY 1
ORDER BY 1

-- name: provider_names
-- Every provider that has a run, by a loose index scan over runs_provider_idx (one probe per
-- provider), not by reading every run.
WITH RECURSIVE names AS (
    (SELECT provider FROM plans.runs ORDER BY provider LIMIT 1)
    UNION ALL
    SELECT (SELECT r.provider FROM plans.runs r
            WHERE r.provider > names.provider ORDER BY r.provider LIMIT 1)
    FROM names
    WHERE names.provider IS NOT NULL
)
SELECT provider FROM names WHERE provider IS NOT NULL ORDER BY provider
