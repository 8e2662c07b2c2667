"""Kubernetes (TorchX's ``kubernetes`` scheduler: Volcano Jobs): every app's status of a namespace
from one list call, the submission mark and the checks before submitting, infrastructure ends.

TorchX submits each app as a Volcano Job (``batch.volcano.sh/v1alpha1``, one task per replica) and
asks for one app at a time (``describe`` reads the job's status subresource). Here:

- ``check_request`` labels the job ``torchx-airflow/managed=true`` and checks, before anything is
  created, that the Volcano Job CRD is served, that the cfg's queue exists, and that RBAC lets this
  identity do what the provider will do (create, read, list, delete jobs; read pod logs): an error
  names the fix instead of a job left half-submitted or a wait that can never read its status;
- ``statuses`` lists the labelled jobs of each namespace once (``label_selector``) for all apps
  of that namespace; a job without the label (submitted otherwise) is read alone;
- ``cancel`` aborts the job (status phase ``Aborted``) on every TorchX version: TorchX 0.7's own
  cancel deletes it, which would leave its state unknown;
- ``stamp`` adds the label ``torchx-airflow/submission=<token>`` that ``find_submission`` lists by;
- a job that Volcano ended because a pod was evicted, preempted or lost with its node
  (``status.state.reason``) ended for the infrastructure's reasons: the task resubmits it
  (``torchx_airflow.policies.resubmission``), and ``leave_resubmission_to_task`` makes Volcano end such a job
  (``PodEvicted`` -> ``TerminateJob``) instead of restarting it from scratch itself.

Usage is not accounted by Kubernetes here: the task counts the requested resources x elapsed,
marked ``source: "requested"`` (``torchx_airflow.policies.cost.usage``).

App ids are TorchX's ``<namespace>:<job name>``. The ``kubernetes`` client package is imported
inside the functions that use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.schedulers.base import IN_CLUSTER, SchedulerCredentials, SchedulerSupport

if TYPE_CHECKING:
    import threading

    from kubernetes.client import ApiClient
    from torchx.specs import AppDryRunInfo, AppStatus

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.volcano.sh", "v1beta1", "queues"
#: The label every job the provider submits carries: what the one list call per namespace selects.
MANAGED_LABEL = "torchx-airflow/managed"
#: A pod's name is its hostname under Volcano: a DNS label
MAX_POD_NAME = 63
#: The label that carries a submission's mark (``stamp``), found again by ``find_submission``.
SUBMISSION_LABEL = "torchx-airflow/submission"
LIST_TIMEOUT_SECONDS = 30
ABORT_MESSAGE = "cancelled through torchx-airflow"

# Volcano's job phases -> TorchX AppState names (as TorchX's own JOB_STATE, with "Failed" an app state)
JOB_PHASES: dict[str, str] = {
    "Pending": "PENDING",
    "Inqueue": "PENDING",
    "Aborting": "RUNNING",
    "Aborted": "CANCELLED",
    "Running": "RUNNING",
    "Restarting": "RUNNING",
    "Completing": "RUNNING",
    "Completed": "SUCCEEDED",
    "Terminating": "RUNNING",
    "Terminated": "FAILED",
    "Failed": "FAILED",
}
# Volcano's task (pod) phases -> TorchX ReplicaState names
TASK_PHASES: dict[str, str] = {
    "Pending": "PENDING",
    "Allocated": "PENDING",
    "Pipelined": "PENDING",
    "Binding": "PENDING",
    "Bound": "PENDING",
    "Running": "RUNNING",
    "Releasing": "RUNNING",
    "Succeeded": "SUCCEEDED",
    "Failed": "FAILED",
    "Unknown": "UNKNOWN",
}
#: ``status.state.reason`` of a job Volcano ended because the cluster took a pod away.
INFRASTRUCTURE_REASONS = ("PodEvicted", "Evicted", "Preempted", "NodeLost")

#: What the provider does with a namespace's Volcano Jobs and pods, as RBAC checks it:
#: (verb, group, resource, subresource, what for).
REQUIRED_ACCESS: tuple[tuple[str, str, str, str, str], ...] = (
    ("create", GROUP, PLURAL, "", "submit"),
    ("list", GROUP, PLURAL, "", "wait (one list call per namespace)"),
    ("get", GROUP, PLURAL, "status", "read an app's status"),
    ("patch", GROUP, PLURAL, "status", "cancel (abort)"),
    ("get", "", "pods", "log", "read the replicas' logs"),
)
RBAC_FIX = (
    "Grant it a Role in that namespace with: apiGroups [batch.volcano.sh] resources [jobs] verbs "
    "[create, get, list, watch, delete, patch]; resources [jobs/status] verbs [get, patch, update]; "
    'apiGroups [""] resources [pods, pods/log] verbs [get, list] (docs/schedulers/kubernetes.md, "RBAC").'
)


def split_app_id(app_id: str) -> tuple[str, str] | None:
    """``("ns", "name")`` of TorchX's ``ns:name``; None for anything else."""
    namespace, sep, name = app_id.partition(":")
    return (namespace, name) if sep and namespace and name and ":" not in name else None


