-- name: add_counts
-- A worker's flush: what its executors finished since its last one, per queue, added to the
-- current minute's row of each (one statement for every queue of the worker).
INSERT INTO pgenough.job_counts AS c (bucket, queue, completed, failed, dead)
SELECT date_trunc('minute', now()), q.queue, q.completed, q.failed, q.dead
FROM unnest(%(queues)s::text[], %(completed)s::bigint[], %(failed)s::bigint[],
            %(dead)s::bigint[]) AS q(queue, completed, failed, dead)
ON CONFLICT (bucket, queue) DO UPDATE
    SET completed = c.completed + EXCLUDED.completed,
        failed = c.failed + EXCLUDED.failed,
        dead = c.dead + EXCLUDED.dead

-- name: sample_queues
-- The sampling duty: every queue's depths now, one row per queue at this minute (a second
-- sample in the same minute, from a replica whose tick came late, keeps the first). A queue
-- that has emptied (its jobs completed and deleted) is still sampled, at zero, for an hour
-- after its last sample: its backlog is drawn down to nothing, not left with a gap.
INSERT INTO pgenough.queue_samples (at, queue, ready, scheduled, running, dead, oldest_ready_age)
SELECT date_trunc('minute', now()), q.queue,
       coalesce(d.ready, 0), coalesce(d.scheduled, 0), coalesce(d.running, 0),
       coalesce(d.dead, 0), coalesce(d.oldest_ready_age, 0)
FROM (
    SELECT queue FROM pgenough.jobs GROUP BY queue
    UNION
    SELECT queue FROM pgenough.queue_samples WHERE at > now() - interval '1 hour'
) q
LEFT JOIN (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' AND run_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'ready' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'dead') AS dead,
           extract(epoch FROM now() - min(run_at)
                   FILTER (WHERE state = 'ready' AND run_at <= now()))::float8 AS oldest_ready_age
    FROM pgenough.jobs
    GROUP BY queue
) d USING (queue)
ON CONFLICT (at, queue) DO NOTHING

-- name: queue_history
-- Per minute of the last %(window)s seconds and per queue (one queue, or every one): jobs
-- completed, attempts failed and jobs dead-lettered in that minute, and the backlog sampled
-- in it; a minute with nothing of either is absent. Oldest first.
SELECT coalesce(c.bucket, s.at) AS at,
       coalesce(c.queue, s.queue) AS queue,
       coalesce(c.completed, 0) AS completed,
       coalesce(c.failed, 0) AS failed,
       coalesce(c.dead, 0) AS dead,
       s.ready, s.scheduled, s.running, s.oldest_ready_age
FROM (SELECT * FROM pgenough.job_counts
      WHERE bucket > now() - %(window)s * interval '1 second'
        AND (%(queue)s::text IS NULL OR queue = %(queue)s)) c
FULL JOIN (SELECT * FROM pgenough.queue_samples
           WHERE at > now() - %(window)s * interval '1 second'
             AND (%(queue)s::text IS NULL OR queue = %(queue)s)) s
    ON s.at = c.bucket AND s.queue = c.queue
ORDER BY 1, 2

-- name: queue_trend
-- Every %(step)s-second bucket (aligned on the epoch) of the last %(buckets)s, the current one
-- last, each present even when empty, of one queue or of every queue added together: jobs
-- completed, attempts failed and jobs dead-lettered in it, and the largest backlog sampled in
-- it. A sampled minute's depths add the chosen queues' together (a queue with no jobs then has
-- no row: 0); the oldest ready age is the largest of any. No sample in a bucket: NULLs.
WITH buckets AS (
    SELECT generate_series(
               date_bin(%(step)s * interval '1 second', now(), timestamptz 'epoch')
                   - (%(buckets)s - 1) * %(step)s * interval '1 second',
               date_bin(%(step)s * interval '1 second', now(), timestamptz 'epoch'),
               %(step)s * interval '1 second') AS at
),
counts AS (
    SELECT date_bin(%(step)s * interval '1 second', bucket, timestamptz 'epoch') AS at,
           sum(completed) AS completed, sum(failed) AS failed, sum(dead) AS dead
    FROM pgenough.job_counts
    WHERE bucket >= (SELECT min(at) FROM buckets)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    GROUP BY 1
),
minutes AS (
    SELECT at,
           coalesce(sum(ready) FILTER (WHERE %(queue)s::text IS NULL OR queue = %(queue)s), 0)
               AS ready,
           coalesce(sum(scheduled) FILTER (WHERE %(queue)s::text IS NULL OR queue = %(queue)s), 0)
               AS scheduled,
           coalesce(sum(running) FILTER (WHERE %(queue)s::text IS NULL OR queue = %(queue)s), 0)
               AS running,
           coalesce(max(oldest_ready_age)
                    FILTER (WHERE %(queue)s::text IS NULL OR queue = %(queue)s), 0)
               AS oldest_ready_age
    FROM pgenough.queue_samples
    WHERE at >= (SELECT min(at) FROM buckets)
    GROUP BY at
),
samples AS (
    SELECT date_bin(%(step)s * interval '1 second', at, timestamptz 'epoch') AS at,
           max(ready) AS ready, max(scheduled) AS scheduled, max(running) AS running,
           max(oldest_ready_age) AS oldest_ready_age
    FROM minutes
    GROUP BY 1
)
SELECT b.at, coalesce(%(queue)s::text, '') AS queue,
       coalesce(c.completed, 0)::bigint AS completed,
       coalesce(c.failed, 0)::bigint AS failed,
       coalesce(c.dead, 0)::bigint AS dead,
       s.ready::bigint AS ready, s.scheduled::bigint AS scheduled,
       s.running::bigint AS running, s.oldest_ready_age
FROM buckets b
LEFT JOIN counts c ON c.at = b.at
LEFT JOIN samples s ON s.at = b.at
ORDER BY b.at

-- name: delete_old_counts
-- The cleaner: counts older than the retention, in batches.
DELETE FROM pgenough.job_counts
WHERE (bucket, queue) IN (
    SELECT bucket, queue FROM pgenough.job_counts
    WHERE bucket < now() - %(retention)s * interval '1 second'
    LIMIT %(limit)s
)

-- name: delete_old_samples
-- The cleaner: samples older than the retention, in batches.
DELETE FROM pgenough.queue_samples
WHERE (at, queue) IN (
    SELECT at, queue FROM pgenough.queue_samples
    WHERE at < now() - %(retention)s * interval '1 second'
    LIMIT %(limit)s
)
