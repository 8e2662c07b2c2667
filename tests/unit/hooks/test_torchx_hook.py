"""TorchXHook: connection parsing, scheduler and cfg checks against TorchX's real runopts."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import Connection

from torchx_airflow.exceptions import TorchXConfigError, TorchXConnectionError, TorchXInputError
from torchx_airflow.hooks.torchx import TorchXConnectionSettings, TorchXHook


def _conn(monkeypatch, conn_id: str, extra: dict | str) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "torchx", "extra": extra if isinstance(extra, dict) else json.loads(extra)}),
    )


def test_settings_defaults_to_local_cwd():
    settings = TorchXConnectionSettings.from_extra("c", {})
    assert settings == TorchXConnectionSettings(scheduler="local_cwd", cfg={}, trackers=())


def test_settings_accepts_ui_prefixed_keys_and_json_strings():
    settings = TorchXConnectionSettings.from_extra(
        "c",
        {"extra__torchx__scheduler": "slurm", "cfg": '{"partition": "gpu"}', "trackers": "fs_a, ml_b"},
    )
    assert settings.scheduler == "slurm"
    assert settings.cfg == {"partition": "gpu"}
    assert settings.trackers == ("fs_a", "ml_b")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"cfg": "{not json"}, "extra 'cfg' is not valid JSON"),
        ({"cfg": ["a"]}, r"extra 'cfg': \['a'\] is not of type 'object'"),
        ({"trackers": {"a": 1}}, r"extra 'trackers': \{'a': 1\} is not of type 'array'"),
        ({"scheduler": 3}, "extra 'scheduler': 3 is not of type 'string'"),
    ],
)
def test_settings_reject_malformed_extra(extra, fragment):
    with pytest.raises(TorchXConnectionError, match=fragment) as err:
        TorchXConnectionSettings.from_extra("my_conn", extra)
    assert "'my_conn'" in str(err.value)
    assert isinstance(err.value, TorchXInputError)


def test_missing_connection_names_the_id_and_the_fix():
    hook = TorchXHook("no_such_torchx_conn")
    with pytest.raises(TorchXConnectionError) as err:
        hook.settings  # noqa: B018 - reading the property looks the connection up
    assert "'no_such_torchx_conn' is not defined" in str(err.value)
    assert "AIRFLOW_CONN_NO_SUCH_TORCHX_CONN=" in str(err.value)


def test_overrides_win_over_the_connection(monkeypatch):
    _conn(monkeypatch, "tx_over", {"scheduler": "slurm", "cfg": {"partition": "a", "time": "1:00"}})
    hook = TorchXHook("tx_over", scheduler="local_cwd", cfg={"partition": "b"})
    assert hook.scheduler == "local_cwd"
    assert hook.cfg == {"partition": "b", "time": "1:00"}


def test_unknown_scheduler_lists_the_known_ones(monkeypatch):
    _conn(monkeypatch, "tx_bad_sched", {"scheduler": "slurmm"})
    expected = "Unknown TorchX scheduler 'slurmm' in extra 'scheduler' of connection 'tx_bad_sched'.*slurm"
    with pytest.raises(TorchXConfigError, match=expected):
        TorchXHook("tx_bad_sched").resolve_cfg("slurmm", {})


def test_resolve_cfg_fills_defaults_and_converts_strings():
    hook = TorchXHook()
    resolved = hook.resolve_cfg("local_cwd", {"prepend_cwd": "true", "log_dir": "/tmp/x"})
    assert resolved["prepend_cwd"] is True
    assert resolved["log_dir"] == "/tmp/x"
    assert resolved["auto_set_cuda_visible_devices"] is False


def test_resolve_cfg_rejects_unknown_option_with_valid_ones():
    with pytest.raises(TorchXConfigError) as err:
        TorchXHook().resolve_cfg("local_cwd", {"partitionn": "gpu"})
    assert "Unknown run option(s) ['partitionn'] for scheduler 'local_cwd'" in str(err.value)
    assert "log_dir" in str(err.value)


def test_resolve_cfg_rejects_wrong_type():
    with pytest.raises(TorchXConfigError, match="Invalid cfg for scheduler 'local_cwd'.*prepend_cwd"):
        TorchXHook().resolve_cfg("local_cwd", {"prepend_cwd": ["yes"]})


def test_resolve_cfg_rejects_missing_required_option():
    with pytest.raises(TorchXConfigError, match="Required run option: queue"):
        TorchXHook().resolve_cfg("kubernetes", {})


def test_slurm_cfg_checked_against_slurm_runopts():
    resolved = TorchXHook().resolve_cfg("slurm", {"partition": "debug", "time": "0:10:00"})
    assert resolved["partition"] == "debug"
    with pytest.raises(TorchXConfigError, match="'slurm'"):
        TorchXHook().resolve_cfg("slurm", {"queue": "x"})


def test_test_connection_reports_success_and_failures_without_raising(monkeypatch):
    _conn(monkeypatch, "tx_ok", {"scheduler": "local_cwd", "cfg": {"prepend_cwd": True}})
    ok, message = TorchXHook("tx_ok").test_connection()
    assert ok, message
    assert "'local_cwd' is available" in message

    _conn(monkeypatch, "tx_bad_cfg", {"scheduler": "local_cwd", "cfg": {"nope": 1}})
    ok, message = TorchXHook("tx_bad_cfg").test_connection()
    assert not ok
    assert "Unknown run option(s) ['nope']" in message

    ok, message = TorchXHook("tx_missing_entirely").test_connection()
    assert not ok
    assert "is not defined" in message


def test_hook_contract_attributes():
    assert TorchXHook.conn_name_attr == "torchx_conn_id"
    assert TorchXHook.default_conn_name == "torchx_default"
    assert TorchXHook.conn_type == "torchx"
    assert TorchXHook.hook_name == "TorchX"


def test_connection_get_hook_builds_the_hook_and_tests_it():
    """The UI, REST API and CLI "Test": Connection.get_hook() passes the id as conn_name_attr."""
    conn = Connection(
        conn_id="tx_via_get_hook",
        conn_type="torchx",
        extra=json.dumps({"scheduler": "local_cwd", "cfg": {"prepend_cwd": "yes"}}),
    )
    hook = conn.get_hook()
    assert type(hook) is TorchXHook
    assert hook.torchx_conn_id == "tx_via_get_hook"
    ok, message = conn.test_connection()
    assert ok, message
    assert "'prepend_cwd': True" in message


def test_run_option_strings_are_converted_where_the_meaning_is_certain():
    hook = TorchXHook()
    docker = hook.resolve_cfg("local_docker", {"copy_env": "A;B,", "env": "K:v,L:w:x", "privileged": "No"})
    assert docker["copy_env"] == ["A", "B"]
    assert docker["env"] == {"K": "v", "L": "w:x"}
    assert docker["privileged"] is False
    from tests.unit.test_bad_inputs import INT_OPTION, INT_SCHEDULER

    assert hook.resolve_cfg(INT_SCHEDULER, {"queue": "q", INT_OPTION: " 7 "})[INT_OPTION] == 7


def test_a_bad_value_from_the_task_names_the_tasks_cfg(monkeypatch):
    _conn(monkeypatch, "tx_task_cfg", {"cfg": {"log_dir": "/tmp"}})
    hook = TorchXHook("tx_task_cfg", cfg={"prepend_cwd": "maybe"})
    with pytest.raises(TorchXConfigError, match="the task's 'cfg'.*'prepend_cwd' takes true or false"):
        hook.resolve_cfg(hook.scheduler, hook.cfg)
    with pytest.raises(TorchXConfigError, match="Unknown TorchX scheduler 'nope' in the task's 'scheduler'"):
        TorchXHook("tx_task_cfg", scheduler="nope").check_scheduler("nope")


def test_test_connection_names_the_trackers_it_checked(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_FS_FOR_TX",
        json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(tmp_path)}}),
    )
    _conn(monkeypatch, "tx_tracked", {"trackers": ["fs_for_tx"]})
    ok, message = TorchXHook("tx_tracked").test_connection()
    assert ok, message
    assert "trackers ['fs_for_tx'] are defined" in message


def test_dry_run_summary_describes_what_torchx_submits():
    """TorchX main dry-runs a copy of the app; the summary must still show the env TorchX adds."""
    from torchx_airflow.apps import build_app_from_component, summarize_dryrun

    hook = TorchXHook()
    app = build_app_from_component("utils.echo", ["--msg", "hi"])
    app.roles[0].env["SERVICE_API_KEY"] = "summary-secret-4411"
    summary = summarize_dryrun(hook.dryrun(app, "local_cwd", {}).info, app, "local_cwd", {})
    (role,) = summary["roles"]
    assert {"SERVICE_API_KEY", "TORCHX_JOB_ID"} <= set(role["env_names"])
    assert "summary-secret-4411" not in summary["request"]


def test_scheduler_entry_points_are_read_once_per_process(monkeypatch):
    """Reading TorchX's scheduler factories scans every installed distribution's entry points: a
    task's dry run and submission (runner, scheduler check, a second hook) read them once."""
    import torchx.schedulers

    from torchx_airflow.hooks import torchx as hook_module

    reads = []
    real = torchx.schedulers.get_scheduler_factories
    monkeypatch.setattr(torchx.schedulers, "get_scheduler_factories", lambda: reads.append(1) or real())
    hook_module._scheduler_factories.cache_clear()
    try:
        for _ in range(2):
            hook = TorchXHook(scheduler="local_cwd")
            hook.resolve_cfg(hook.check_scheduler("local_cwd"), {})
            assert "local_cwd" in hook.runner.scheduler_backends()
            hook.close()
    finally:
        hook_module._scheduler_factories.cache_clear()
    assert len(reads) == 1
