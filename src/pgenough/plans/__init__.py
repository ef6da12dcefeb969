"""The plan service: ingests snapshots of the Fever "planList" feed into PostgreSQL and serves
them from there."""
