-- name: claim_period
-- Claim the current period of a task for this replica. The period is computed from the
-- database clock, so replicas on hosts with skewed clocks still agree; at most one claim
-- per (task, period) succeeds. Returns the database time and the claimed period (or null).
WITH t AS (
    SELECT extract(epoch FROM now())::float8 AS now_s
), claim AS (
    INSERT INTO pgenough.periodic AS p (name, period, claimed_by)
    SELECT %(name)s, floor(t.now_s / %(seconds)s)::bigint, %(replica)s FROM t
    ON CONFLICT (name) DO UPDATE
        SET period = EXCLUDED.period, claimed_at = now(), claimed_by = EXCLUDED.claimed_by
        WHERE p.period < EXCLUDED.period
    RETURNING period
)
SELECT t.now_s, (SELECT period FROM claim) FROM t
