-- What a RUNNING run is doing ("streaming the body (attempt 1 of 4)", "waiting 30 s to retry
-- after HTTP 503 (attempt 2 of 4)"), kept by its fetch worker, so that whoever fails the run
-- for it (a stop, the next fetch finding it orphaned, the stale-run reaper) can say what it
-- was doing.
ALTER TABLE pgenough.runs ADD COLUMN phase text;
