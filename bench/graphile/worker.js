// One graphile-worker drain process for bench.queue (see its docstring; bench/harness/systems/graphile.py starts it).
//
//   node bench/graphile/worker.js migrate DATABASE_URL   install graphile-worker's schema, exit
//   node bench/graphile/worker.js drain DATABASE_URL     connect, migrate, warm up, print READY;
//       on a GO line from stdin run graphile-worker in "run once" mode (the mode its own perf
//       test uses) until the queue is empty and its completions are flushed, then print
//       "DONE <unix time at the end, s> <jobs its task ran>" and exit.
"use strict";

const { Logger, runMigrations, runOnce } = require("graphile-worker");
const { Pool } = require("pg");
const readline = require("readline");

const CONCURRENCY = 24;
const LOCAL_QUEUE_SIZE = 500;
// graphile-worker's recommended fast setup (its performance docs): a local queue and
// completions/failures batched with no added delay.
const preset = {
  worker: {
    concurrentJobs: CONCURRENCY,
    localQueue: { size: LOCAL_QUEUE_SIZE },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
// Errors and warnings only: an info line per job would cost a console write per job.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile ${level}: ${message}`);
});
const now = () => (performance.timeOrigin + performance.now()) / 1000;

async function main() {
  const [mode, connectionString, poolSize] = process.argv.slice(2);
  // pg.Pool opens connections lazily: with the local queue and batched completions a process
  // uses few of them whatever its concurrency.
  const pgPool = new Pool({ connectionString, max: Number(poolSize || CONCURRENCY) });
  pgPool.on("error", (error) => console.error(`graphile pool error: ${error}`));
  pgPool.on("connect", (client) => client.on("error", (e) => console.error(`graphile pg: ${e}`)));
  try {
    await runMigrations({ pgPool, logger, preset });
    if (mode === "migrate") return;
    let done = 0;
    const taskList = {
      noop: async () => {
        done++;
      },
    };
    // Warm-up outside the timing: the same run-once code path over a task name no job has
    // (graphile fetches only the task identifiers it knows), so the pool's connections are
    // open and the code is compiled when GO comes.
    await runOnce({ pgPool, logger, preset, noHandleSignals: true, taskList: { bench_warmup: async () => {} } });
    const lines = readline.createInterface({ input: process.stdin });
    process.stdout.write("READY\n");
    for await (const line of lines) {
      if (line.trim() === "GO") break;
    }
    lines.close();
    await runOnce({ pgPool, logger, preset, noHandleSignals: true, taskList });
    process.stdout.write(`DONE ${now()} ${done}\n`);
  } finally {
    await pgPool.end();
  }
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
