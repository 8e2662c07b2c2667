"""What the view shows of texts a job controls: URLs without user info, links that stay links."""

from __future__ import annotations

import pytest

from torchx_airflow.plugins.text import is_airflow_page, link_target, strip_userinfo


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://bob:hunter2@host/x", "https://host/x"),
        ("s3://key:se@cret@bucket/f", "s3://bucket/f"),  # up to the authority's last "@"
        ("see sftp://u:p@h/a and https://t@h/b", "see sftp://h/a and https://h/b"),
        ("s3://bucket/file@2x.png", "s3://bucket/file@2x.png"),  # an "@" in the path is not user info
        ("https://host/x?who=a@b", "https://host/x?who=a@b"),
        ("/local/path", "/local/path"),
    ],
)
def test_user_info_of_every_url_is_removed_and_nothing_else(text, shown):
    assert strip_userinfo(text) == shown


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("/dags/d/runs/r", "_top"),
        ("https://mlflow.example/#/runs/1", "_blank"),
        ("http://host:5000/x", "_blank"),
        ("//evil.example/x", None),
        ("/\\evil.example/x", None),
        ("/\t/evil.example", None),
        ("/x\x7f", None),
        ("javascript:alert(1)", None),
        ("JAVASCRIPT:alert(1)", None),
        ("file:///var/log", None),
        ("data:text/html,x", None),
        ("", None),
    ],
)
def test_only_same_origin_paths_and_http_sites_are_linked(url, target):
    assert link_target(url) == target
    assert is_airflow_page(url) is (target == "_top")
