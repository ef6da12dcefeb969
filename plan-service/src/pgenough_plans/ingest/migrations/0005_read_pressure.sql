-- The read path's pressure, published by each API process (its own row, refreshed while the
-- pressure lasts) and read by the fetch and process workers between chunks, so that bulk
-- ingestion yields to /search (plans/pacing.py). A row counts only until expires_at: an API
-- that dies stops pacing ingestion within moments, without anyone cleaning up.
CREATE TABLE pgenough.read_pressure (
    source     text PRIMARY KEY,
    pressure   real NOT NULL CHECK (pressure BETWEEN 0 AND 1),
    expires_at timestamptz NOT NULL
);
