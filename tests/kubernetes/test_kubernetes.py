"""TorchX's kubernetes scheduler through the provider, on the test cluster (tests/kubernetes/conftest.py):
a real API server, etcd, Volcano's CRDs and RBAC; Volcano's controller and the kubelet are the stand-in."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubernetes.conftest import CFG, K8S_CONN, STATE, k8s_conn, token
from tests.polling import wait_until
from torchx_airflow.apps import AppHandle
from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.schedulers import kubernetes as k8s_support

DAGS = Path(__file__).resolve().parent / "dags"
pytestmark = pytest.mark.usefixtures("k8s_cluster")


def _app(script: str, replicas: int = 1, name: str = "k8s-test"):
    from torchx.specs import AppDef, Resource, Role

    role = Role(
        name="worker",
        image="ghcr.io/pytorch/torchx:0.7.0",  # not pulled by the stand-in kubelet
        entrypoint="python3",
        args=["-c", script],
        num_replicas=replicas,
        resource=Resource(cpu=1, gpu=0, memMB=512),
    )
    return AppDef(name=name, roles=[role])


@pytest.fixture
def hook(monkeypatch) -> Iterator[TorchXHook]:
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_K8S", K8S_CONN)
    hook = TorchXHook("torchx_k8s")
    yield hook
    hook.close()


def _kubeconfig_for(tmp_path: Path, user: str) -> str:
    """A kubeconfig of the test cluster with ``user``'s token."""
    text = (STATE / "kubeconfig").read_text().replace(token("admin"), token(user))
    path = tmp_path / f"kubeconfig-{user}"
    path.write_text(text)
    return str(path)


def _jobs() -> list[dict]:
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(STATE / "kubeconfig")))
    return api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs")["items"]


def _submit(hook: TorchXHook, script: str, replicas: int = 1, token: str | None = None, **kwargs) -> str:
    return hook.schedule(hook.dryrun(_app(script, replicas), **kwargs), token=token)


def test_operator_runs_a_two_replica_app_with_every_replicas_output_in_the_task_log(run_dag, tmp_path):
    # the connection's token (the worker's) wins over the kubeconfig's user (one with no rights)
    secret = token("worker")
    env = {"AIRFLOW_CONN_TORCHX_K8S": k8s_conn(secret), "KUBECONFIG": _kubeconfig_for(tmp_path, "nobody")}
    result = run_dag("k8s_sync", env=env, dags_folder=DAGS)
    assert result.returncode == 0, result.output[-4000:]
    assert result.states == {"run": "success"}
    assert result.xcom("run", "app_handle").startswith("kubernetes://torchx/default:")
    for replica in (0, 1):  # each pod's own lines, read through the API server's pod-log proxy
        assert f"[counter/{replica}]" in result.output and "line 2/2" in result.output, result.output[-4000:]
    assert secret not in result.output
    assert secret not in result.stored_text()


def test_a_deferred_task_waits_in_airflow_dags_test_and_shows_both_replicas_output(run_dag):
    # the trigger once failed at its first answer here ('NoneType' object has no attribute 'cursor')
    result = run_dag(
        "k8s_deferred", conf={"seconds": 3}, env={"AIRFLOW_CONN_TORCHX_K8S": K8S_CONN}, dags_folder=DAGS
    )
    assert result.returncode == 0, result.output[-4000:]
    assert result.states == {"run": "success"}, result.output[-4000:]
    handle = result.xcom("run", "app_handle")
    assert f"Waiting for TorchX app {handle} in the triggerer" in result.output
    for replica in (0, 1):  # read through the scheduler when the task resumes, once each
        assert result.output.count(f"[counter/{replica}]") >= 3 and "line 3/3" in result.output


WAITS = 200


def _create_jobs(hook: TorchXHook, seconds: int, count: int) -> list[str]:
    """``count`` Volcano Jobs as the provider submits them (the dry run's object, labelled, under
    names of their own), created straight through the API: 200 submissions through TorchX would
    spend minutes on what the test is not about. Each pod runs ``sleep`` (200 Pythons would not fit)."""
    import copy

    from kubernetes import client, config

    app = _app("")
    app.roles[0].entrypoint, app.roles[0].args = "sleep", [str(seconds)]
    dryrun = hook.dryrun(app)
    hook.support("kubernetes").check_request(dryrun.info)  # the label and the checks
    api = client.CustomObjectsApi(config.new_client_from_config(str(STATE / "kubeconfig")))
    prefix = f"k8s-many-{uuid.uuid4().hex[:6]}"
    handles = []
    for i in range(count):
        job = copy.deepcopy(dryrun.info.request.resource)
        job["metadata"] = {**job["metadata"], "name": f"{prefix}-{i}"}
        job["metadata"].pop("generateName", None)
        api.create_namespaced_custom_object(k8s_support.GROUP, k8s_support.VERSION, "default", "jobs", job)
        handles.append(f"kubernetes://torchx/default:{prefix}-{i}")
    return handles


