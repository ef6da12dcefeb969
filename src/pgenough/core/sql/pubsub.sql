-- name: notify
-- Publish a payload that fits in a NOTIFY (delivered when the transaction commits).
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: publish_stored
-- Publish a payload too large for NOTIFY: store it, notify a reference to it.
WITH stored AS (
    INSERT INTO pgenough.messages (channel, payload)
    VALUES (%(channel)s, %(payload)s)
    RETURNING id
)
SELECT pg_notify(%(channel)s, %(prefix)s || id::text) FROM stored

-- name: fetch_stored
-- The payload behind a reference.
SELECT payload FROM pgenough.messages WHERE id = %(id)s

-- name: ping
-- Proves the listening session is alive.
SELECT 1
