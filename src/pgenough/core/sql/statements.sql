-- name: begin
-- Any statement: in non-autocommit mode psycopg opens the transaction before it.
SELECT 1
