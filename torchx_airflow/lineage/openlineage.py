"""OpenLineage for TorchX apps: what ``TorchXOperator`` reports to Airflow's OpenLineage provider.

With ``apache-airflow-providers-openlineage`` installed (``pip install 'torchx-airflow[openlineage]'``)
the provider calls the operator's ``get_openlineage_facets_on_start/_on_complete/_on_failure``,
which delegate here with plain values (the app, the scheduler, the run's outcome, the first tracker
store): nothing here knows the operator. Each returns an ``OperatorLineage`` with

- job facet ``torchx_app``: scheduler, app name and per role the image, entrypoint, replicas,
  resources and env variable *names* (values never leave the worker);
- run facets ``torchx_run`` (app handle, final state, message, structured error, tracker sources,
  every attempt of a job the infrastructure ended, and ``cachedFrom`` for a cache hit),
  ``torchx_usage`` (what the run used by its scheduler's accounting, and its cost with a price
  table: ``policies.cost.usage``) and the standard ``externalQuery`` (the handle, so backends
  link to the scheduler's job);
- datasets: one per TorchX run, namespace ``torchx://<scheduler>``, name ``<session>/<app_id>``, an
  output of its own task and an input of every child task; each tracker artifact, named by the
  OpenLineage naming spec for its URI, an output of the app that recorded it and an input of the
  child apps whose arguments or env values name it (the edges the trackers record with that
  artifact's name).

:func:`parent_run_env` gives the job ``OPENLINEAGE_PARENT_ID`` and ``OPENLINEAGE_ROOT_PARENT_ID``,
so OpenLineage events the training job emits itself nest under the Airflow task's run.

Importing this module imports no OpenLineage module (DAG parse time stays cheap, and nothing changes
without the provider): OpenLineage and the provider are imported inside the functions that use them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from torchx_airflow.secrets import strip_userinfo

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from openlineage.client.event_v2 import Dataset
    from torchx.specs import AppDef, AppStatus
    from torchx_airflow_tracker.protocol import ProviderStore


log = logging.getLogger(__name__)

RUN_NAMESPACE_PREFIX = "torchx://"
APP_FACET = "torchx_app"
RUN_FACET = "torchx_run"
USAGE_FACET = "torchx_usage"
ARTIFACT_FACET = "torchx_artifact"
# Every facet names a schema URI; these are this provider's own (documented in docs/openlineage.md).
FACET_SCHEMA = "urn:torchx-airflow:openlineage:{}:1"
PARENT_ENV = "OPENLINEAGE_PARENT_ID"
ROOT_PARENT_ENV = "OPENLINEAGE_ROOT_PARENT_ID"


def is_enabled() -> bool:
    """True when the OpenLineage provider is installed and not disabled by its configuration."""
    try:
        from airflow.providers.openlineage import conf
    except ImportError:
        return False
    return not conf.is_disabled()


# naming


def run_dataset_name(app_handle: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of a TorchX run: ``slurm://torchx/12`` -> ``("torchx://slurm", "torchx/12")``.

    ``None`` for a tracker run id that is not a TorchX app (``airflow://dag/run/task`` of a tracked
    ``@task``): those runs have no TorchX dataset.
    """
    from torchx_airflow.apps import AppHandle, is_app_handle

    if not is_app_handle(app_handle):
        return None
    handle = AppHandle.parse(app_handle)
    return f"{RUN_NAMESPACE_PREFIX}{handle.scheduler}", f"{handle.session}/{handle.app_id}"


def artifact_dataset_name(path: str) -> tuple[str, str]:
    """``(namespace, name)`` of an artifact path by the OpenLineage naming spec.

    >>> artifact_dataset_name("s3://ml/models/resnet.pt")
    ('s3://ml', 'models/resnet.pt')
    >>> artifact_dataset_name("/data/model.json")
    ('file', '/data/model.json')

    A URL's user info (``https://bob:pw@host/x``) is never part of a name: lineage is shown to
    everyone who may read it.
    """
    from openlineage.client.naming import dataset as naming

    path = strip_userinfo(path)
    parts = urlsplit(path)
    if not parts.scheme or len(parts.scheme) == 1:  # a local path (or a Windows drive letter)
        return _named(naming.LocalFileSystem(path=path))
    if parts.scheme == "file":
        local = parts.path or "/"
        if parts.netloc in ("", "localhost"):
            return _named(naming.LocalFileSystem(path=local))
        return _named(naming.RemoteFileSystem(host=parts.netloc, path=local))
    key = parts.path.lstrip("/")
    if parts.scheme in ("s3", "s3a", "s3n") and parts.netloc and key:
        return _named(naming.S3(bucket_name=parts.netloc, object_key=key))
    if parts.scheme == "gs" and parts.netloc and key:
        return _named(naming.GCS(bucket_name=parts.netloc, object_key=key))
    # any other URL: namespace scheme://authority, name the path (the spec's general rule)
    return f"{parts.scheme}://{parts.netloc}", key or "/"