def new_api_client(credentials: SchedulerCredentials | None = None) -> ApiClient:
    """A Kubernetes client from the connection's ``kubeconfig`` (a path, or ``in-cluster``: the
    service account of the pod this runs in), else from ``KUBECONFIG`` (as set now; ``~/.kube/config``
    without it), else from the pod's service account; a connection's ``host`` replaces the API
    server's address and its ``token`` the kubeconfig's user credentials."""
    import os

    from kubernetes import client, config

    credentials = credentials or SchedulerCredentials()
    configuration = client.Configuration()
    in_cluster = credentials.kubeconfig == IN_CLUSTER
    path = os.path.expanduser(
        credentials.kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    )
    has_kubeconfig = not in_cluster and any(os.path.exists(p) for p in path.split(os.pathsep))
    if credentials.kubeconfig and not in_cluster and not has_kubeconfig:
        raise TorchXConfigError(
            f"The torchx connection's kubeconfig {credentials.kubeconfig!r} does not exist. Set extra "
            "'kubeconfig' to a kubeconfig file the worker and triggerer can read, or to 'in-cluster'."
        )
    if in_cluster or (not has_kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST")):
        config.load_incluster_config(client_configuration=configuration)
    elif has_kubeconfig or not (credentials.host and credentials.token):
        config.load_kube_config(config_file=path, client_configuration=configuration)
    if credentials.host:
        configuration.host = credentials.host
    if credentials.token and not str(configuration.host or "").lower().startswith("https://"):
        raise TorchXConfigError(
            f"The torchx connection holds a bearer token for the Kubernetes API server at "
            f"{configuration.host!r}, which is not an https:// address: the token would travel in clear "
            "text, readable by anyone on the way. Give the connection's host as https://..., or leave its "
            "password empty to use the kubeconfig's credentials."
        )
    if credentials.token:  # the connection's identity, not the kubeconfig user's certificate or token
        configuration.api_key = {"authorization": f"Bearer {credentials.token}"}
        configuration.api_key_prefix = {}
        configuration.cert_file = configuration.key_file = None
        configuration.refresh_api_key_hook = None  # the kubeconfig loader's would put its token back
    return client.ApiClient(configuration)


def job_status(job: Mapping[str, Any]) -> AppStatus:
    """The ``AppStatus`` of a Volcano Job object; ``msg`` is its phase, with its reason and message.

    >>> job_status({"status": {"state": {"phase": "Failed", "reason": "PodEvicted"}}}).msg
    'Failed (PodEvicted)'
    """
    from torchx.specs import AppState, AppStatus, ReplicaStatus, RoleStatus

    status = job.get("status") or {}
    state = status.get("state") or {}
    phase = str(state.get("phase") or "")
    roles: dict[str, RoleStatus] = {}
    for task, counts in sorted((status.get("taskStatusCount") or {}).items()):
        role, _, replica = task.rpartition("-")
        phases = (counts or {}).get("phase") or {}
        if not (role and replica.isdigit() and phases):
            continue
        replica_state = TASK_PHASES.get(next(iter(phases)), "UNKNOWN")
        roles.setdefault(role, RoleStatus(role, []))
        roles[role].replicas.append(
            ReplicaStatus(id=int(replica), role=role, state=AppState[replica_state], hostname="")
        )
    detail = ": ".join(str(state[k]) for k in ("reason", "message") if state.get(k))
    msg = f"{phase} ({detail})" if detail else phase
    return AppStatus(AppState[JOB_PHASES.get(phase, "UNKNOWN")], msg=msg, roles=list(roles.values()))


def job_reason(msg: str) -> str:
    """The Volcano reason in a ``job_status`` message: ``PodEvicted`` of ``Failed (PodEvicted: ...)``."""
    _, _, detail = msg.partition(" (")
    return detail.rstrip(")").split(":", 1)[0].strip()


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a dict, ``obj.name`` of a Kubernetes client model; None for None."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


class KubernetesSupport(SchedulerSupport):
    """TorchX's ``kubernetes`` scheduler (Volcano Jobs) through the Kubernetes API."""

    finds_submissions = True

    def api_client(self) -> ApiClient:
        """The client of TorchX's scheduler, which this support's own calls share.

        Made here on first use (``new_api_client``) from the kubeconfig ``KUBECONFIG`` names at that
        moment, else the pod's service account, with the connection's host and token over them:
        TorchX's own would read ``KUBECONFIG`` as it was when ``kubernetes`` was imported, and no
        connection.
        """
        scheduler = self.runner._scheduler(self.name)
        if getattr(scheduler, "_client", None) is None:
            scheduler._client = new_api_client(self.credentials)  # type: ignore[attr-defined]
        return scheduler._api_client()  # type: ignore[attr-defined]

    def _custom_objects(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client())

    def _namespace(self, dryrun_info: AppDryRunInfo | None = None) -> str:
        cfg = (getattr(dryrun_info, "_cfg", None) if dryrun_info is not None else None) or self.cfg
        return str(cfg.get("namespace") or "default")

    # --- submitting -------------------------------------------------------------------------------
    def check_dryrun(self, dryrun_info: AppDryRunInfo) -> None:
        """Names the cluster refuses: Volcano names each pod ``<job>-<task>-<index>`` and makes it the
        pod's hostname, a DNS label of at most 63 characters (and the job's name a Service's)."""
        resource = dryrun_info.request.resource
        job = str(resource["metadata"]["name"])
        longest = max(
            (f"{job}-{task.get('name')}-0" for task in resource["spec"].get("tasks") or []),
            key=len,
            default=job,
        )
        if len(longest) > MAX_POD_NAME:
            raise TorchXConfigError(
                f"Kubernetes would refuse the pods of this app: {longest!r} is {len(longest)} characters, "
                f"and a pod's name (Volcano's <job>-<role>-<replica>-<index>, the pod's hostname) may have "
                f"{MAX_POD_NAME} at most. Give the task a shorter app_name (the job's name is the app's name "
                "and a random suffix), or its roles shorter names."
            )

    def check_request(self, dryrun_info: AppDryRunInfo) -> None:
        """Label the job for the list calls, then check CRD, queue and RBAC (``TorchXConfigError``)."""
        resource = dryrun_info.request.resource
        resource.setdefault("metadata", {}).setdefault("labels", {})[MANAGED_LABEL] = "true"
        namespace = self._namespace(dryrun_info)
        self._job_id_with_namespace(resource, namespace)
        self.check_crd()
        self.check_access(namespace)
        self.check_queue(str(resource["spec"].get("queue") or ""))

    def _job_id_with_namespace(self, resource: dict[str, Any], namespace: str) -> None:
        """The job's ``TORCHX_JOB_ID`` made the app handle TorchX returns (``.../<namespace>:<name>``):
        TorchX writes ``.../<name>``, so whatever the job records through ``AppRun`` (artifacts,
        checkpoints, metrics) would land under another run than the task's lineage."""
        name = resource["metadata"]["name"]
        job_only, handle = self.handle(name), self.handle(f"{namespace}:{name}")
        for task in resource["spec"].get("tasks") or []:
            spec = _field(task.get("template"), "spec")  # TorchX's V1Pod, or its dict once serialized
            for container in _field(spec, "containers") or []:
                for var in _field(container, "env") or []:
                    if _field(var, "name") == "TORCHX_JOB_ID" and _field(var, "value") == job_only:
                        if isinstance(var, dict):
                            var["value"] = handle
                        else:
                            var.value = handle

    def check_crd(self) -> None:
        """Raise when the API server does not serve Volcano's Job resource."""
        from kubernetes.client.rest import ApiException

        try:
            served = [r.name for r in self._custom_objects().get_api_resources(GROUP, VERSION).resources]
        except ApiException as e:
            if e.status != 404:
                raise
            served = []
        if PLURAL not in served:
            raise TorchXConfigError(
                f"The Kubernetes cluster does not serve {GROUP}/{VERSION} {PLURAL} (Volcano's Job CRD): "
                "TorchX's kubernetes scheduler submits Volcano Jobs. Install Volcano on the cluster "
                "(https://volcano.sh/en/docs/installation/) and submit again."
            )

    def check_access(self, namespace: str) -> None:
        """Raise naming every verb RBAC forbids this identity in ``namespace``."""
        from kubernetes import client

        api = client.AuthorizationV1Api(self.api_client())
        missing = []
        for verb, group, resource, subresource, purpose in REQUIRED_ACCESS:
            review = client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace,
                        verb=verb,
                        group=group,
                        resource=resource,
                        subresource=subresource,
                    )
                )
            )
            if not api.create_self_subject_access_review(review).status.allowed:
                shown = f"{resource}/{subresource}" if subresource else resource
                missing.append(f"{verb} {group + '/' if group else ''}{shown} ({purpose})")
        if missing:
            raise TorchXConfigError(
                f"RBAC forbids this identity in Kubernetes namespace {namespace!r}: {'; '.join(missing)}. "
                f"Nothing was submitted. {RBAC_FIX}"
            )

    def check_queue(self, queue: str) -> None:
        """Raise when the Volcano queue ``queue`` does not exist (a job there would stay pending);
        where this identity may not read queues, say so in the log and go on."""
        from kubernetes.client.rest import ApiException

        try:
            self._custom_objects().get_cluster_custom_object(QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, queue)
        except ApiException as e:
            if e.status == 404:
                raise TorchXConfigError(
                    f"Volcano queue {queue!r} does not exist: its jobs would stay pending. Set cfg 'queue' "
                    "to an existing queue (`kubectl get queues`), or create it: `kubectl apply -f -` with "
                    f"apiVersion: scheduling.volcano.sh/v1beta1, kind: Queue, metadata: {{name: {queue}}}."
                ) from None
            if e.status != 403:
                raise
            log.warning(
                "Cannot check Volcano queue %r (RBAC forbids reading queues); submitting anyway", queue
            )

    def stamp(self, dryrun_info: AppDryRunInfo, token: str) -> None:
        """Label the job with the submission's mark."""
        resource = dryrun_info.request.resource
        resource.setdefault("metadata", {}).setdefault("labels", {})[SUBMISSION_LABEL] = token

    def find_submission(self, token: str, since: float) -> str | None:
        """The job labelled with ``token`` in the cfg's namespace; raises when it cannot be listed."""
        namespace = self._namespace()
        jobs = self._custom_objects().list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=f"{SUBMISSION_LABEL}={token}",
            timeout_seconds=LIST_TIMEOUT_SECONDS,
        )
        for job in jobs.get("items", []):
            return f"{namespace}:{job['metadata']['name']}"
        return None

    def leave_resubmission_to_task(self, dryrun_info: AppDryRunInfo) -> None:
        """An evicted pod ends the job (``TerminateJob``) instead of Volcano's default ``RestartJob``,
        which would start every replica over without knowing its checkpoint."""
        spec = dryrun_info.request.resource["spec"]
        if int(spec.get("maxRetry") or 0) > 0:
            log.warning(
                "The app has max_retries=%s: Volcano restarts its job itself after an eviction (from "
                "scratch) and the task resubmits nothing",
                spec["maxRetry"],
            )
            return
        policies = [p for p in spec.get("policies") or [] if p.get("event") != "PodEvicted"]
        spec["policies"] = [{"event": "PodEvicted", "action": "TerminateJob"}, *policies]

    # --- cancelling -------------------------------------------------------------------------------
    def cancel(self, app_id: str) -> None:
        """Abort the job: its status phase ``Aborted``, through the status subresource, as TorchX main
        does. TorchX 0.7 deletes the job instead, after which nothing can tell a cancelled app from
        one that never existed (its status is unknown, its pods' logs gone): aborting keeps both, so
        a cancelled app reads ``CANCELLED`` whichever TorchX runs."""
        parsed = split_app_id(app_id)
        if parsed is None:
            raise ValueError(f"Not a Kubernetes app id (namespace:name): {app_id!r}")
        namespace, name = parsed
        body = {"status": {"state": {"phase": "Aborted", "reason": "Aborted", "message": ABORT_MESSAGE}}}
        self._custom_objects().patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, body
        )

    # --- logs -------------------------------------------------------------------------------------
    def log_lines(
        self,
        app_handle: str,
        role: str,
        k: int,
        should_tail: bool,
        until: threading.Event | None,
        poll: float,
    ) -> Iterable[str]:
        """TorchX's reader of the replica's pod log, once the pod runs: until Volcano made the pod and
        it started, the API server answers 404 (or an empty log), and TorchX's follower would end."""
        from torchx.specs.api import parse_app_handle

        app_id = parse_app_handle(app_handle).app_id
        parsed = split_app_id(app_id)
        if parsed is not None and should_tail:
            self._wait_for_pod(app_id, parsed, role, k, until, poll)
        return self.runner.log_lines(app_handle, role, k=k, should_tail=should_tail)

    def _wait_for_pod(
        self,
        app_id: str,
        parsed: tuple[str, str],
        role: str,
        k: int,
        until: threading.Event | None,
        poll: float,
    ) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        from torchx.schedulers.kubernetes_scheduler import normalize_str

        namespace, name = parsed
        pod_name = normalize_str(f"{name}-{role}-{k}-0")
        core = client.CoreV1Api(self.api_client())
        while True:
            try:
                if core.read_namespaced_pod(pod_name, namespace).status.phase != "Pending":
                    return
            except ApiException as e:
                if e.status != 404:
                    raise
            if until is not None:
                if until.wait(poll):
                    return
            else:
                status = self.status(app_id)
                if status is None or status.is_terminal():
                    return
                time.sleep(poll)

    # --- waiting ----------------------------------------------------------------------------------
    def statuses(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """One list call per namespace (jobs labelled ``MANAGED_LABEL``); a job not in it is read alone.

        A namespace whose list fails is left unanswered; only when every one fails does this raise.
        """
        ids = list(dict.fromkeys(app_ids))
        answer: dict[str, AppStatus | None] = {}
        by_namespace: dict[str, list[str]] = {}
        for app_id in ids:
            parsed = split_app_id(app_id)
            if parsed is None:
                answer[app_id] = None
            else:
                by_namespace.setdefault(parsed[0], []).append(app_id)
        first_error: Exception | None = None
        for namespace, namespace_ids in by_namespace.items():
            try:
                answer.update(self._namespace_statuses(namespace, namespace_ids))
            except Exception as e:  # one namespace's 403 must not fail the others' waits
                first_error = first_error or e
        if first_error is not None and len(answer) == sum(1 for i in ids if split_app_id(i) is None):
            raise first_error
        return answer

    def _namespace_statuses(self, namespace: str, app_ids: list[str]) -> dict[str, AppStatus | None]:
        from kubernetes.client.rest import ApiException

        api = self._custom_objects()
        listed = api.list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=f"{MANAGED_LABEL}=true",
            timeout_seconds=LIST_TIMEOUT_SECONDS,
        )
        jobs = {job["metadata"]["name"]: job for job in listed.get("items", [])}
        answer: dict[str, AppStatus | None] = {}
        for app_id in app_ids:
            name = app_id.partition(":")[2]
            job = jobs.get(name)
            if job is None:  # not submitted through the provider (no label), or gone
                try:
                    job = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                except ApiException as e:
                    if e.status != 404:
                        raise
            answer[app_id] = None if job is None else job_status(job)
        return answer

    def infrastructure_reason(self, state: str, msg: str) -> str | None:
        """``PodEvicted``, ``Preempted``, ``NodeLost``...: the reason Volcano ended the job with, when
        it is the cluster's."""
        if state not in ("FAILED", "CANCELLED"):
            return None
        reason = job_reason(msg)
        return reason if reason in INFRASTRUCTURE_REASONS else None