def test_200_deferred_waits_are_answered_by_one_list_call_per_interval(hook, monkeypatch):
    import asyncio

    from kubernetes.client import rest

    from torchx_airflow.triggers.torchx import TorchXAppTrigger

    handles = _create_jobs(hook, 30, WAITS)
    unknown = handles[0].rsplit(":", 1)[0] + ":no-such-job"
    requests: list[tuple[str, str]] = []  # every HTTP request of this process's Kubernetes clients
    real = rest.RESTClientObject.request

    def counted(self, method, url, *args, **kwargs):
        requests.append((method, url.split("?")[0].split("/", 3)[-1]))
        return real(self, method, url, *args, **kwargs)

    monkeypatch.setattr(rest.RESTClientObject, "request", counted)

    async def main() -> tuple[list[dict], list[tuple[str, str]]]:
        async def wait(handle: str) -> dict:
            async for event in TorchXAppTrigger(handle, "torchx_k8s", poll_interval=1).run():
                return event.payload
            raise AssertionError("no event")

        tasks = [asyncio.ensure_future(wait(h)) for h in [*handles, unknown]]
        await asyncio.sleep(3)  # every trigger subscribed: count three intervals from here
        requests.clear()
        await asyncio.sleep(3)
        steady = list(requests)
        return await asyncio.wait_for(asyncio.gather(*tasks), timeout=240), steady

    events, steady = asyncio.run(main())
    jobs_list = ("GET", "apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs")
    unknown_read = ("GET", "apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/no-such-job")
    # per poll: one list for the 200, and one read of the job no list has (it may be one submitted
    # otherwise); nothing else, never TorchX's describe of each app. A list of 200 jobs takes over
    # a second on a loaded machine: one to three polls in the three seconds, 200 waits or not
    assert set(steady) <= {jobs_list, unknown_read}, steady
    assert 1 <= steady.count(jobs_list) <= 4, steady
    assert steady.count(unknown_read) <= steady.count(jobs_list) + 1, steady
    assert [e["state"] for e in events[:-1]] == ["SUCCEEDED"] * WAITS
    assert events[-1]["status"] == "not_found"


def test_statuses_of_many_apps_come_from_one_list_call(hook, monkeypatch):
    handles = [
        _submit(hook, "print('ok')"),
        _submit(hook, "import sys; sys.exit(3)"),
        _submit(hook, "print(2)"),
    ]
    support = hook.support("kubernetes")
    calls: list[str] = []
    real = support._custom_objects

    def counting():
        api = real()
        for name in ("list_namespaced_custom_object", "get_namespaced_custom_object"):
            method = getattr(api, name)
            setattr(api, name, lambda *a, _m=method, _n=name, **k: calls.append(_n) or _m(*a, **k))
        return api

    monkeypatch.setattr(support, "_custom_objects", counting)

    def ended():
        calls.clear()
        answer = hook.statuses(handles)
        return answer if all(s is not None and s.is_terminal() for s in answer.values()) else None

    answer = wait_until(ended, "three apps ended", timeout=60)
    assert calls == ["list_namespaced_custom_object"]
    assert [answer[h].state.name for h in handles] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    assert answer[handles[1]].msg.startswith("Failed (PodFailed")
    unknown = handles[0].rsplit(":", 1)[0] + ":no-such-job"
    assert hook.statuses([unknown]) == {unknown: None}


def test_cancel_ends_the_pods_process(hook):
    marker = f"k8s-cancel-{uuid.uuid4().hex[:8]}"
    handle = _submit(hook, f"import time; print('{marker}', flush=True); time.sleep(300)")
    wait_until(lambda: hook.status(handle).state.name == "RUNNING", "the app runs", timeout=60)
    pids = wait_until(lambda: _pids_with(marker), "the pod's process", timeout=30)
    hook.cancel(handle)
    wait_until(lambda: not any(_alive(pid) for pid in pids), "the pod's process ended", timeout=30)
    # aborted, not deleted (TorchX 0.7's own cancel): the job is still there, and CANCELLED
    status = hook.status(handle)
    assert status is not None and status.state.name == "CANCELLED", status
    assert status.msg == f"Aborted (Aborted: {k8s_support.ABORT_MESSAGE})"


