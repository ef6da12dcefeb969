"""Every API setting is documented in the README's configuration table."""

from __future__ import annotations

from pgenough.settings import Settings
from tests.helpers.procs import ROOT


def test_every_api_setting_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    names = [name for name in Settings.model_fields if name.startswith("api_")]
    assert len(names) >= 10
    for name in names:
        assert f"| `PGENOUGH_{name.upper()}` |" in readme, name
        assert Settings.model_fields[name].description, name
