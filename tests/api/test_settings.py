"""Every API setting is documented in the README's configuration table, and every setting's
default is the default of what it configures (one source of defaults)."""

from __future__ import annotations

from dataclasses import replace

from pgenough.api.config import ApiConfig
from pgenough.api.ui.config import UiConfig
from pgenough.api.ui.hosts import LOOPBACK_ONLY
from pgenough.core import WorkerConfig
from pgenough.plans.fetch import FetchConfig
from pgenough.plans.pacing import PacingConfig
from pgenough.plans.provider import ProviderConfig
from pgenough.settings import Settings
from tests.helpers.procs import ROOT


def test_every_api_setting_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    names = [name for name in Settings.model_fields if name.startswith("api_")]
    assert len(names) >= 10
    for name in names:
        assert f"| `PGENOUGH_{name.upper()}` |" in readme, name
        assert Settings.model_fields[name].description, name


def test_the_default_settings_build_each_components_default_config() -> None:
    # Defaults only: no environment, no config file.
    defaults = Settings.model_construct()
    assert defaults.api_config() == ApiConfig()
    # The dashboard's host list adds api_host, which by default is a loopback address anyway.
    assert replace(defaults.ui_config(), allowed_hosts=LOOPBACK_ONLY) == UiConfig()
    assert defaults.worker_config() == WorkerConfig()
    assert defaults.fetch_config() == FetchConfig()
    assert defaults.pacing_config() == PacingConfig()
    named = Settings.model_construct(providers="p=http://127.0.0.1:1/planList")
    assert named.provider_configs() == [ProviderConfig("p", "http://127.0.0.1:1/planList")]
