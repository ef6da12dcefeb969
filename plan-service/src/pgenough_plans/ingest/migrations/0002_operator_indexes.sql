-- What the operators' views ask every few seconds (the dashboard's live overview, `pgenough
-- status`): runs failed and processed lately, and rows that could not be written lately.
-- Without these, each snapshot reads the whole of pgenough.runs and plan_failures, which
-- only grow (one run per fetch per provider).

CREATE INDEX runs_failed_idx ON pgenough.runs (failed_at) WHERE status = 'FAILED';
CREATE INDEX runs_processed_idx ON pgenough.runs (processed_at) WHERE status = 'PROCESSED';
CREATE INDEX plan_failures_at_idx ON pgenough.plan_failures (at);
