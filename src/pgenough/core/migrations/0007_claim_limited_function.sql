-- The limited claim as one statement (limits.py): a VOLATILE function, whose statements each
-- take a snapshot of their own, so that the count of the queue's running jobs is read after
-- the queue's advisory lock is held, as it must be, without a transaction of several
-- statements sent from the worker (which cost a limited claim about three plain ones).
-- The lock is held until the calling statement's transaction ends: the claim commits with it.
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
BEGIN
    -- Acknowledgements first (as claim's done): the count below no longer holds them.
    DELETE FROM pgenough.jobs j
    USING unnest(p_done_ids, p_done_attempts, p_done_created) AS d(id, attempts, created_at)
    WHERE j.id = d.id AND j.attempts = d.attempts AND j.created_at = d.created_at
      AND j.state = 'running';
    -- One claimer of the queue at a time across the fleet.
    PERFORM pg_advisory_xact_lock(p_key);
    -- A statement of its own, so a snapshot taken after the lock. The candidates take the
    -- batch as their LIMIT, which the planner knows; the allowance cuts them, without a Sort
    -- (ruled out on the claim loop's session): the scan of the materialized candidates
    -- returns them in the claim index's order. A last row with id -2 says the queue has no
    -- limit any more.
    RETURN QUERY
    WITH lim AS (
        SELECT l.max_running FROM pgenough.queue_limits l WHERE l.queue = p_queue
    ), candidates AS (
        SELECT c.id FROM pgenough.jobs c
        WHERE c.queue = p_queue AND c.state = 'ready' AND c.run_at <= now()
          AND NOT EXISTS (SELECT FROM pgenough.queue_pauses p WHERE p.queue = p_queue)
        ORDER BY c.priority DESC, c.run_at, c.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT candidates.id FROM candidates
        LIMIT greatest(0, (SELECT lim.max_running FROM lim) - (
            SELECT count(*) FROM pgenough.jobs r
            WHERE r.lease_until IS NOT NULL AND r.queue = p_queue AND r.state = 'running'))
    ), claimed AS (
        UPDATE pgenough.jobs j
        SET state = 'running',
            attempts = j.attempts + 1,
            claimed_at = now(),
            lease_until = now() + p_lease * interval '1 second',
            worker = p_worker
        FROM picked
        WHERE j.id = picked.id
        RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
                  j.run_at, j.created_at
    )
    SELECT * FROM claimed
    UNION ALL
    SELECT -2::bigint, p_queue, ''::text, NULL::jsonb, 0, 0, 0, now(), now()
    WHERE NOT EXISTS (SELECT FROM lim);
END
$$;
