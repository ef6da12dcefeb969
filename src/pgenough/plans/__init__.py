"""The plan service: ingests snapshots of the Fever "planList" feed into PostgreSQL and serves
them from there. ``feed`` is the incremental, hardened XML parser of those snapshots."""
