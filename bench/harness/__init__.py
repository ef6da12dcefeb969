"""What the benchmarks share, one module per thing it owns: the machine's quiet (``machine``),
the server under test (``server``), how figures are printed (``report``), the queue systems
(``systems/``, one module each), a drain (``drain``) and add-to-start latency (``latency``);
for the plan service's benchmarks, their child processes (``processes``, ``plan_workers``),
the API process (``api_process``), wrk (``wrk``) and an ingestion under search load
(``under_load``). Each benchmark is ``bench/<name>.py`` or, when its own logic is large, the
package ``bench/<name>/``; both run as ``python -m bench.<name>``."""
