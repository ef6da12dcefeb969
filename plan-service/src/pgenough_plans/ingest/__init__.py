"""The plan service's write path, built on the messaging core: the provider client
(``provider``), the incremental parser (``feed``), the fetch worker (``fetch``), the process
workers (``process``), their runs (``runs``) and tables (``store``). The provider simulator
the tests and the demo fetch from is ``pgenough_plans.sim``, not part of the service."""
