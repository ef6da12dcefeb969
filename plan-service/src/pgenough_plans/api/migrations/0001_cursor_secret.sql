-- The API's own secrets, read at start-up (api/app.py). 'cursor' keys the MAC that signs the
-- after= cursors of /search (api/cursor.py) when PGENOUGH_API_CURSOR_SECRET is unset: made
-- here, once per database, so every replica of the API signs and checks cursors alike. 32
-- bytes from two version 4 UUIDs: gen_random_uuid() (core since PostgreSQL 13) draws them from
-- pg_strong_random, 244 random bits in all. The API's role may read it (role.py), nothing else.
CREATE TABLE pgenough.api_secrets (
    name    text PRIMARY KEY,
    secret  bytea NOT NULL CHECK (octet_length(secret) >= 16)
);
INSERT INTO pgenough.api_secrets (name, secret)
VALUES ('cursor', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));
