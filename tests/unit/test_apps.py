"""The app builder's parameter parsing (torchx_airflow/apps.py)."""

from __future__ import annotations

import pytest

from torchx_airflow.apps import mapping_param
from torchx_airflow.exceptions import TorchXConfigError


@pytest.mark.parametrize(
    ("rendered", "expected"),
    [
        ('{"partition": "gpu", "nodes": 2}', {"partition": "gpu", "nodes": 2}),
        ("{'partition': 'gpu', 'exclusive': True}", {"partition": "gpu", "exclusive": True}),
        ({"a": 1}, {"a": 1}),
        (None, {}),
        ("", {}),
    ],
)
def test_a_rendered_mapping_parameter_is_read_as_json_or_a_python_literal(rendered, expected):
    assert mapping_param("t", "cfg", rendered) == expected


@pytest.mark.parametrize("rendered", ["partition=gpu", "[1, 2]", 7])
def test_a_rendered_mapping_parameter_that_is_not_a_mapping_is_named(rendered):
    with pytest.raises(TorchXConfigError) as err:
        mapping_param("train", "cfg", rendered)
    message = str(err.value)
    assert "'train'" in message and "'cfg'" in message and repr(rendered) in message
    assert "params.cfg" in message  # the fix


def test_the_output_roots_are_the_outputs_the_arguments_name(tmp_path):
    """A directory named, or a path not made yet (the job makes it), as itself: never a file's
    directory, never a parent; inside dist.ddp's ``bash -c`` command and ``a,b`` lists too; never /,
    /proc, /sys or /dev. Files named count for ``task_output_roots`` as themselves."""
    from torchx_airflow.apps import build_app_from_component, is_under, output_roots, task_output_roots

    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    args = ["-j", "1x1", "--script", str(script), "--", "--out", str(out), "--log=/runs/7/log.txt"]
    app = build_app_from_component(
        "dist.ddp", [*args, "--dev", "/dev/shm/x", "--top", "/x", "--parts=/p/a,/p/b"]
    )
    roots = set(output_roots(app))
    assert {str(out), "/runs/7/log.txt", "/x", "/p/a", "/p/b"} <= roots  # each path itself...
    assert not roots & {"/runs/7", "/", "/p", "/dev/shm/x", str(script), str(tmp_path)}  # ...no parent, file
    assert str(script) in task_output_roots(app, None) and str(tmp_path) not in task_output_roots(app, None)
    assert is_under(f"{out}/checkpoint.pt", str(out)) and not is_under(f"{out}/../../etc/x", str(out))
    assert is_under("s3://b/ckpt/run/c.pt", "s3://b/ckpt") and not is_under(
        "s3://b/ckptx/c.pt", "s3://b/ckpt"
    )
    assert not is_under("https://attacker.example/evil.pt", str(out))
