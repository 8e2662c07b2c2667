"""A stand-in for Volcano's job controller and scheduler and for the kubelet, on one node of this host.

It is what the test cluster (``scripts/k8s/cluster.sh``) has instead of Volcano and a kubelet: the API
server, etcd, the CRDs, token authentication and RBAC around it are the real ones. Standard library
only, so it runs under any Python 3 beside the API server.

What it does, polling the API server every ``--interval`` seconds:

- turns each Volcano Job (``batch.volcano.sh/v1alpha1``) into pods ``<job>-<task>-<i>`` bound to
  the node ``standin-node``, and runs each pod's first container's ``command`` + ``args`` as a local
  process (the image is not pulled: the "image" is this host's environment, PATH and PYTHONPATH
  included), with the container's ``env`` and ``workingDir``;
- writes pod status (Pending -> Running -> Succeeded/Failed, with the container's exit code) and the
  job's status subresource as Volcano does (``state.phase`` Pending -> Running -> Completed / Failed /
  Aborted / Terminated, ``taskStatusCount``, ``running``/``succeeded``/``failed``);
- honours an abort (a job whose status phase someone set to ``Aborting``/``Aborted``, as TorchX
  main's cancel does) and a deleted job (TorchX 0.7's cancel): its processes are killed, its pods go;
- a pod deleted while its job runs (an eviction through ``pods/<name>/eviction``, a person's delete)
  is a ``PodEvicted`` event as for Volcano: the job's policy for it decides (``TerminateJob`` ->
  Terminated, ``AbortJob`` -> Aborted, ``RestartJob`` -> its pods again while ``maxRetry`` allows,
  else Failed); the job's ``state.reason`` is ``PodEvicted``;
- a node loss on request: ``kubectl annotate node standin-node standin.torchx-airflow/lost=true``
  ends every running pod as evicted with the reason ``NodeLost`` (the annotation is then removed);
- serves ``/containerLogs/<ns>/<pod>/<container>`` over HTTPS on ``--kubelet-port``: the endpoint the
  API server's pod-log proxy (``read_namespaced_pod_log``, ``kubectl logs``) reads;
- with ``K8S_OWNER_PID`` set, stops the API server and etcd of ``--state`` and itself once that process
  is gone. Every process it starts dies with it (``PR_SET_PDEATHSIG``).

Not modelled: gang scheduling, queues' capacity and state (a job to a missing queue stays Pending
with the reason ``QueueNotFound``), resources (every pod is placed), images, networking.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

NODE = "standin-node"
JOBS = "/apis/batch.volcano.sh/v1alpha1"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
JOB_LABEL = "volcano.sh/job-name"
TASK_LABEL = "volcano.sh/task-spec"
LOST_ANNOTATION = "standin.torchx-airflow/lost"
TERMINAL_PHASES = ("Completed", "Failed", "Aborted", "Terminated")
# the host variables a pod's process gets besides its container's env (its "image")
HOST_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
KILL_GRACE_SECONDS = 5.0


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_nano() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Api:
    """The few REST calls this needs, with the admin token."""

    def __init__(self, server: str, token: str, ca_file: str) -> None:
        self.server = server
        self.token = token
        self.ssl = ssl.create_default_context(cafile=ca_file)

    def call(self, method: str, path: str, body: Any = None, patch: bool = False) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/merge-patch+json" if patch else "application/json"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, context=self.ssl, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read() or b"{}")
            except ValueError:
                return e.code, {}


def _die_with_parent() -> None:
    os.setsid()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class PodProcess:
    """One pod's process and what became of it."""

    popen: subprocess.Popen[bytes]
    log_path: Path
    started: str
    exit_code: int | None = None
    finished: str = ""
    reason: str = ""  # why it was ended from outside: Aborted, PodEvicted, NodeLost
    kill_sent: float = 0.0
    reader: threading.Thread | None = None


@dataclass
class JobBook:
    """What the stand-in keeps of one job between polls."""

    uid: str
    retries: int = 0
    ended_reason: str = ""
    ended_message: str = ""
    ended_phase: str = ""
    last_status: dict[str, Any] = field(default_factory=dict)


