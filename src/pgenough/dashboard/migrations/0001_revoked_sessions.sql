-- Dashboard sessions ended by a logout (api/ui/sessions.py). A session cookie is an HMAC that
-- every API replica sharing the token verifies without the database; a logout records the
-- session's id here so that every replica refuses the cookie from then on. A row is kept
-- until its cookie would have expired anyway, then purged.
CREATE TABLE pgenough.ui_revoked_sessions (
    session_id  text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX ui_revoked_sessions_expires_idx ON pgenough.ui_revoked_sessions (expires_at);
