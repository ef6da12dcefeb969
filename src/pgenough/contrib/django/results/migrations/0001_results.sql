-- The django.tasks backend's results: one row per enqueued Django task, keyed by its
-- pgenough job's id, kept after the job is completed (and deleted) until pruned.
CREATE TABLE pgenough.django_task_results (
    id                bigint PRIMARY KEY,
    backend           text NOT NULL,
    task_path         text NOT NULL,
    queue             text NOT NULL,
    priority          integer NOT NULL,
    run_after         timestamptz,
    args              jsonb NOT NULL,
    kwargs            jsonb NOT NULL,
    status            text NOT NULL DEFAULT 'READY'
                      CHECK (status IN ('READY', 'RUNNING', 'SUCCESSFUL', 'FAILED')),
    enqueued_at       timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    last_attempted_at timestamptz,
    finished_at       timestamptz,
    return_value      jsonb,
    errors            jsonb NOT NULL DEFAULT '[]',
    worker_ids        text[] NOT NULL DEFAULT '{}'
);

-- The pruner's path: finished results, oldest first.
CREATE INDEX django_task_results_finished_idx ON pgenough.django_task_results (finished_at)
    WHERE finished_at IS NOT NULL;
