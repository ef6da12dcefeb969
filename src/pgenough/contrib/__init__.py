"""Integrations with frameworks pgenough's users already run (each an optional extra)."""
