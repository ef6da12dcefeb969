-- Paused queues: while a queue has a row here, no worker claims its jobs (the claim statement
-- itself looks, so a pause holds across the fleet from the next claim of every worker, and
-- needs no notification). Jobs already running run on; enqueueing goes on. Resuming deletes
-- the row and notifies the queue, so idle workers claim at once.
CREATE TABLE pgenough.queue_pauses (
    queue      text PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    reason     text
);