class StandIn:
    """The controller loop and the kubelet's log endpoint."""

    def __init__(self, api: Api, state: Path, kubelet_port: int) -> None:
        self.api = api
        self.state = state
        self.kubelet_port = kubelet_port
        self.procs: dict[tuple[str, str], PodProcess] = {}
        self.jobs: dict[tuple[str, str], JobBook] = {}
        self.pod_status_written: dict[tuple[str, str], dict[str, Any]] = {}
        self.stopping = False

    # --- node -------------------------------------------------------------------------------------
    def register_node(self) -> None:
        self.api.call(
            "POST", "/api/v1/nodes", {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
        )
        cpus = str(os.cpu_count() or 1)
        status = {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": NODE},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "StandInReady",
                    "message": "the stand-in kubelet runs pods as local processes",
                    "lastHeartbeatTime": now(),
                    "lastTransitionTime": now(),
                }
            ],
            "capacity": {"cpu": cpus, "memory": "16Gi", "pods": "500"},
            "allocatable": {"cpu": cpus, "memory": "16Gi", "pods": "500"},
            "nodeInfo": {"kubeletVersion": "standin", "operatingSystem": "linux", "architecture": "amd64"},
        }
        code, body = self.api.call("PATCH", f"/api/v1/nodes/{NODE}/status", {"status": status}, patch=True)
        if code >= 300:
            raise RuntimeError(f"could not write the node's status: {code} {body}")

    def node_lost(self) -> bool:
        code, node = self.api.call("GET", f"/api/v1/nodes/{NODE}")
        lost = code == 200 and node["metadata"].get("annotations", {}).get(LOST_ANNOTATION) == "true"
        if lost:
            self.api.call(
                "PATCH",
                f"/api/v1/nodes/{NODE}",
                {"metadata": {"annotations": {LOST_ANNOTATION: None}}},
                patch=True,
            )
        return lost

    # --- processes --------------------------------------------------------------------------------
    def start_process(self, namespace: str, pod: dict[str, Any], all_tasks: list[str]) -> PodProcess:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        pod_dir = self.state / "pods" / namespace / name
        pod_dir.mkdir(parents=True, exist_ok=True)
        env = {k: os.environ[k] for k in HOST_ENV if k in os.environ}
        env["HOSTNAME"] = name
        for task in all_tasks:  # Volcano's svc plugin: each task's hosts
            env[f"VC_{task.upper().replace('-', '_')}_HOSTS"] = "localhost"
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = var["value"]
        cmd = list(container.get("command") or []) + list(container.get("args") or [])
        log_path = pod_dir / "container.log"
        log_path.touch()
        try:
            popen = subprocess.Popen(
                cmd or ["true"],
                cwd=container.get("workingDir") or str(pod_dir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        except OSError as e:
            log_path.write_text(f"{now_nano()} stand-in kubelet: cannot start {cmd!r}: {e}\n")
            popen = subprocess.Popen(["false"], preexec_fn=_die_with_parent)
        proc = PodProcess(popen, log_path, now())
        proc.reader = threading.Thread(target=self._copy_log, args=(proc,), daemon=True)
        proc.reader.start()
        return proc

    @staticmethod
    def _copy_log(proc: PodProcess) -> None:
        assert proc.popen.stdout is not None
        with proc.log_path.open("a", encoding="utf-8") as log:
            for raw in proc.popen.stdout:
                log.write(f"{now_nano()} {raw.decode(errors='replace').rstrip(chr(10))}\n")
                log.flush()

    def kill(self, key: tuple[str, str], reason: str) -> None:
        proc = self.procs.get(key)
        if proc is None or proc.popen.poll() is not None:
            return
        proc.reason = proc.reason or reason
        if not proc.kill_sent:
            proc.kill_sent = time.monotonic()
            self._signal(proc, signal.SIGTERM)

    @staticmethod
    def _signal(proc: PodProcess, sig: int) -> None:
        try:
            os.killpg(proc.popen.pid, sig)
        except ProcessLookupError:
            pass

    def reap(self) -> None:
        for proc in self.procs.values():
            if proc.exit_code is None and proc.popen.poll() is not None:
                if proc.reader is not None:
                    proc.reader.join(timeout=2)
                proc.exit_code = proc.popen.returncode
                proc.finished = now()
            elif proc.kill_sent and time.monotonic() - proc.kill_sent > KILL_GRACE_SECONDS:
                self._signal(proc, signal.SIGKILL)

    def kill_everything(self) -> None:
        for proc in self.procs.values():
            if proc.popen.poll() is None:
                self._signal(proc, signal.SIGKILL)

    # --- pods -------------------------------------------------------------------------------------
    def pod_body(self, job: dict[str, Any], task: dict[str, Any], index: int) -> dict[str, Any]:
        meta = job["metadata"]
        template = task.get("template") or {}
        tmeta = template.get("metadata") or {}
        spec = dict(template.get("spec") or {})
        spec["nodeName"] = NODE
        spec.setdefault("restartPolicy", "Never")
        labels = {**(tmeta.get("labels") or {}), JOB_LABEL: meta["name"], TASK_LABEL: task["name"]}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{task['name']}-{index}",
                "labels": labels,
                "annotations": {**(tmeta.get("annotations") or {}), "volcano.sh/task-spec": task["name"]},
                "ownerReferences": [
                    {
                        "apiVersion": "batch.volcano.sh/v1alpha1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": spec,
        }

    def write_pod_status(self, namespace: str, pod: dict[str, Any]) -> None:
        key = (namespace, pod["metadata"]["name"])
        proc = self.procs.get(key)
        container = pod["spec"]["containers"][0]
        cstatus: dict[str, Any] = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
        }
        if proc is None:
            phase, cstatus["state"], cstatus["ready"] = (
                "Pending",
                {"waiting": {"reason": "ContainerCreating"}},
                False,
            )
        elif proc.exit_code is None:
            phase, cstatus["ready"] = "Running", True
            cstatus["state"] = {"running": {"startedAt": proc.started}}
        else:
            code = proc.exit_code if proc.exit_code >= 0 else 128 - proc.exit_code
            phase = "Succeeded" if code == 0 and not proc.reason else "Failed"
            cstatus["ready"] = False
            reason = proc.reason or ("Completed" if code == 0 else "Error")
            cstatus["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": proc.started,
                    "finishedAt": proc.finished,
                }
            }
        cstatus["restartCount"] = 0
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "containerStatuses": [cstatus],
        }
        if proc is not None:
            status["startTime"] = proc.started
        if proc is not None and proc.reason:
            status["reason"] = proc.reason
            status["message"] = f"the stand-in ended the pod: {proc.reason}"
        if self.pod_status_written.get(key) == status:
            return
        code, _ = self.api.call(
            "PATCH", f"/api/v1/namespaces/{namespace}/pods/{key[1]}/status", {"status": status}, patch=True
        )
        if code < 300:
            self.pod_status_written[key] = status

    def delete_pod(self, namespace: str, name: str) -> None:
        self.api.call(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
        self.pod_status_written.pop((namespace, name), None)

    # --- jobs -------------------------------------------------------------------------------------
    @staticmethod
    def policy_action(job: dict[str, Any], event: str) -> str | None:
        for policy in job["spec"].get("policies") or []:
            if policy.get("event") == event or event in (policy.get("events") or []):
                return str(policy.get("action"))
        return None

    def queue_exists(self, queue: str) -> bool:
        code, _ = self.api.call("GET", f"{QUEUES}/{urllib.parse.quote(queue)}")
        return code == 200

    def reconcile(self) -> None:
        code, jobs = self.api.call("GET", f"{JOBS}/jobs")
        if code != 200:
            return
        code, pods = self.api.call("GET", f"/api/v1/pods?labelSelector={urllib.parse.quote(JOB_LABEL)}")
        if code != 200:
            return
        self.reap()
        lost = self.node_lost()
        pods_by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in pods["items"]:
            meta = pod["metadata"]
            pods_by_job.setdefault((meta["namespace"], meta["labels"][JOB_LABEL]), []).append(pod)
        seen = set()
        for job in jobs["items"]:
            key = (job["metadata"]["namespace"], job["metadata"]["name"])
            seen.add(key)
            book = self.jobs.get(key)
            if book is None or book.uid != job["metadata"]["uid"]:
                book = self.jobs[key] = JobBook(job["metadata"]["uid"])
            self.reconcile_job(job, book, pods_by_job.get(key, []), lost)
        for key, job_pods in pods_by_job.items():  # pods of deleted jobs (no garbage collector here)
            if key not in seen:
                for pod in job_pods:
                    pod_key = (key[0], pod["metadata"]["name"])
                    self.kill(pod_key, "Aborted")
                    self.delete_pod(*pod_key)
        for key in list(self.jobs):
            if key not in seen:
                del self.jobs[key]
        # processes of jobs that are gone: killed, and forgotten once they ended
        for pod_key in list(self.procs):
            namespace, pod_name = pod_key
            if not any(namespace == ns and pod_name.startswith(f"{job}-") for ns, job in seen):
                self.kill(pod_key, "Aborted")
                if self.procs[pod_key].exit_code is not None:
                    del self.procs[pod_key]

    def reconcile_job(
        self, job: dict[str, Any], book: JobBook, pods: list[dict[str, Any]], lost: bool
    ) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        phase = ((job.get("status") or {}).get("state") or {}).get("phase")
        tasks = job["spec"]["tasks"]
        task_names = [t["name"] for t in tasks]
        wanted = [(t, i) for t in tasks for i in range(int(t.get("replicas", 1)))]
        pod_names = [f"{name}-{t['name']}-{i}" for t, i in wanted]
        by_name = {p["metadata"]["name"]: p for p in pods}

        if phase in TERMINAL_PHASES or book.ended_phase:
            if phase in ("Aborted", "Aborting") and not book.ended_phase:
                book.ended_phase, book.ended_reason = "Aborted", "Aborted"
            for pod_name in pod_names:
                self.kill((namespace, pod_name), "Aborted")
            self.write_pods(namespace, by_name)
            if book.ended_phase and phase != book.ended_phase:
                self.write_job_status(job, book, by_name, pod_names, book.ended_phase)
            return
        if phase in ("Aborting", "Aborted"):
            book.ended_phase, book.ended_reason = "Aborted", "Aborted"
            return self.reconcile_job(job, book, pods, lost)

        queue = job["spec"].get("queue") or "default"
        if not self.queue_exists(queue):
            book.ended_reason, book.ended_message = "QueueNotFound", f"queue {queue!r} does not exist"
            self.write_job_status(job, book, by_name, pod_names, "Pending")
            return
        book.ended_reason = book.ended_message = ""

        # a pod gone or going while its job runs: Volcano's PodEvicted
        evicted = [
            n
            for n in pod_names
            if (n in by_name and by_name[n]["metadata"].get("deletionTimestamp"))
            or (n not in by_name and (namespace, n) in self.procs)
        ]
        if lost:
            evicted = [
                n
                for n in pod_names
                if (namespace, n) in self.procs and self.procs[(namespace, n)].exit_code is None
            ]
        if evicted:
            reason = "NodeLost" if lost else "PodEvicted"
            return self.evicted(job, book, by_name, pod_names, evicted, reason)

        for task, index in wanted:
            pod_name = f"{name}-{task['name']}-{index}"
            if pod_name not in by_name:
                code, body = self.api.call(
                    "POST", f"/api/v1/namespaces/{namespace}/pods", self.pod_body(job, task, index)
                )
                if code >= 300:
                    book.ended_phase, book.ended_reason = "Failed", "PodCreateFailed"
                    book.ended_message = str(body.get("message", body))
                    return self.write_job_status(job, book, by_name, pod_names, "Failed")
                by_name[pod_name] = body
            if (namespace, pod_name) not in self.procs:
                self.procs[(namespace, pod_name)] = self.start_process(
                    namespace, by_name[pod_name], task_names
                )
        self.write_pods(namespace, by_name)

        exits = [self.procs[(namespace, n)].exit_code for n in pod_names]
        failed = [n for n, c in zip(pod_names, exits, strict=True) if c not in (None, 0)]
        if failed:
            for n in pod_names:
                self.kill((namespace, n), "Aborted")
            code = self.procs[(namespace, failed[0])].exit_code
            book.ended_phase, book.ended_reason = "Failed", "PodFailed"
            book.ended_message = f"pod {failed[0]} failed with exit code {code}"
            return self.write_job_status(job, book, by_name, pod_names, "Failed")
        if all(c == 0 for c in exits):
            book.ended_phase, book.ended_reason = "Completed", "Completed"
            return self.write_job_status(job, book, by_name, pod_names, "Completed")
        self.write_job_status(job, book, by_name, pod_names, "Running")

    def evicted(
        self,
        job: dict[str, Any],
        book: JobBook,
        by_name: dict[str, dict[str, Any]],
        pod_names: list[str],
        evicted: list[str],
        reason: str,
    ) -> None:
        namespace = job["metadata"]["namespace"]
        action = self.policy_action(job, "PodEvicted") or "RestartJob"  # Volcano's default for it
        for n in pod_names:
            self.kill((namespace, n), reason if n in evicted else "Aborted")
        message = f"pod {evicted[0]} was evicted" + (" (its node was lost)" if reason == "NodeLost" else "")
        if action == "RestartJob" and book.retries < int(job["spec"].get("maxRetry", 3)):
            book.retries += 1
            for n in pod_names:  # their processes are being killed; the next polls create them anew
                self.delete_pod(namespace, n)
                proc = self.procs.get((namespace, n))
                if proc is not None:
                    proc.popen.wait(timeout=KILL_GRACE_SECONDS + 5)
                    del self.procs[(namespace, n)]
            book.ended_reason, book.ended_message = reason, message
            self.write_job_status(job, book, {}, pod_names, "Restarting")
            return
        book.ended_phase = {"AbortJob": "Aborted", "TerminateJob": "Terminated"}.get(action, "Failed")
        book.ended_reason, book.ended_message = reason, message
        for n in evicted:
            self.delete_pod(namespace, n)
        self.write_job_status(job, book, by_name, pod_names, book.ended_phase)

    def write_pods(self, namespace: str, by_name: dict[str, dict[str, Any]]) -> None:
        for pod in by_name.values():
            if "spec" in pod and not pod["metadata"].get("deletionTimestamp"):
                self.write_pod_status(namespace, pod)

    def write_job_status(
        self,
        job: dict[str, Any],
        book: JobBook,
        by_name: dict[str, dict[str, Any]],
        pod_names: list[str],
        phase: str,
    ) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        counts: dict[str, dict[str, dict[str, int]]] = {}
        totals = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
        for pod_name in pod_names:
            proc = self.procs.get((namespace, pod_name))
            if proc is None:
                pod_phase = "Pending"
            elif proc.exit_code is None:
                pod_phase = "Running"
            else:
                pod_phase = "Succeeded" if proc.exit_code == 0 and not proc.reason else "Failed"
            task = pod_name[len(name) + 1 :].rsplit("-", 1)[0]
            phases = counts.setdefault(task, {"phase": {}})["phase"]
            phases[pod_phase] = phases.get(pod_phase, 0) + 1
            totals[pod_phase.lower()] += 1
        status = {
            # None deletes a field in a merge patch (an empty string is refused as null by the schema)
            "state": {
                "phase": phase,
                "reason": book.ended_reason or None,
                "message": book.ended_message or None,
            },
            "taskStatusCount": counts,
            "retryCount": book.retries,
            "minAvailable": len(pod_names),
            **totals,
        }
        if book.last_status == status:
            return
        body = {"status": {**status, "state": {**status["state"], "lastTransitionTime": now()}}}
        code, response = self.api.call(
            "PATCH", f"{JOBS}/namespaces/{namespace}/jobs/{name}/status", body, patch=True
        )
        if code < 300:
            book.last_status = status
        else:
            print(
                f"{now()} job {namespace}/{name}: status not written: {code} {response.get('message')}",
                flush=True,
            )

    # --- the kubelet's log endpoint ---------------------------------------------------------------
    def serve_logs(self, cert: str, key: str) -> ThreadingHTTPServer:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) < 3 or parts[0] != "containerLogs":
                    self.send_error(404, "not found")
                    return
                query = urllib.parse.parse_qs(url.query)
                standin.stream_log(self, parts[1], parts[2], query)

        server = ThreadingHTTPServer(("127.0.0.1", self.kubelet_port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def stream_log(
        self, handler: BaseHTTPRequestHandler, namespace: str, pod: str, query: dict[str, list[str]]
    ) -> None:
        proc = self.procs.get((namespace, pod))
        if proc is None:
            handler.send_error(404, f"pod {namespace}/{pod} has no container running here")
            return
        timestamps = query.get("timestamps", ["false"])[0] == "true"
        follow = query.get("follow", ["false"])[0] == "true"
        since = float(query.get("sinceSeconds", ["0"])[0] or 0)
        tail = int(query.get("tailLines", ["-1"])[0] or -1)
        earliest = (
            datetime.fromtimestamp(time.time() - since, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            if since
            else ""
        )
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()

        def emit(lines: list[str]) -> None:
            for line in lines:
                stamp, _, text = line.rstrip("\n").partition(" ")
                if earliest and stamp < earliest:
                    continue
                handler.wfile.write(
                    ((line if timestamps else text + "\n") if line.endswith("\n") else "").encode()
                )
            handler.wfile.flush()

        with proc.log_path.open(encoding="utf-8") as log:
            lines = log.readlines()
            emit(lines[-tail:] if tail >= 0 else lines)
            while follow:
                ended = proc.exit_code is not None or proc.popen.poll() is not None
                more = log.readlines()
                emit(more)
                if ended and not more:
                    break
                time.sleep(0.2)

    # --- the loop ---------------------------------------------------------------------------------
    def run(self, interval: float, owner_pid: int | None) -> None:
        while not self.stopping:
            try:
                self.reconcile()
            except (OSError, ValueError, KeyError) as e:  # the API server restarting: try again
                print(f"{now()} reconcile: {type(e).__name__}: {e}", flush=True)
            if owner_pid is not None and not _alive(owner_pid):
                print(f"{now()} owner {owner_pid} is gone: stopping the cluster", flush=True)
                self.stop_cluster()
                break
            time.sleep(interval)
        self.kill_everything()

    def stop_cluster(self) -> None:
        self.kill_everything()
        for name in ("apiserver", "etcd"):
            try:
                pid = int((self.state / f"{name}.pid").read_text())
                os.killpg(pid, signal.SIGTERM)
            except (OSError, ValueError):
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--server", default="")
    parser.add_argument("--kubeconfig", default="")
    parser.add_argument("--kubelet-port", type=int, default=16250)
    parser.add_argument("--interval", type=float, default=0.3)
    args = parser.parse_args()
    server = args.server
    if not server and args.kubeconfig:
        for line in Path(args.kubeconfig).read_text().splitlines():
            if line.strip().startswith("server:"):
                server = line.split(":", 1)[1].strip()
    token = (args.state / "admin.token").read_text().strip()
    standin = StandIn(Api(server, token, str(args.state / "pki" / "ca.crt")), args.state, args.kubelet_port)
    standin.serve_logs(str(args.state / "pki" / "server.crt"), str(args.state / "pki" / "server.key"))

    def stop(signum: int, frame: Any) -> None:
        standin.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for _ in range(100):
        try:
            standin.register_node()
            break
        except (OSError, RuntimeError) as e:
            print(f"{now()} node: {e}", flush=True)
            time.sleep(0.3)
    owner = os.environ.get("K8S_OWNER_PID")
    print(
        f"{now()} stand-in up: API server {server}, kubelet logs on 127.0.0.1:{args.kubelet_port}", flush=True
    )
    standin.run(args.interval, int(owner) if owner else None)


if __name__ == "__main__":
    main()
