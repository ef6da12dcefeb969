-- Fleet-wide limits (limits.py): at most max_running jobs of a queue run at once across every
-- worker, at most rate_count of them start in any rate_interval seconds; either or both. The
-- plain claim takes nothing of a queue listed here; the limited claim (the function below)
-- takes a transaction-level advisory lock per queue, counts the queue's running jobs and its
-- recent starts and claims at most what the limits leave. A killed worker's jobs count until
-- the rescuer takes them back.
CREATE TABLE pgenough.queue_limits (
    queue          text PRIMARY KEY,
    max_running    integer CHECK (max_running > 0),
    rate_count     integer CHECK (rate_count > 0),
    rate_interval  float8 CHECK (rate_interval > 0),
    set_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_limits_rate_whole CHECK ((rate_count IS NULL) = (rate_interval IS NULL)),
    CONSTRAINT queue_limits_some CHECK (max_running IS NOT NULL OR rate_count IS NOT NULL)
);

-- The starts of a rate-limited queue's jobs within its interval: the limited claim counts
-- them under the queue's lock, adds its own, and deletes those past the interval.
CREATE TABLE pgenough.queue_starts (
    queue  text NOT NULL,
    at     timestamptz NOT NULL
);
CREATE INDEX queue_starts_idx ON pgenough.queue_starts (queue, at);

-- The limited claim, one statement: a VOLATILE function, whose statements each take a
-- snapshot of their own, so that the counts are read after the queue's advisory lock is held,
-- as they must be, without a transaction of several statements sent from the worker (which
-- cost a limited claim about three plain ones: docs/benchmarks.md). The lock is held until
-- the calling statement's transaction ends: the claim commits with it. A last row with id -2
-- says the queue has no limit any more; with id -3, that the rate held jobs back, its run_at
-- when the next start is allowed by the database's clock (its created_at), so that the
-- worker looks again then.
CREATE FUNCTION pgenough.claim_limited(
    p_queue text,
    p_worker text,
    p_lease float8,
    p_limit integer,
    p_key bigint,
    p_done_ids bigint[],
    p_done_attempts integer[],
    p_done_created timestamptz[]
) RETURNS TABLE (
    id bigint, queue text, kind text, payload jsonb, priority integer, attempts integer,
    max_attempts integer, run_at timestamptz, created_at timestamptz
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_max integer;
    v_rate integer;
    v_interval float8;
    v_allow bigint := p_limit;
    v_started bigint := 0;
    v_claimed bigint;
    v_now timestamptz;
BEGIN
    -- Acknowledgements first (as claim's done): the count below no longer holds them.
    DELETE FROM pgenough.jobs j
    USING unnest(p_done_ids, p_done_attempts, p_done_created) AS d(id, attempts, created_at)
    WHERE j.id = d.id AND j.attempts = d.attempts AND j.created_at = d.created_at
      AND j.state = 'running';
    -- One claimer of the queue at a time across the fleet.
    PERFORM pg_advisory_xact_lock(p_key);
    -- Each statement from here takes its snapshot after the lock.
    SELECT l.max_running, l.rate_count, l.rate_interval INTO v_max, v_rate, v_interval
    FROM pgenough.queue_limits l WHERE l.queue = p_queue;
    IF NOT FOUND THEN  -- no limit any more: a last row with id -2 says so
        RETURN QUERY SELECT -2::bigint, p_queue, ''::text, NULL::jsonb, 0, 0, 0, now(), now();
        RETURN;
    END IF;
    IF v_max IS NOT NULL THEN
        v_allow := least(v_allow, greatest(0, v_max - (
            SELECT count(*) FROM pgenough.jobs r
            WHERE r.lease_until IS NOT NULL AND r.queue = p_queue AND r.state = 'running')));
    END IF;
    IF v_rate IS NOT NULL THEN
        v_now := clock_timestamp();
        DELETE FROM pgenough.queue_starts s
        WHERE s.queue = p_queue AND s.at <= v_now - v_interval * interval '1 second';
        SELECT count(*) INTO v_started FROM pgenough.queue_starts s WHERE s.queue = p_queue;
        v_allow := least(v_allow, greatest(0, v_rate - v_started));
    END IF;
    -- The candidates take the batch as their LIMIT, which the planner knows; the allowance
    -- cuts them, without a Sort (ruled out on the claim loop's session): the scan of the
    -- materialized candidates returns them in the claim index's order.
    RETURN QUERY
    WITH candidates AS (
        SELECT c.id FROM pgenough.jobs c
        WHERE c.queue = p_queue AND c.state = 'ready' AND c.run_at <= now()
          AND NOT EXISTS (SELECT FROM pgenough.queue_pauses p WHERE p.queue = p_queue)
        ORDER BY c.priority DESC, c.run_at, c.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT candidates.id FROM candidates LIMIT v_allow
    )
    UPDATE pgenough.jobs j
    SET state = 'running',
        attempts = j.attempts + 1,
        claimed_at = now(),
        lease_until = now() + p_lease * interval '1 second',
        worker = p_worker
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
              j.run_at, j.created_at;
    GET DIAGNOSTICS v_claimed = ROW_COUNT;
    IF v_rate IS NOT NULL THEN
        INSERT INTO pgenough.queue_starts (queue, at)
        SELECT p_queue, v_now FROM generate_series(1, v_claimed);
        IF v_started + v_claimed >= v_rate THEN
            RETURN QUERY
            SELECT -3::bigint, p_queue, ''::text, NULL::jsonb, 0, 0, 0,
                   min(s.at) + v_interval * interval '1 second', clock_timestamp()
            FROM pgenough.queue_starts s WHERE s.queue = p_queue;
        END IF;
    END IF;
END
$$;
