-- name: lock_try
-- Take the session-level lock if free; never waits.
SELECT pg_try_advisory_lock(%(key)s)

-- name: lock_wait
-- Take the session-level lock, waiting for it (bounded by lock_timeout when set).
SELECT pg_advisory_lock(%(key)s)

-- name: lock_timeout
-- Bound the next lock wait in this transaction.
SELECT set_config('lock_timeout', %(ms)s, true)

-- name: lock_release
-- Release one hold of the session-level lock; false if this session did not hold it.
SELECT pg_advisory_unlock(%(key)s)

-- name: lock_held
-- Whether this session holds the lock.
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND objsubid = 1 AND pid = pg_backend_pid() AND granted
      AND ((classid::bigint << 32) | objid::bigint) = %(key)s
)
