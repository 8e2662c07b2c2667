"""The one table of [torchx] options (torchx_airflow/settings/options.py) and the one resolver
(settings/resolve.py): what Airflow, the docs and every knob read."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchx_airflow.get_provider_info import get_provider_info
from torchx_airflow.settings.resolve import resolve


def test_the_torchx_config_section_and_the_docs_are_rendered_from_the_options_table(monkeypatch):
    """One table: Airflow's [torchx] section, the defaults it reads, the resolver and the docs."""
    from airflow.sdk.configuration import conf

    from torchx_airflow.settings.options import OPTIONS, options_markdown, site_value

    monkeypatch.delenv("AIRFLOW__TORCHX__MIN_POLL_INTERVAL")  # the unit tests' own settings
    monkeypatch.delenv("AIRFLOW__TORCHX__CACHE_KEY_SECRET")
    section = get_provider_info()["config"]["torchx"]["options"]
    assert list(section) == [option.name for option in OPTIONS]
    for option in OPTIONS:
        assert section[option.name]["type"] == option.type
        # the default Airflow reads is the table's, and so is what the resolver falls back to
        typed = str if option.type == "string" else float
        assert (
            typed(conf.get("torchx", option.name)) == typed(option.default) == typed(site_value(option.name))
        )
    page = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text()
    assert options_markdown() in page, (
        "docs/configuration.md: paste `python -m torchx_airflow.settings.options`"
    )


def test_a_bad_site_option_is_refused_naming_it(monkeypatch):
    from torchx_airflow.exceptions import TorchXConfigError
    from torchx_airflow.settings.resolve import resolve

    monkeypatch.setenv("AIRFLOW__TORCHX__TRACKER_TIMEOUT", "soon")
    with pytest.raises(
        TorchXConfigError, match=r"\[torchx\] tracker_timeout: tracker_timeout must be a positive"
    ):
        resolve("tracker_timeout")
    assert resolve("tracker_timeout", 5.0) == 5.0  # a task's own value never reads the site's


@pytest.mark.parametrize(
    ("task", "connection", "site", "expected"),
    [
        (7.0, 99.0, "1234", 7.0),
        (None, 99.0, "1234", 99.0),
        (None, None, "1234", 1234.0),
        (None, None, None, 600.0),
    ],
    ids=["task-wins", "connection-next", "site-next", "default-last"],
)
def test_one_resolver_task_then_connection_then_site_then_default(
    monkeypatch, task, connection, site, expected
):
    if site is None:
        monkeypatch.delenv("AIRFLOW__TORCHX__OUTAGE_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__TORCHX__OUTAGE_TIMEOUT", site)
    assert float(resolve("outage_timeout", task, connection)) == expected


def test_a_task_value_of_zero_is_a_value_not_unset(monkeypatch):
    """0 resubmissions is the task's choice: the connection's 3 must not fill it in."""
    monkeypatch.setenv("AIRFLOW__TORCHX__INFRASTRUCTURE_RETRIES", "5")
    assert resolve("infrastructure_retries", 0, 3) == 0
    assert resolve("infrastructure_retries", None, 0) == 0
