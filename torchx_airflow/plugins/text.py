"""What the view shows of texts the job controls: URLs without user info, links that stay links.

Artifact paths, run ids and links come from the tracker store and from XComs, that is from the
job: they may carry credentials (``https://bob:hunter2@host/x``) and they may try to pass for one
of Airflow's own pages.
"""

from __future__ import annotations

import re

# "//" then the authority's user info up to its last "@" (an unencoded "/", "?" or "#" ends the
# authority, so a path such as s3://bucket/file@2x.png is left alone)
_USERINFO = re.compile(r"//[^/?#\s]*@")


def strip_userinfo(text: str) -> str:
    """``text`` with the user info of every URL in it removed.

    Example::

        strip_userinfo("https://bob:hunter2@host/x")  # "https://host/x"
    """
    return _USERINFO.sub("//", text)


def is_airflow_page(url: str) -> bool:
    """A same-origin path: one leading ``/``, no backslash, no whitespace or control character.

    ``//host/x`` is another site, and browsers read ``/\\host/x`` (and ``/<tab>/host/x``, tabs and
    newlines being dropped) the same way.
    """
    return (
        url.startswith("/")
        and not url.startswith("//")
        and "\\" not in url
        and not any(ch <= " " or ch == "\x7f" for ch in url)
    )


def link_target(url: str) -> str | None:
    """Where the view opens ``url``: ``_top`` for Airflow's pages (they replace the UI around the
    view), ``_blank`` for other http(s) sites, None for anything a page must not link (``file://``
    log directories, ``javascript:``, ``//host``)."""
    if is_airflow_page(url):
        return "_top"
    if url.startswith(("http://", "https://")):
        return "_blank"
    return None
