-- name: current_pressure
-- The highest pressure any live API process publishes; 0 when none does.
SELECT coalesce(max(pressure), 0)::float8 FROM plans.read_pressure WHERE expires_at > now()

-- name: publish_pressure
INSERT INTO plans.read_pressure (source, pressure, expires_at)
VALUES (%(source)s, %(pressure)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (source) DO UPDATE
SET pressure = excluded.pressure, expires_at = excluded.expires_at

-- name: withdraw_pressure
DELETE FROM plans.read_pressure WHERE source = %(source)s

-- name: forget_expired_pressure
-- Rows of API processes gone for a while (killed: nobody withdrew them); they no longer
-- count, this only keeps the table small.
DELETE FROM plans.read_pressure WHERE expires_at < now() - interval '1 hour'
