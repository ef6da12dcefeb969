"""Interpreters other than the suite's own, for what this one cannot run: Django 6 needs
Python >= 3.12, while the suite runs on 3.11 with Django 5.2 and the ``django-tasks`` backport.

``django6_python()`` is the ``python`` of a virtual environment made with Python 3.12, holding
this checkout (editable, with the ``django`` extra) and Django 6. It is built once per state of
pyproject.toml, under .pgenough-test/py312/, under a file lock (xdist workers and CI's second
pass reuse it). Without a Python 3.12 the tests that need it skip, saying why, unless
``PGENOUGH_REQUIRE_PY312=1`` (CI sets it), which makes the absence a failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.helpers.procs import ROOT
from tests.helpers.requirements import skip_unless
from tests.helpers.wheel import INSTALL_TIMEOUT, built_once, check, clean_env

CACHE = ROOT / ".pgenough-test" / "py312"
DJANGO6 = "django>=6,<7"


def python312() -> Path | None:
    """A Python 3.12 interpreter: ``PGENOUGH_PY312``, else pyenv's 3.12.x, else one on PATH."""
    named = os.environ.get("PGENOUGH_PY312")
    if named:
        return Path(named)
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted((root / "versions").glob("3.12.*"), reverse=True):
        python = candidate / "bin" / "python"
        if python.is_file():
            return python
    found = shutil.which("python3.12")
    return Path(found) if found else None


def _key(python: Path) -> str:
    digest = hashlib.blake2b(digest_size=8)
    digest.update(str(python).encode())
    digest.update(DJANGO6.encode())
    digest.update((ROOT / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def django6_python() -> Path:
    """The Python of the Django 6 environment (built on first use); skips without 3.12."""
    python = python312()
    if python is None or not python.is_file():
        skip_unless(
            "set PGENOUGH_PY312, or install it with pyenv",
            require="PGENOUGH_REQUIRE_PY312",
            what="Python 3.12 for Django 6",
        )

    def build(cache: Path) -> None:
        env = clean_env()

        def run(*args: str | Path) -> None:
            check(
                subprocess.run(
                    [str(a) for a in args],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=INSTALL_TIMEOUT,
                )
            )

        run(python, "-m", "venv", cache)
        run(
            cache / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "-e",
            f"{ROOT}[django]",
            DJANGO6,
        )

    return built_once(CACHE, _key(python), build) / "bin" / "python"
