-- name: lock_try
-- Take the session-level lock if free; never waits.
SELECT pg_try_advisory_lock(%(key)s)

-- name: lock_wait
-- Take the session-level lock, waiting for it (bounded by lock_timeout when set).
SELECT pg_advisory_lock(%(key)s)

-- name: xact_lock_try
-- Take the lock until the end of the current transaction if free; never waits.
SELECT pg_try_advisory_xact_lock(%(key)s)

-- name: xact_lock_wait
-- Take the lock until the end of the current transaction, waiting for it.
SELECT pg_advisory_xact_lock(%(key)s)

-- name: lock_timeout
-- Bound the next lock wait in this transaction; returns the setting it replaces.
SELECT current_setting('lock_timeout'), set_config('lock_timeout', %(ms)s, true)

-- name: restore_lock_timeout
-- Put back the lock_timeout that lock_timeout replaced.
SELECT set_config('lock_timeout', %(previous)s, true)

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
