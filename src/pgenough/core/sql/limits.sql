-- name: set_queue_limit
-- Set (or replace) a queue's limits and wake its workers (on commit), which then claim under
-- them.
WITH set AS (
    INSERT INTO pgenough.queue_limits (queue, max_running, rate_count, rate_interval)
    VALUES (%(queue)s, %(running)s, %(starts)s, %(per)s)
    ON CONFLICT (queue) DO UPDATE
    SET max_running = EXCLUDED.max_running, rate_count = EXCLUDED.rate_count,
        rate_interval = EXCLUDED.rate_interval, set_at = now()
    RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) FROM set

-- name: clear_queue_limit
-- Lift a queue's limit and wake its workers (on commit); the row when it had one.
WITH cleared AS (
    DELETE FROM pgenough.queue_limits WHERE queue = %(queue)s RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) FROM cleared

-- name: queue_limits
SELECT queue, max_running, rate_count, rate_interval, set_at
FROM pgenough.queue_limits ORDER BY queue