def _pids_with(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class _Store(dict):
    """The task's state store, as the durable submission uses it (get, set, delete)."""

    def set(self, key, value):
        self[key] = value

    def delete(self, key):
        self.pop(key, None)


def test_a_retry_finds_the_job_a_try_submitted_before_it_died(hook, monkeypatch):
    from torchx_airflow.run.durable import DurableSubmission
    from torchx_airflow.run.state import SUBMISSION_KEY

    store = _Store()
    first = DurableSubmission(hook, store, "app_handle", "run")

    def die(app_handle):
        raise SystemExit("the worker died before recording the handle")

    monkeypatch.setattr(first, "persist", die)
    with pytest.raises(SystemExit):
        first.submit(hook.dryrun(_app("print('once')")))
    assert "app_handle" not in store and SUBMISSION_KEY in store  # only the mark is left
    retry_hook = TorchXHook("torchx_k8s")  # the next try: a new process, a new hook
    try:
        DurableSubmission(retry_hook, store, "app_handle", "run").recover()
        handle = store["app_handle"]
        assert handle.startswith("kubernetes://torchx/default:k8s-test-")
        assert [j["metadata"]["name"] for j in _jobs() if j["metadata"]["name"] == handle.rsplit(":", 1)[1]]
        assert SUBMISSION_KEY not in store
        # a mark of a try that died before its job reached the API server: nothing found, submit
        store.set(SUBMISSION_KEY, {"token": uuid.uuid4().hex, "scheduler": "kubernetes", "since": 0})
        del store["app_handle"]
        DurableSubmission(retry_hook, store, "app_handle", "run").recover()
        assert "app_handle" not in store
    finally:
        retry_hook.close()


@pytest.mark.parametrize("fault", ["PodEvicted", "NodeLost"])
def test_eviction_and_node_loss_end_the_job_for_the_infrastructure(hook, fault):
    from kubernetes import client, config

    handle = _submit(hook, "import time; time.sleep(300)", resubmits=True)
    wait_until(lambda: hook.status(handle).state.name == "RUNNING", "the app runs", timeout=60)
    namespace, name = AppHandle.parse(handle).app_id.split(":")
    core = client.CoreV1Api(config.new_client_from_config(str(STATE / "kubeconfig")))
    if fault == "PodEvicted":  # through the API's eviction subresource, as a drain does
        pod = f"{name}-worker-0-0"
        eviction = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": pod}}
        core.api_client.call_api(
            f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "POST", body=eviction,
            auth_settings=["BearerToken"], response_type="object",
        )  # fmt: skip
    else:  # the stand-in loses its node on request
        core.patch_node(
            "standin-node", {"metadata": {"annotations": {"standin.torchx-airflow/lost": "true"}}}
        )
    status = wait_until(
        lambda: (s := hook.status(handle)) is not None and s.is_terminal() and s, "the job ended", timeout=60
    )
    assert status.msg.startswith(f"Terminated ({fault}"), status.msg  # leave_resubmission_to_task's policy
    assert hook.infrastructure_reason(handle, status.state.name, status.msg) == fault


def test_missing_queue_is_refused_before_anything_is_created(hook):
    before = len(_jobs())
    with pytest.raises(TorchXConfigError, match=r"Volcano queue 'nope' does not exist.*kubectl get queues"):
        _submit(hook, "print(1)", cfg={"namespace": "default", "queue": "nope"})
    assert len(_jobs()) == before


def test_missing_volcano_crd_is_named(hook, monkeypatch):
    monkeypatch.setattr(k8s_support, "GROUP", "batch.not-volcano.example")
    with pytest.raises(TorchXConfigError, match=r"does not serve .*Install Volcano"):
        _submit(hook, "print(1)")


@pytest.mark.parametrize(
    ("user", "refused"),
    [
        ("nobody", r"RBAC forbids .*create batch.volcano.sh/jobs \(submit\).*get pods/log"),
        ("worker", None),
    ],
)
def test_rbac_is_checked_before_submitting(hook, monkeypatch, tmp_path, user, refused):
    monkeypatch.setenv("KUBECONFIG", _kubeconfig_for(tmp_path, user))
    before = len(_jobs())
    if refused:
        with pytest.raises(TorchXConfigError, match=refused):
            _submit(hook, "print(1)")
        assert len(_jobs()) == before
    else:  # the Role of scripts/k8s/rbac.yaml is enough for a whole run
        handle = _submit(hook, "print('as worker')")
        status = wait_until(
            lambda: (s := hook.status(handle)) is not None and s.is_terminal() and s, "ended", timeout=60
        )
        assert status.state.name == "SUCCEEDED"
        assert "as worker" in "".join(hook.log_lines(handle, "worker", 0, should_tail=False))
    assert os.environ["KUBECONFIG"].endswith(f"kubeconfig-{user}")


@pytest.mark.parametrize(
    ("conn_token", "kubeconfig_user", "allowed"),
    [("worker", "nobody", True), ("nobody", "admin", False), (None, "nobody", False)],
)
def test_the_connections_token_is_the_identity(monkeypatch, tmp_path, conn_token, kubeconfig_user, allowed):
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_K8S", k8s_conn(conn_token and token(conn_token)))
    monkeypatch.setenv("KUBECONFIG", _kubeconfig_for(tmp_path, kubeconfig_user))
    hook = TorchXHook("torchx_k8s")
    try:
        if allowed:
            assert AppHandle.parse(_submit(hook, "print(1)")).scheduler == "kubernetes"
        else:
            with pytest.raises(TorchXConfigError, match="RBAC forbids") as refused:
                _submit(hook, "print(1)")
            assert token("nobody") not in str(refused.value)
    finally:
        hook.close()


def test_the_job_knows_itself_by_the_app_handle_the_task_records(hook):
    # TorchX gives the job kubernetes://torchx/<name>, the handle is .../<namespace>:<name>: what the
    # job records through AppRun (checkpoints, artifacts) must land under the task's run
    handle = _submit(hook, "import os; print('job id', os.environ['TORCHX_JOB_ID'], flush=True)")
    wait_until(lambda: (s := hook.status(handle)) is not None and s.is_terminal(), "ended", timeout=60)
    assert f"job id {handle}" in "".join(hook.log_lines(handle, "worker", 0, should_tail=False))


def test_the_connections_kubeconfig_field_wins_over_kubeconfig_in_the_environment(monkeypatch, tmp_path):
    conn = {"conn_type": "torchx", "extra": {"scheduler": "kubernetes", **CFG}}
    monkeypatch.setenv("KUBECONFIG", _kubeconfig_for(tmp_path, "nobody"))  # no rights
    for kubeconfig, allowed in ((_kubeconfig_for(tmp_path, "worker"), True), (str(tmp_path / "none"), False)):
        conn["extra"]["kubeconfig"] = kubeconfig
        monkeypatch.setenv("AIRFLOW_CONN_TORCHX_K8S", json.dumps(conn))
        hook = TorchXHook("torchx_k8s")
        try:
            if allowed:  # namespace and queue came from their own fields, not cfg
                assert _submit(hook, "print(1)").startswith("kubernetes://torchx/default:")
            else:
                with pytest.raises(TorchXConfigError, match=r"kubeconfig '.*none' does not exist"):
                    _submit(hook, "print(1)")
        finally:
            hook.close()


@pytest.mark.parametrize("validate", [True, False])
def test_a_dry_run_validates_the_job_on_the_api_server_only_when_asked(hook, validate):
    """TorchX main's ``validate_spec`` (on by default) sends the job to the API server with
    ``dryRun=All``, which refuses a task name over 63 characters; off, the dry run stays offline.
    TorchX 0.7 has no such option: the provider refuses it, naming the valid ones."""
    import torchx

    app = _app("print(1)")
    app.roles[0].name = "r" * 70
    cfg = {**CFG, "validate_spec": validate}
    if torchx.__version__.startswith("0.7"):
        with pytest.raises(TorchXConfigError, match=r"Unknown run option\(s\) \['validate_spec'\]"):
            hook.dryrun(app, cfg=cfg)
    elif validate:
        with pytest.raises(Exception, match="Invalid job spec: Unprocessable Entity"):
            hook.dryrun(app, cfg=cfg)
    else:
        assert hook.dryrun(app, cfg=cfg).info.request is not None
