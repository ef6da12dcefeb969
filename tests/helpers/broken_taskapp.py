"""A user's task module that fails while it is imported (a bad setting, a typo)."""

raise RuntimeError("SMTP_HOST is not set")
