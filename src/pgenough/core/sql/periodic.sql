-- name: database_now
-- The database clock, which every replica's schedule is computed from, so replicas on hosts
-- with skewed clocks still agree on which tick is due.
SELECT now()

-- name: claim_tick
-- Move a task's claimed tick forward to %(tick)s, its schedule's latest tick at the database
-- time the caller read; at most one replica's upsert moves a (task, tick) forward. A new row,
-- or one claimed under another schedule (a null schedule is a row from before schedules were
-- recorded, taken as this one's unless it is ahead), takes the tick without running it unless
-- %(first_runs)s; a %(skip)s tick is recorded without running. claimed_by is null when the
-- tick is not run; previous is the task's last tick under this schedule, if any. No row: the
-- tick was not ours to claim. A tick that runs is also the task's last run (last_run_at/by).
WITH previous AS (
    SELECT period FROM pgenough.periodic WHERE name = %(name)s AND schedule = %(schedule)s
)
INSERT INTO pgenough.periodic AS p (name, schedule, period, claimed_by, last_run_at, last_run_by)
SELECT %(name)s, %(schedule)s, %(tick)s, runner, CASE WHEN runner IS NOT NULL THEN now() END,
       runner
FROM (SELECT CASE WHEN %(first_runs)s AND NOT %(skip)s THEN %(replica)s END AS runner) r
ON CONFLICT (name) DO UPDATE
    SET schedule = EXCLUDED.schedule,
        period = EXCLUDED.period,
        claimed_at = now(),
        (claimed_by, last_run_at, last_run_by) = (
            SELECT runner, CASE WHEN runner IS NULL THEN p.last_run_at ELSE now() END,
                   coalesce(runner, p.last_run_by)
            FROM (SELECT CASE
                      WHEN p.schedule = EXCLUDED.schedule
                          OR (p.schedule IS NULL AND p.period < EXCLUDED.period)
                          THEN CASE WHEN %(skip)s THEN NULL ELSE %(replica)s END
                      ELSE EXCLUDED.claimed_by
                  END AS runner) r
        )
    WHERE p.period < EXCLUDED.period
        OR (p.schedule IS DISTINCT FROM EXCLUDED.schedule
            AND NOT (p.schedule IS NULL AND p.period = EXCLUDED.period))
RETURNING claimed_by IS NOT NULL AS runs, (SELECT period FROM previous) AS previous

-- name: add_missed
-- Ticks that passed without running (skipped as late, or dropped while no replica was up),
-- counted by the replica that claimed the tick after them.
UPDATE pgenough.periodic SET missed = missed + %(missed)s
WHERE name = %(name)s AND period = %(tick)s

-- name: list_periodic
-- Every periodic task ever claimed: its schedule, last tick claimed (when, by whom: null when
-- it was recorded or skipped without running), last run, ticks missed; by name.
SELECT name, schedule, period, claimed_at, claimed_by, last_run_at, last_run_by, missed,
       now() AS now
FROM pgenough.periodic
ORDER BY name
