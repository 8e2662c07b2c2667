"""The default scheduler support (torchx_airflow/schedulers/base.py) on real local_cwd apps."""

from __future__ import annotations

from torchx_airflow.hooks.torchx import TorchXHook


def test_statuses_through_the_default_layer_answer_every_handle():
    from torchx_airflow.apps import build_app_from_component

    hook = TorchXHook()
    app_handle = hook.schedule(hook.dryrun(build_app_from_component("utils.sh", ["true"])))
    assert hook.wait(app_handle, wait_interval=0.2).state.name == "SUCCEEDED"
    unknown = "local_cwd://torchx/never-launched"
    answer = hook.statuses([app_handle, unknown])
    assert answer[app_handle].state.name == "SUCCEEDED" and answer[unknown] is None
    hook.close()
