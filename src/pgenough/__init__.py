"""pgenough: PostgreSQL is enough."""

# The one place the version is written: pyproject.toml reads it from here
# ([tool.hatch.version]) into the wheel's and the sdist's metadata.
__version__ = "0.1.0"

__all__ = ["__version__"]
