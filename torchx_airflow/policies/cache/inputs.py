"""The inputs of a cache key: a task whose inputs match an earlier run that SUCCEEDED submits nothing.

With ``TorchXOperator(cache=True)`` (or ``@task.torchx(cache=True)``, or the connection's extra
``cache``) the task computes a *key* before submitting: the SHA-256 of the canonical JSON
(``key_inputs``) of what determines its app's result:

- the app as the scheduler would get it: every role's image (and its digest, where the scheduler
  layer has one), entrypoint, rendered arguments, env names and values, resources, replicas, retry
  policy, ports and mounts, and the app's metadata; values that are secrets (names Airflow's masker
  hides, values holding a secret it knows, URL passwords) enter as an HMAC-SHA256 under the
  deployment's cache key (``policies.cache.signing``), never as themselves: a digest in the task
  log cannot be tested against guesses without that key, and deployments with different keys get
  different keys (they never share cache hits). The provider's own variables (the tracker config,
  the OpenLineage parent) and the app's name are left out: they say where a run is recorded, not
  what it computes;
- the scheduler and its resolved run options (``cfg`` with the scheduler's defaults filled in);
- the local files the arguments name (job scripts, configs), by content (``fingerprints``);
- every artifact of every parent run (the nearest upstream TorchX apps and tracked tasks, as for
  lineage): its path and what its store offers about it (content digest, ETag, size, time);
- the scope (``cache_scope``): ``dag:<dag_id>`` by default, so a hit never crosses DAGs, or
  ``deployment``;
- ``cache_salt``, and the key format's version.

``cache_ignore_args`` leaves arguments out: ``"--out=*"`` the value of the option ``--out`` (``--out
X`` or ``--out=X``), ``"-v"`` the flag ``-v`` (dropped; ``-v=X`` leaves X out; the argument after a
flag is never taken, so no rule can swallow a positional file), anything else is an ``fnmatch``
pattern matched against whole arguments (``"/tmp/run-*"``). Ignored values are replaced, not dropped, so a
component still parses its arguments: for a component they apply to ``component_args``, for an
``AppDef`` to each role's arguments.

A signed record (``policies.cache.records``) goes to every tracker store of the task when a run
with that key SUCCEEDED (never for a failed or cancelled one), under the key
(``torchx_airflow_tracker.cache_records``). The next task with the same key finds it in the first
store that has it, checks its signature and scope, that it has not expired (``cache_ttl``, default
30 days) and that the run's outputs (its artifacts) still hold what they held, and returns its
result with ``cache_hit: True`` and ``cached_from: <handle>``, submitting nothing. Anything the key
needs that cannot be read (a parent's artifact that is gone, a tracker that does not answer) turns
caching off for that execution, with a warning: the task runs, and records no key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx.specs import AppDef
    from torchx_airflow_tracker.protocol import ProviderStore

    from torchx_airflow.policies.cache.fingerprints import ReadScope
    from torchx_airflow.policies.cache.signing import CacheKeys

KEY_VERSION = 2

#: What an ignored argument's value becomes in the app the key is computed from.
IGNORED = "<cache_ignore_args>"
_GLOB = re.compile(r"[*?\[]")


# parameters


def _is_option_rule(rule: str) -> bool:
    return rule.startswith("-") and "=" not in rule and not _GLOB.search(rule)


def _valued_option(rule: str) -> str | None:
    """``--out`` for the rule ``--out=*`` (an option declared as taking a value), else None."""
    name, equals, value = rule.partition("=")
    if equals and value == "*" and _is_option_rule(name):
        return name
    return None


def ignore_args(args: Sequence[str], rules: Sequence[str]) -> list[str]:
    """``args`` with what ``rules`` ignore replaced by ``IGNORED`` (a flag is dropped).

    ``--out=*`` declares an option that takes a value: ``--out X`` and ``--out=X`` both leave X out.
    A bare option name (``-v``, ``--log``) is a flag: ``-v`` is dropped, ``--log=X`` leaves X out,
    and the argument after it is never taken, so ``-v a.csv`` and ``-v b.csv`` keep their files
    apart. Anything else is an ``fnmatch`` pattern matched against whole arguments.

    >>> ignore_args(["--out", "/r/1", "--log=DEBUG", "-v", "a.csv"], ["--out=*", "--log", "-v"])
    ['--out', '<cache_ignore_args>', '--log=<cache_ignore_args>', 'a.csv']
    >>> ignore_args(["train.py", "/tmp/run-7/out"], ["/tmp/run-*"])
    ['train.py', '<cache_ignore_args>']
    """
    valued = [name for name in map(_valued_option, rules) if name is not None]
    flags = [r for r in rules if _is_option_rule(r)]
    patterns = [r for r in rules if not _is_option_rule(r) and _valued_option(r) is None]
    kept: list[str] = []
    i = 0
    while i < len(args):
        arg = str(args[i])
        option = next((o for o in (*valued, *flags) if arg == o or arg.startswith(o + "=")), None)
        if option is not None and arg.startswith(option + "="):
            kept.append(f"{option}={IGNORED}")
        elif option in valued and i + 1 < len(args):
            kept += [arg, IGNORED]  # the option's own value, whatever it looks like
            i += 1
        elif option is None and any(fnmatchcase(arg, p) for p in patterns):
            kept.append(IGNORED)
        elif option is None:
            kept.append(arg)
        i += 1
    return kept


def with_prepared_changes(key_app: AppDef, built: AppDef, prepared: AppDef, rules: Sequence[str]) -> AppDef:
    """``key_app`` (the task's app as its key sees it: arguments ``rules`` ignore replaced, no provider
    env) with what the policies' ``prepare`` changed of ``built`` into ``prepared``: each role field
    they changed is the prepared one (its arguments under ``rules``), each env entry they added,
    changed or removed likewise, roles they added or removed, and the app's metadata. A prepared app
    never leaves the key: a policy that adds ``TEAM=research`` gets a key of its own.

    >>> from torchx.specs import AppDef, Role
    >>> built = AppDef("a", roles=[Role("r", "img", args=["--out", "/o/1"], env={"TORCHX_TRACKERS": "x"})])
    >>> keyed = AppDef("a", roles=[Role("r", "img", args=["--out", IGNORED])])
    >>> prepared = AppDef("a", roles=[Role("r", "img", args=["--out", "/o/1"],
    ...                                    env={"TORCHX_TRACKERS": "x", "TEAM": "ml"})])
    >>> role = with_prepared_changes(keyed, built, prepared, ["--out=*"]).roles[0]
    >>> role.env, role.args
    ({'TEAM': 'ml'}, ['--out', '<cache_ignore_args>'])
    """
    import copy

    keyed = copy.deepcopy(key_app)
    provider_env = {k for r in built.roles for k in r.env} - {k for r in key_app.roles for k in r.env}
    built_roles = {role.name: role for role in built.roles}
    keyed_roles = {role.name: role for role in keyed.roles}
    roles = []
    for role in prepared.roles:
        before, mine = built_roles.get(role.name), keyed_roles.get(role.name)
        if before is None or mine is None:  # a role prepare added (or renamed)
            mine = copy.deepcopy(role)
            mine.env = {k: v for k, v in role.env.items() if k not in provider_env}
            mine.args = ignore_args([str(a) for a in role.args], rules)
        else:
            _apply_role_changes(mine, before, role, rules)
        roles.append(mine)
    keyed.roles = roles
    if prepared.metadata != built.metadata:
        keyed.metadata = copy.deepcopy(prepared.metadata)
    return keyed


def _apply_role_changes(keyed: Any, built: Any, prepared: Any, rules: Sequence[str]) -> None:
    import copy

    for field in dataclasses.fields(prepared):
        now, was = getattr(prepared, field.name), getattr(built, field.name)
        if now == was:
            continue
        if field.name == "env":
            env = dict(keyed.env)
            for name in set(was) | set(now):
                if name not in now:
                    env.pop(name, None)
                elif was.get(name) != now[name]:
                    env[name] = now[name]
            keyed.env = env
        elif field.name == "args":
            keyed.args = ignore_args([str(a) for a in now], rules)
        else:
            setattr(keyed, field.name, copy.deepcopy(now))


# the key


def secret_digest(name: str, value: str, keys: CacheKeys) -> str:
    """What a secret value adds to a key: its HMAC-SHA256 under the deployment's cache key."""
    return keys.digest(name, value)


