-- name: open_run
-- Start a run; its started_at is the snapshot's time for the stale-snapshot guard.
INSERT INTO pgenough.runs (provider, url, owner)
VALUES (%(provider)s, %(url)s, %(owner)s)
RETURNING id, started_at

-- name: fail_orphaned_runs
-- Called while holding the provider's lock: any run of it still RUNNING has lost its owner
-- (killed, or cut off from the database). The reason says what that run was doing.
UPDATE pgenough.runs
SET status = 'FAILED', failed_at = now(),
    reason = 'fetch worker died or lost its database connection (its provider lock was free)'
             || ' while ' || coalesce(phase, 'opening the run')
WHERE provider = %(provider)s AND status = 'RUNNING'
RETURNING id, reason

-- name: fail_stale_runs
-- Runs whose fetch worker stopped heartbeating, whatever the provider.
UPDATE pgenough.runs
SET status = 'FAILED', failed_at = now(),
    reason = 'fetch worker stopped heartbeating at ' || heartbeat_at::text || ' while '
             || coalesce(phase, 'opening the run')
WHERE status = 'RUNNING' AND heartbeat_at < now() - %(stale_after)s * interval '1 second'
RETURNING id, provider

-- name: heartbeat_run
-- Progress of a streaming run, what it is doing, and proof its worker is alive.
UPDATE pgenough.runs
SET heartbeat_at = now(), bytes = %(bytes)s, plans_staged = %(staged)s,
    plans_skipped = %(skipped)s, phase = %(phase)s
WHERE id = %(id)s AND status = 'RUNNING'
RETURNING id

-- name: record_attempt
-- One HTTP attempt of a run, success or not.
UPDATE pgenough.runs
SET attempts = attempts || jsonb_build_array(%(attempt)s::jsonb), heartbeat_at = now()
WHERE id = %(id)s

-- name: seal_run
-- The snapshot is fully staged: STAGED, counted, and (in the same transaction) its chunks
-- become claimable.
UPDATE pgenough.runs
SET status = 'STAGED', staged_at = clock_timestamp(), heartbeat_at = now(), bytes = %(bytes)s,
    variant = %(variant)s, plans_staged = %(staged)s, plans_skipped = %(skipped)s,
    plans_duplicate = %(duplicates)s, skip_samples = %(samples)s::jsonb,
    chunks_total = %(chunks)s
WHERE id = %(id)s AND status = 'RUNNING'
RETURNING id

-- name: fail_run
-- The run failed; its staged rows are dropped in the same transaction.
UPDATE pgenough.runs
SET status = 'FAILED', failed_at = clock_timestamp(), reason = %(reason)s,
    bytes = %(bytes)s, plans_staged = %(staged)s, plans_skipped = %(skipped)s,
    skip_samples = %(samples)s::jsonb
WHERE id = %(id)s AND status = 'RUNNING'
RETURNING id

-- name: staging_pages
-- How many heap pages the run's staging table has (chunks are page ranges).
SELECT (pg_relation_size(%(table)s::regclass) / current_setting('block_size')::int)::bigint

-- name: chunk_done
-- Count a processed chunk; returns whether it was the run's last.
UPDATE pgenough.runs
SET chunks_done = chunks_done + 1, plans_written = plans_written + %(written)s,
    rows_failed = rows_failed + %(failed)s
WHERE id = %(id)s AND status = 'STAGED'
RETURNING chunks_done >= chunks_total, provider, started_at

-- name: mark_processed
-- The run's last chunk is in.
UPDATE pgenough.runs
SET status = 'PROCESSED', processed_at = clock_timestamp()
WHERE id = %(id)s AND status = 'STAGED'
RETURNING plans_written, rows_failed

-- name: get_run
-- One run with everything known about it.
SELECT id, provider, url, status::text, owner, started_at, heartbeat_at, staged_at,
       processed_at, failed_at, reason, attempts, bytes, variant, plans_staged, plans_skipped,
       skip_samples, chunks_total, chunks_done, plans_written, rows_failed, plans_duplicate
FROM pgenough.runs
WHERE id = %(id)s
