"""The provider simulator: a fake Fever provider for tests, benchmarks and the demo, never
part of the plan service itself.

- ``data``: generated snapshots, a pure function of ``(seed, version, plans)``, and their XML
  (no I/O; the benchmarks render documents with it alone);
- ``server``: the HTTP server that serves them with injectable faults (``SimServer`` in
  process, ``serve`` in the foreground: ``pgenough-plans provider-sim``).

Only ``pgenough_plans.demo``, the ``demo`` and ``provider-sim`` commands (imported lazily) and the
tests and benchmarks import it (an import-linter contract checks it). Nothing is imported
here, so ``pgenough_plans.sim.data`` loads without uvicorn and Starlette.
"""