def _holds_secret(text: str) -> bool:
    from torchx_airflow.secrets import redact_text, uri_secrets

    return bool(uri_secrets(text)) or redact_text(text) != text


def _shown(name: str, value: Any, secret: bool, keys: CacheKeys) -> Any:
    if secret or (isinstance(value, str) and _holds_secret(value)):
        return {"secret_hmac": secret_digest(name, str(value), keys)}
    return value


def _role_doc(role: Any, digests: Mapping[str, str], keys: CacheKeys) -> dict[str, Any]:
    from torchx_airflow.apps import json_safe
    from torchx_airflow.schedulers.env import secret_env_names

    doc: dict[str, Any] = json_safe(dataclasses.asdict(role))  # every field, whatever TorchX's version
    secret = secret_env_names({str(k): str(v) for k, v in role.env.items()})
    doc["env"] = {str(k): _shown(str(k), str(v), str(k) in secret, keys) for k, v in sorted(role.env.items())}
    doc["args"] = [_shown(f"{role.name}.args", str(a), False, keys) for a in role.args]
    doc["entrypoint"] = _shown(f"{role.name}.entrypoint", str(role.entrypoint), False, keys)
    doc["image_digest"] = digests.get(role.image)
    return doc


def key_inputs(
    app: AppDef,
    scheduler: str,
    cfg: Mapping[str, Any],
    *,
    keys: CacheKeys,
    scope: str = "deployment",
    files: Mapping[str, Any] | None = None,
    parents: Sequence[Mapping[str, Any]] = (),
    salt: str = "",
    image_digests: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The canonical description the key hashes (see the module's docstring); holds no secret.

    :param app: the task's app without the provider's env, ignored arguments replaced.
    :param cfg: the scheduler's resolved run options.
    :param keys: the deployment's cache keys (secret values enter as an HMAC under the first).
    :param scope: ``dag:<dag_id>`` or ``deployment`` (``cache_scope``): tasks share hits only within it.
    :param files: path -> fingerprint of the local files the arguments name.
    :param parents: ``{"path", "fingerprint"}`` of every artifact of every parent run.
    :param image_digests: image -> digest, where the scheduler layer resolves one.
    """
    from torchx_airflow.apps import json_safe
    from torchx_airflow.secrets import should_hide_value_for_key

    digests = image_digests or {}
    return {
        "version": KEY_VERSION,
        "scheduler": scheduler,
        "cfg": {
            str(k): _shown(f"cfg.{k}", json_safe(v), should_hide_value_for_key(str(k)), keys)
            for k, v in sorted(cfg.items())
        },
        "app": {
            "metadata": json_safe(dict(app.metadata or {})),
            "roles": [_role_doc(role, digests, keys) for role in app.roles],
        },
        "files": dict(sorted((files or {}).items())),
        "parents": sorted((dict(p) for p in parents), key=lambda p: json.dumps(p, sort_keys=True)),
        "salt": salt,
        "scope": scope,
    }


def key_of(inputs: Mapping[str, Any]) -> str:
    """The cache key: SHA-256 of the inputs' canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_inputs(app: AppDef) -> dict[str, Any]:
    """Path -> fingerprint of the local files ``app`` names; ``FingerprintError`` if one is unreadable."""
    from torchx_airflow.apps import named_files
    from torchx_airflow.policies.cache.fingerprints import fingerprint

    return {path: fingerprint(path) for path in named_files(app)}


def parent_inputs(
    store: ProviderStore, parents: Sequence[str], scope: ReadScope | None = None
) -> list[dict[str, Any]]:
    """``{"path", "fingerprint"}`` of every artifact of every parent in ``store``; raises
    ``FingerprintError`` for one that cannot or may not be read.

    The paths are what the parents' runs recorded, which any job tracking to the store can write:
    each is read within ``scope`` (``fingerprints.read_scope`` of the task and its stores; default:
    the store's own root), never a device, a FIFO, ``/proc`` or a URL outside the stores.
    """
    from torchx_airflow.policies.cache.fingerprints import fingerprint, read_scope
    from torchx_airflow.secrets import strip_userinfo

    scope = scope if scope is not None else read_scope(None, [store])
    paths = {str(a.path) for parent in parents for a in store.artifacts(parent).values() if a.path}
    return [{"path": strip_userinfo(path), "fingerprint": fingerprint(path, scope)} for path in sorted(paths)]


# records
