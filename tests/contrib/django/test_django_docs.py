"""docs/guides/django.md documents the code's settings and options; its steps are run as written in
a new project by test_django_walkthrough.py."""

from __future__ import annotations

import re
import subprocess
import sys

from pgenough.contrib.django.conf import KEYS, PgenoughSettings
from tests.contrib.django.conftest import MANAGE, PROJECT, project_env
from tests.helpers.procs import ROOT

DOC = (ROOT / "docs" / "guides" / "django.md").read_text("utf-8")


def test_the_settings_table_is_the_codes() -> None:
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| `([^`]*)` \|", DOC, flags=re.MULTILINE))
    assert tuple(rows) == KEYS
    for key, documented in rows.items():
        default = getattr(PgenoughSettings(), key.lower())
        expected = f"{default:g}" if isinstance(default, float) else str(default)
        assert documented == expected, f"{key}: documented {documented}, the code says {expected}"


def test_the_worker_options_exist() -> None:
    documented = set(re.findall(r"^\| `(--[a-z-]+)", DOC, flags=re.MULTILINE))
    assert len(documented) >= 6
    env = project_env("postgresql://nobody@127.0.0.1:1/unused")  # --help connects to nothing
    done = subprocess.run(
        [sys.executable, str(MANAGE), "pgenough", "worker", "--help"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert documented <= set(re.findall(r"--[a-z-]+", done.stdout))
