"""The plan service's write path, built on the messaging core: the provider simulator
(``sim``), the provider client (``provider``), the incremental parser (``feed``), the fetch
worker (``fetch``), the process workers (``process``) and their tables (``store``)."""
