-- name: is_revoked
-- Whether a logout ended this session.
SELECT EXISTS (SELECT FROM pgenough.ui_revoked_sessions WHERE session_id = %(session_id)s)

-- name: revoke
-- End a session for every replica, until its cookie would have expired anyway.
INSERT INTO pgenough.ui_revoked_sessions (session_id, expires_at)
VALUES (%(session_id)s, to_timestamp(%(expires_at)s))
ON CONFLICT (session_id) DO NOTHING

-- name: purge_revoked
-- Forget, a batch at a time, sessions whose cookies expired more than a margin ago (the
-- margin covers a clock that differs between the dashboard's host and the database's).
DELETE FROM pgenough.ui_revoked_sessions
WHERE session_id IN (
    SELECT session_id FROM pgenough.ui_revoked_sessions
    WHERE expires_at < now() - make_interval(secs => %(margin)s)
    ORDER BY expires_at
    LIMIT %(limit)s
)
