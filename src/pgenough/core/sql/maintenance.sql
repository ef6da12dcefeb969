-- name: delete_old_messages
-- Remove stored pub/sub payloads past their retention, a batch at a time.
DELETE FROM pgenough.messages
WHERE id IN (
    SELECT id FROM pgenough.messages
    WHERE created_at < now() - %(retention)s * interval '1 second'
    LIMIT %(limit)s
)

-- name: statement_timeout
-- Bound one maintenance statement.
SELECT set_config('statement_timeout', %(ms)s, true)
