"""What gives a build container this machine's pip settings: `docker run` mounts (one per line), or
with --env the variables for the build's shell.

pip inside a container reaches the package index as the host's does: the host's CA bundle (without it
TLS verification fails where the network inspects TLS) and every setting `pip config list` shows (files
and PIP_* variables) as PIP_* variables, with the local paths they name (find-links, file:// indexes)
mounted read-only at the same place.
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys

CA_IN_CONTAINER = "/run/host-ca-bundle.pem"
DEFAULT_CA = "/etc/ssl/certs/ca-certificates.crt"


def pip_settings() -> dict[str, str]:
    """`pip config list` as {option: value}; variables (listed last) override files."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    settings: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        settings[key.split(".", 1)[1]] = ast.literal_eval(value)
    return settings


def local_paths(option: str, value: str) -> list[str]:
    """The existing local paths a setting names (`file:///x` or `/x`, space-separated). For an index
    (`.../simple`), the folder holding it: its pages link to files beside it (`../../files/...`)."""
    paths = [v.removeprefix("file://").rstrip("/") for v in value.split()]
    if option in ("index-url", "extra-index-url"):
        paths = [os.path.dirname(p) for p in paths]
    return [p for p in paths if p.startswith("/") and os.path.exists(p)]


def build_settings() -> tuple[list[str], dict[str, str]]:
    """The `docker run` mount options, and the variables for the build's shell (not `docker run -e`:
    `docker commit` would keep those in the image, pointing at a CA bundle that is not there)."""
    settings = pip_settings()
    ca = settings.pop("cert", None) or os.environ.get("SSL_CERT_FILE") or DEFAULT_CA
    mounts = ["-v", f"{ca}:{CA_IN_CONTAINER}:ro"]
    env = {name: CA_IN_CONTAINER for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")}
    paths: set[str] = set()
    for option, value in settings.items():
        env[f"PIP_{option.upper().replace('-', '_')}"] = value
        paths.update(local_paths(option, value))
    for path in sorted(paths):
        mounts += ["-v", f"{path}:{path}:ro"]
    return mounts, env


if __name__ == "__main__":
    mounts, env = build_settings()
    if sys.argv[1:] == ["--env"]:  # a file the build's shell sources
        print("\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items()))
    else:  # `docker run` options, one per line
        print("\n".join(mounts))