def _named(naming: Any) -> tuple[str, str]:
    return naming.get_namespace(), naming.get_name()


def _dataset(kind: str, namespace: str, name: str, artifact: tuple[str, str] | None = None) -> Dataset:
    """A dataset; ``artifact`` (name, run id) adds facet ``torchx_artifact``: which artifact it is."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    cls = InputDataset if kind == "input" else OutputDataset
    if artifact is None:
        return cls(namespace=namespace, name=name)
    facet = _facet_classes()[2](artifactName=artifact[0], run=artifact[1])
    return cls(namespace=namespace, name=name, facets={ARTIFACT_FACET: facet})


def _unique(datasets: Iterable[Dataset]) -> list[Dataset]:
    seen: dict[tuple[str, str], Dataset] = {}
    for dataset in datasets:
        seen.setdefault((dataset.namespace, dataset.name), dataset)
    return list(seen.values())


# facets


def _facet_classes() -> tuple[type, type, type, type]:
    """The custom facet classes, defined on first use so this module imports without OpenLineage."""
    global _FACETS
    if _FACETS is None:
        import attr
        from openlineage.client.facet_v2 import DatasetFacet, JobFacet, RunFacet

        @attr.define
        class TorchXAppJobFacet(JobFacet):
            """The TorchX app a task runs: scheduler, app name, roles (env names only)."""

            scheduler: str | None
            appName: str  # noqa: N815 - OpenLineage facets use camelCase
            roles: list[dict[str, Any]]

            @staticmethod
            def _get_schema() -> str:
                return FACET_SCHEMA.format("app-job-facet")

        @attr.define
        class TorchXRunFacet(RunFacet):
            """One TorchX run: its handle, final state and error, its tracker sources and, for a
            cache hit, the earlier run whose result the task returned (``appHandle`` is that run's)."""

            appHandle: str  # noqa: N815
            state: str
            message: str = ""
            structuredError: str = ""  # noqa: N815
            sources: list[str] = attr.Factory(list)
            # every job the task ran for this run, the infrastructure's ends resubmitted
            attempts: list[dict[str, Any]] = attr.Factory(list)
            cachedFrom: str = ""  # noqa: N815

            @staticmethod
            def _get_schema() -> str:
                return FACET_SCHEMA.format("run-facet")

        @attr.define
        class TorchXUsageRunFacet(RunFacet):
            """What one TorchX run used (``source``: sacct, process, requested) and, priced, its cost."""

            source: str
            elapsedSeconds: float | None = None  # noqa: N815
            cpuTimeSeconds: float | None = None  # noqa: N815
            totals: dict[str, Any] | None = None
            usage: dict[str, Any] = attr.Factory(dict)
            cost: dict[str, Any] | None = None

            @staticmethod
            def _get_schema() -> str:
                return FACET_SCHEMA.format("usage-run-facet")

        @attr.define
        class TorchXArtifactDatasetFacet(DatasetFacet):
            """A dataset that is a tracker artifact: its name, and the run that recorded it."""

            artifactName: str  # noqa: N815
            run: str

            @staticmethod
            def _get_schema() -> str:
                return FACET_SCHEMA.format("artifact-dataset-facet")

        _FACETS = (TorchXAppJobFacet, TorchXRunFacet, TorchXArtifactDatasetFacet, TorchXUsageRunFacet)
    return _FACETS


_FACETS: tuple[type, type, type, type] | None = None


def app_job_facets(app: AppDef, scheduler: str | None) -> dict[str, Any]:
    """Job facets of ``app``: ``torchx_app`` (roles, images, entrypoints, replicas, resources, env names)."""
    from torchx_airflow.apps import summarize_role

    app_facet = _facet_classes()[0]
    # role args can carry anything the DAG author templated in: they stay out of lineage events
    roles = [{k: v for k, v in summarize_role(role).items() if k != "args"} for role in app.roles]
    return {APP_FACET: app_facet(scheduler=scheduler, appName=app.name, roles=roles)}


def run_facets(
    app_handle: str,
    state: str,
    message: str = "",
    structured_error: str = "",
    sources: Sequence[str] = (),
    attempts: Sequence[Mapping[str, Any]] = (),
    cached_from: str = "",
) -> dict[str, Any]:
    """Run facets of one TorchX run: ``torchx_run`` and the standard ``externalQuery``."""
    from openlineage.client.facet_v2 import external_query_run

    run_facet = _facet_classes()[1]
    namespace = run_dataset_name(app_handle)
    return {
        RUN_FACET: run_facet(
            appHandle=app_handle,
            state=state,
            message=message,
            structuredError=structured_error,
            sources=sorted(sources),
            attempts=[dict(a) for a in attempts],
            cachedFrom=cached_from,
        ),
        "externalQuery": external_query_run.ExternalQueryRunFacet(
            externalQueryId=app_handle, source=namespace[0] if namespace else app_handle
        ),
    }


def usage_facets(usage: Mapping[str, Any] | None, cost: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run facet ``torchx_usage`` of a run's usage and cost; none without a usage."""
    if not isinstance(usage, Mapping) or not isinstance(usage.get("source"), str):
        return {}
    usage_facet = _facet_classes()[3]
    totals = usage.get("totals")
    return {
        USAGE_FACET: usage_facet(
            source=usage["source"],
            elapsedSeconds=usage.get("elapsed_s"),
            cpuTimeSeconds=usage.get("cpu_time_s"),
            totals=dict(totals) if isinstance(totals, Mapping) else None,
            usage=dict(usage),
            cost=dict(cost) if isinstance(cost, Mapping) else None,
        )
    }


# datasets


def consumed_artifacts(parent_artifacts: Mapping[str, Mapping[str, Any]], app: AppDef) -> list[str]:
    """Paths of the parents' artifacts that ``app``'s arguments or env values name (also inside
    ``a,b,c`` lists), the same test as the artifact names of tracker edges
    (``dag_lineage.artifact_labels``)."""
    from torchx_airflow.apps import app_words, names_path

    words = app_words(app)
    words += "\n" + strip_userinfo(words)  # recorded paths come without their user info
    paths = []
    for artifact in parent_artifacts.values():
        path = str(artifact.get("path") or "")
        if path and names_path(words, path):
            paths.append(path)
    return paths


def lineage_datasets(
    app_handle: str | None,
    parents: Sequence[str],
    consumed: Sequence[str] = (),
    produced: Sequence[str] = (),
    artifacts: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[list[Dataset], list[Dataset]]:
    """Inputs (the parents' runs, the artifacts consumed) and outputs (this run, its artifacts);
    ``artifacts`` (path -> artifact name and the run that recorded it) labels the artifacts'
    datasets with facet ``torchx_artifact``."""
    named = artifacts or {}
    inputs = [_dataset("input", *name) for name in map(run_dataset_name, parents) if name]
    inputs += [_dataset("input", *artifact_dataset_name(path), named.get(path)) for path in consumed]
    outputs = []
    own = run_dataset_name(app_handle) if app_handle else None
    if own:
        outputs.append(_dataset("output", *own))
    # an artifact the app records from its inputs (evaluate's best model) stays an input only
    outputs += [
        _dataset("output", *artifact_dataset_name(path), named.get(path))
        for path in produced
        if path not in consumed
    ]
    return _unique(inputs), _unique(outputs)


# what the operator's get_openlineage_facets_on_* return, from plain values the operator passes
#
# The provider calls those methods in a forked child of the task process by default, where a call to
# the Airflow API (a connection, an XCom) can hang on the parent's channel: the operator passes only
# what the task already holds (its built app, hook, first tracker store, result), and the functions
# here read nothing but those and the tracker store itself.


def lineage_on_start(app: AppDef | None, scheduler: str | None) -> OperatorLineage:
    """START: the app about to be submitted (its handle does not exist yet)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(job_facets=app_job_facets(app, scheduler) if app is not None else {})


def run_outcome(
    app_handle: str | None,
    result: Mapping[str, Any] | None,
    status: AppStatus | None,
    hook: Any,
    app: AppDef | None,
    store: ProviderStore | None,
) -> dict[str, Any]:
    """The run's summary and tracker results: the task's ``result`` if it has one, else the status
    (asked of ``hook`` when not yet terminal) and the tracker ``store``'s results of the run."""
    from torchx_airflow.apps import summarize_status
    from torchx_airflow.lineage.recorded import run_results

    if result is not None or not app_handle:
        return dict(result or {})
    # a failed app, or a resumed deferred wait whose result went straight to XCom
    try:
        if (status is None or not status.is_terminal()) and hook is not None:
            status = hook.status(app_handle)
    except Exception as e:
        log.warning("No final status of %s for OpenLineage: %s: %s", app_handle, type(e).__name__, e)
    outcome = summarize_status(app_handle, status, app) if status is not None else {"app_handle": app_handle}
    if store is not None:
        outcome.update(run_results(store, app_handle))
    return outcome


def lineage_parents(
    outcome: Mapping[str, Any], store: ProviderStore | None, task_instance: Any, task: Any
) -> list[str]:
    """The run's parents: the sources its tracker recorded, else asked of Airflow (the nearest
    tracked upstream runs, ``dag_lineage.parent_runs``) when the listener runs in the task's thread."""
    if store is not None:
        return list(outcome.get("sources") or [])
    from airflow.providers.openlineage import conf

    if not conf.execute_in_thread():
        return []  # untracked, and a forked child cannot ask Airflow for the upstream XComs
    from torchx_airflow.lineage.edges import parent_runs

    try:
        return parent_runs({"ti": task_instance, "task": task})
    except Exception as e:  # lineage never fails a task
        log.warning("No parents for OpenLineage of %s: %s: %s", task_instance.task_id, type(e).__name__, e)
        return []


def _consumed(
    parents: Sequence[str], store: ProviderStore | None, app: AppDef | None
) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """Paths of the parents' artifacts (in the task's first tracker) that the app's arguments or env
    values name, and each one's (artifact name, parent run)."""
    if not parents or store is None or app is None:
        return [], {}
    from torchx_airflow.lineage.recorded import run_results

    artifacts = {
        f"{parent}/{name}": {**artifact, "run": parent}
        for parent in parents
        for name, artifact in run_results(store, parent)["artifacts"].items()
    }
    paths = consumed_artifacts(artifacts, app)
    named = {
        str(a["path"]): (str(a["name"]), str(a["run"])) for a in artifacts.values() if a["path"] in paths
    }
    return paths, named


def lineage_on_end(
    app: AppDef | None,
    scheduler: str | None,
    outcome: Mapping[str, Any],
    parents: Sequence[str],
    store: ProviderStore | None,
    produced: bool,
) -> OperatorLineage:
    """COMPLETE (``produced``: the artifacts the run recorded are outputs) or FAIL: handle, state,
    sources; the parents' runs and the artifacts read in, the run itself out."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    app_handle = outcome.get("app_handle")
    artifacts = (outcome.get("artifacts") or {}).values() if produced else []
    consumed, named = _consumed(parents, store, app)
    own = {str(a["path"]): (str(a.get("name") or ""), str(app_handle)) for a in artifacts if a.get("path")}
    inputs, outputs = lineage_datasets(app_handle, parents, consumed, list(own), {**own, **named})
    facets = {}
    if app_handle:
        facets = run_facets(
            str(app_handle),
            str(outcome.get("state") or "UNKNOWN"),
            str(outcome.get("msg") or ""),
            str(outcome.get("structured_error_msg") or ""),
            outcome.get("sources") or [],
            outcome.get("attempts") or [],
            str(outcome.get("cached_from") or "") if outcome.get("cache_hit") else "",
        )
        facets.update(usage_facets(outcome.get("usage"), outcome.get("cost")))
    job_facets = app_job_facets(app, scheduler) if app is not None else {}
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=facets, job_facets=job_facets)


# the job's env


def parent_run_env(context: Context | None = None) -> dict[str, str]:
    """The OpenLineage parent run of the task, as the env the OpenLineage clients read.

    ``OPENLINEAGE_PARENT_ID`` and ``OPENLINEAGE_ROOT_PARENT_ID`` (``<namespace>/<job name>/<run id>``:
    the task's run and its DAG run's, the ids the provider's listener emits for them), which
    openlineage-python integrations such as ``dbt-ol`` read to nest their events under the task.
    Empty without the provider, when it is disabled, or outside a running task.
    """
    if not is_enabled():
        return {}
    if context is None:
        from airflow.sdk import get_current_context

        try:
            context = get_current_context()
        except Exception:  # not in a running task: a DAG file calling build_app, a unit test
            return {}
    from airflow.providers.openlineage.plugins import macros

    ti = context["ti"]
    try:
        return {PARENT_ENV: macros.lineage_parent_id(ti), ROOT_PARENT_ENV: macros.lineage_root_parent_id(ti)}
    except Exception as e:
        log.warning("No OpenLineage parent run for the job: %s: %s", type(e).__name__, e)
        return {}


def execution_lineage(
    app: AppDef,
    scheduler: str | None,
    hook: Any,
    store: ProviderStore | None,
    ran: tuple[str | None, Mapping[str, Any] | None, AppStatus | None, Mapping[str, Any]],
    task_instance: Any,
    task: Any,
    produced: bool,
) -> OperatorLineage:
    """A task execution's end as OpenLineage: ``ran`` is ``(app handle, result, last status, the
    fields policies added when the app ended)``; a failed app has no result, so its attempts and
    usage come from those fields."""
    handle, result, status, fields = ran
    outcome = run_outcome(handle, result, status, hook, app, store)
    for key, value in fields.items() if handle else ():
        outcome.setdefault(key, value)
    parents = lineage_parents(outcome, store, task_instance, task)
    return lineage_on_end(app, scheduler, outcome, parents, store, produced)
