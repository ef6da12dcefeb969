"""Every API setting is documented in the plan service's settings table, and every setting's
default is the default of what it configures (one source of defaults)."""

from __future__ import annotations

from dataclasses import replace

from pgenough.core import WorkerConfig
from pgenough.core.db import DEFAULT_NETWORK_TIMEOUT, with_network_timeout
from pgenough.dashboard import DashboardConfig
from pgenough.dashboard.hosts import LOOPBACK_ONLY
from pgenough_plans.api.config import ApiConfig
from pgenough_plans.ingest.fetch import FetchConfig
from pgenough_plans.ingest.pacing import PacingConfig
from pgenough_plans.ingest.provider import ProviderConfig
from pgenough_plans.settings import PlanSettings
from tests.helpers.procs import ROOT


def test_every_api_setting_is_in_the_settings_table() -> None:
    readme = (ROOT / "docs" / "plan-service" / "settings.md").read_text("utf-8")
    names = [name for name in PlanSettings.model_fields if name.startswith("api_")]
    assert len(names) >= 10
    for name in names:
        assert f"| `PGENOUGH_{name.upper()}` |" in readme, name
        assert PlanSettings.model_fields[name].description, name


def test_the_default_settings_build_each_components_default_config() -> None:
    # Defaults only: no environment, no config file.
    defaults = PlanSettings.model_construct()
    assert defaults.api_config() == ApiConfig()
    # The dashboard's host list adds api_host, which by default is a loopback address anyway;
    # a missing table names the plan service's migrate command.
    ui = replace(defaults.ui_config(), allowed_hosts=LOOPBACK_ONLY)
    assert ui == DashboardConfig(migrate_hint="pgenough-plans migrate")
    assert defaults.ui_config().allowed_hosts.allows(defaults.api_host)
    assert defaults.worker_config() == WorkerConfig()
    assert defaults.fetch_config() == FetchConfig()
    assert defaults.pacing_config() == PacingConfig()
    named = PlanSettings.model_construct(providers="p=http://127.0.0.1:1/planList")
    assert named.provider_configs() == [ProviderConfig("p", "http://127.0.0.1:1/planList")]


def test_a_direct_url_beside_database_url_says_it_is_a_transaction_pooler() -> None:
    """The one rule for a pooler (docs/operations/index.md, "Behind PgBouncer"): session-bound
    work goes to the direct URL, and pools stop preparing unless told to."""
    pooler, direct = "host=pgbouncer port=6432", "host=db port=5432"
    plain = PlanSettings.model_construct(database_url=direct)
    assert (plain.behind_pooler, plain.prepare(), plain.session_url()) == (False, True, None)
    same = PlanSettings.model_construct(database_url=direct, direct_database_url=direct)
    assert (same.behind_pooler, same.prepare(), same.session_url()) == (False, True, None)
    pooled = PlanSettings.model_construct(database_url=pooler, direct_database_url=direct)
    # The direct sessions carry the network timeouts, the server's side of them included.
    session = with_network_timeout(direct, DEFAULT_NETWORK_TIMEOUT, server_side=True)
    assert (pooled.behind_pooler, pooled.prepare(), pooled.session_url()) == (True, False, session)
    api = pooled.api_config()
    assert (api.behind_pooler, api.prepared_statements, api.direct_url()) == (True, False, session)
    # PgBouncer 1.21+ with max_prepared_statements: prepared again, still a pooler.
    modern = PlanSettings.model_construct(
        database_url=pooler, direct_database_url=direct, prepared_statements=True
    )
    assert (modern.behind_pooler, modern.prepare()) == (True, True)
