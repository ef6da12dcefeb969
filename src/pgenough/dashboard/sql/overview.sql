-- name: now
-- The database's clock: the instant an overview is "as of".
SELECT now()
