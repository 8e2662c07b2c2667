"""Finding a secret in any text the provider leaves behind: in clear, URL-encoded, or inside base64.

``find_secret(secret, text)`` says where ``secret`` shows in ``text``: as it is; in the text
percent-decoded (once and twice, ``+`` as a space or not); and inside every run of base64 characters
(standard and URL-safe alphabets), decoded from each of its four start alignments, padded or not,
whole or cut anywhere: a run that holds a secret decodes to it from the right alignment whatever
surrounds it, so a value masked halfway (``W3siY29...***``) is searched as well as a whole one.
What a run decodes to is searched again the same way (base64 of JSON holding a URL-encoded
password), to a small depth.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, unquote_plus

_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{6,}")
_MAX_DEPTH = 3


def _url_decoded(text: bytes) -> set[bytes]:
    forms = {text}
    for _ in range(2):  # twice: a value percent-encoded inside a percent-encoded query string
        for form in [f for f in forms if b"%" in f or b"+" in f]:
            decoded = form.decode("latin-1")
            forms |= {
                unquote(decoded).encode("latin-1", "replace"),
                unquote_plus(decoded).encode("latin-1", "replace"),
            }
    return forms


def _base64_decodings(text: bytes) -> Iterable[bytes]:
    """What every base64 run of ``text`` decodes to, in each of its four alignments, to its end
    whether padded or not. A run cut inside a group (a value masked halfway) is aligned by filling
    the group's missing start, so the bits it holds of the first byte still count."""
    for run in _BASE64_RUN.findall(text):
        run = run.replace(b"-", b"+").replace(b"_", b"/")
        for fill in range(4):
            piece = b"A" * fill + run
            piece = piece[: len(piece) - 1] if len(piece) % 4 == 1 else piece + b"=" * (-len(piece) % 4)
            if len(piece) < 4:
                continue
            try:
                yield base64.b64decode(piece, validate=True)
            except (binascii.Error, ValueError):
                continue


def _is_text(data: bytes) -> bool:
    """Whether a decoding is text (JSON, a URL...), which may hold further encoded values."""
    try:
        return data.decode().isprintable()
    except UnicodeDecodeError:
        return False


def _views(text: bytes, depth: int = 0) -> list[tuple[str, bytes]]:
    """``text`` as it is, URL-decoded, and every base64 decoding of it (recursively), with the form."""
    views = [("clear" if form == text else "url-encoded", form) for form in _url_decoded(text)]
    if depth < _MAX_DEPTH:
        for _, form in list(views):
            for decoded in _base64_decodings(form):
                if _is_text(decoded):
                    views += [("base64", inner) for _, inner in _views(decoded, depth + 1)]
                else:  # binary: searched, not decoded further
                    views.append(("base64", decoded))
    return views


def _forms_in(secret: bytes, views: Iterable[tuple[str, bytes]]) -> list[str]:
    return sorted({form for form, view in views if secret in view})


def find_secret(secret: str, text: str | bytes) -> list[str]:
    """The forms in which ``secret`` shows in ``text`` (``clear``, ``url-encoded``, ``base64``);
    [] if none."""
    data = text.encode() if isinstance(text, str) else text
    return _forms_in(secret.encode(), _views(data))


def secret_hits(
    secrets: Iterable[str], places: Mapping[str, str | bytes]
) -> list[tuple[str, str, list[str]]]:
    """``(place, secret, forms)`` for every secret found in any place (each place decoded once)."""
    secrets = list(secrets)
    hits = []
    for place, text in places.items():
        views = _views(text.encode() if isinstance(text, str) else text)
        hits += [(place, secret, forms) for secret in secrets if (forms := _forms_in(secret.encode(), views))]
    return hits
