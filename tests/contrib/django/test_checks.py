"""``manage.py check`` on the project: pgenough's own checks (no database needed)."""

from __future__ import annotations

import subprocess
import sys

from tests.contrib.django.conftest import MANAGE, PROJECT, project_env


def test_a_tasks_module_with_an_app_of_its_own_is_warned_about() -> None:
    env = {
        **project_env("postgresql://nobody@127.0.0.1:1/unused"),
        "DJANGO_SETTINGS_MODULE": "proj.settings_legacy",
    }
    done = subprocess.run(
        [sys.executable, str(MANAGE), "check"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "legacy.tasks: (pgenough.W001) legacy.tasks.app is a pgenough App of its own" in (
        done.stderr + done.stdout
    )
