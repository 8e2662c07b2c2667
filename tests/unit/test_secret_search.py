"""The tests' one secret search (tests/secret_search.py), which every leak test asks: a secret is
found in every form the provider or a library may leave it in, and nowhere it is not."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from tests.secret_search import find_secret, secret_hits

SECRET = "pa$$ w0rd/+?&=~Tok-9"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


FORMS = {
    "clear": f"password={SECRET};",
    "url-encoded": f"https://h/x?pw={quote(SECRET, safe='')}",
    "url-encoded, + for space": f"pw={quote_plus(SECRET)}&x=1",
    "url-encoded twice": "next=" + quote("pw=" + quote(SECRET, safe=""), safe=""),
    "base64": f"config=base64:{_b64(SECRET)}",
    "base64 without padding": f"Authorization: Basic {_b64('u:' + SECRET).rstrip('=')}",
    "url-safe base64": f"token={base64.urlsafe_b64encode(SECRET.encode()).decode()}",
    "base64 at an offset": f"x{_b64('ab' + SECRET + 'cd')}",
    "base64 cut by a mask": f"{_b64(json.dumps({'password': SECRET, 'more': 'x' * 40}))[:60]}***",
    "base64 of JSON of a URL-encoded password": _b64(json.dumps({"uri": f"https://u:{quote(SECRET)}@h"})),
}


@pytest.mark.parametrize("text", list(FORMS.values()), ids=list(FORMS))
def test_a_secret_is_found_in_every_form(text):
    (hit,) = secret_hits([SECRET, "some-other-secret"], {"place": text})
    assert hit[:2] == ("place", SECRET) and hit[2]


def test_the_form_it_was_found_in_is_named():
    assert find_secret(SECRET, FORMS["clear"]) == ["clear"]
    assert find_secret(SECRET, FORMS["url-encoded"]) == ["url-encoded"]
    assert find_secret(SECRET, FORMS["base64"]) == ["base64"]


def test_nothing_is_found_where_the_secret_is_not():
    almost = SECRET[:-1]
    texts = {
        "other": f"pw={almost} {_b64(almost)} {quote(almost, safe='')}",
        "bytes": b"\x00\xff" + _b64("nothing here").encode(),
    }
    assert secret_hits([SECRET], texts) == []


def test_every_place_and_every_secret_is_reported():
    hits = secret_hits(["s3cret-A", "s3cret-B"], {"log": "s3cret-A", "xcom": _b64("s3cret-B s3cret-A")})
    assert [(place, secret) for place, secret, _ in hits] == [
        ("log", "s3cret-A"),
        ("xcom", "s3cret-A"),
        ("xcom", "s3cret-B"),
    ]
