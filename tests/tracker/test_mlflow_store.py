"""MLflow store specifics against a real tracking server: one run per TorchX run id however many
ranks race, batched writes, values over MLflow's limits, lineage tags, inline config."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import threading
import time
import uuid

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from torchx_airflow_tracker.config import TrackerConfigError
from torchx_airflow_tracker.mlflow_store import (
    CLAIM_PREFIX,
    MAX_SPLIT_VALUE,
    RUN_ID_TAG,
    MlflowStore,
    ValueTooLargeError,
    create,
)

RANKS = 6
JOIN_SECONDS = 480


def _rank(uri: str, experiment: str, run_id: str, rank: int, start) -> None:
    store = MlflowStore(uri, experiment)
    store.experiment_id  # noqa: B018 - mlflow imported and the experiment known before the race
    start.wait()
    store.add_metadata(run_id, **{f"rank{rank}": rank})


@pytest.fixture(params=["server", "sqlite"])
def tracking_uri(request, tmp_path):
    """The real MLflow tracking server, and an MLflow SQLite store used directly."""
    if request.param == "server":
        return request.getfixturevalue("mlflow_uri")
    return f"sqlite:///{tmp_path}/mlflow.db"


@pytest.mark.timeout(JOIN_SECONDS + 120)
def test_ranks_creating_the_run_at_once_get_one_run(tracking_uri):
    experiment, run_id = f"race-{uuid.uuid4().hex[:6]}", f"slurm://torchx/race-{uuid.uuid4().hex[:6]}"
    MlflowStore(tracking_uri, experiment).experiment_id  # noqa: B018 - the experiment exists, the run does not
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(RANKS)  # every rank imported and ready, then all create at once
    procs = [
        ctx.Process(target=_rank, args=(tracking_uri, experiment, run_id, r, start)) for r in range(RANKS)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + JOIN_SECONDS  # generous: spawned ranks import mlflow on a busy machine
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
        assert p.exitcode == 0

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'")
    assert len(runs) == 1
    assert runs[0].info.run_name == run_id
    assert MlflowStore(tracking_uri, experiment).metadata(run_id) == {f"rank{r}": r for r in range(RANKS)}
    # the claims of an experiment are params of one run, made through one claim experiment, which
    # is out of sight (deleted); no run leaves a claim experiment of its own. Only this experiment's
    # claims: the server is shared with other tests' stores, whose claims come and go meanwhile.
    own = f"{CLAIM_PREFIX}{exp.experiment_id}"
    for live in (f"name = '{own}'", f"name LIKE '{own}.%'"):
        assert client.search_experiments(filter_string=live) == [], live
    claims = f"name LIKE '{CLAIM_PREFIX}%'"
    deleted = client.search_experiments(filter_string=claims, view_type=ViewType.DELETED_ONLY)
    assert [e.name for e in deleted if e.name.endswith(f".{exp.experiment_id}")] == [
        f"{CLAIM_PREFIX}{exp.experiment_id}"
    ]


def test_a_create_run_slower_than_the_others_still_makes_one_run(tmp_path, monkeypatch):
    """A rank whose create_run takes long (here: until the other rank has written) joins the run
    another rank claimed meanwhile: one run, both ranks' metadata. The previous version re-claimed
    after a timeout (made 1 s here, where it still exists) and split the writes between two runs; a
    version where the fast rank waits for the slow one's run would never let it write."""
    import threading

    from torchx_airflow_tracker import mlflow_store

    monkeypatch.setattr(mlflow_store, "CLAIM_TIMEOUT_SECONDS", 1.0, raising=False)
    uri, experiment, run_id = f"sqlite:///{tmp_path}/mlflow.db", "slow", "slurm://torchx/slow-1"
    slow, fast = MlflowStore(uri, experiment), MlflowStore(uri, experiment)
    slow.experiment_id, fast.experiment_id  # noqa: B018
    real_create = MlflowClient.create_run
    slowed, fast_wrote = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def create_run(self, *args, **kwargs):
        if threading.current_thread().name == "slow-rank" and not slowed.is_set():
            slowed.set()
            if not fast_wrote.wait(60):
                errors.append(AssertionError("the fast rank waited for the slow rank's create_run"))
        return real_create(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "create_run", create_run)

    def rank(store, key):
        try:
            store.add_metadata(run_id, **{key: 1})
        except Exception as e:  # any failure of the thread is reported below
            errors.append(e)
        finally:
            if key == "fast":
                fast_wrote.set()

    threads = [threading.Thread(target=rank, args=(slow, "slow"), name="slow-rank")]
    threads.append(threading.Thread(target=rank, args=(fast, "fast"), name="fast-rank"))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and slowed.is_set()
    runs = MlflowClient(uri).search_runs(
        [slow.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'"
    )
    assert len(runs) == 1
    assert MlflowStore(uri, experiment).metadata(run_id) == {"slow": 1, "fast": 1}


def test_keys_mlflow_path_rules_refuse_and_ints_past_float_range(tmp_path):
    store = MlflowStore(f"sqlite:///{tmp_path}/mlflow.db", "paths")
    run_id = "slurm://torchx/paths-1"
    odd = {"checkpoints/": 1, "a//b": 2, "/abs": 3, "../up": 4, "big": 10**400}
    store.add_metadata(run_id, **odd)
    store.add_artifact(run_id, "checkpoints/", "/ckpt")
    assert store.metadata(run_id) == odd
    assert set(store.artifacts(run_id)) == {"checkpoints/"}
    metrics = (
        MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(store.mlflow_run_id(run_id)).data.metrics
    )
    assert sorted(metrics.values()) == [1.0, 2.0, 3.0, 4.0]  # the huge int stays a tag only


def test_a_multi_store_checks_every_store_before_any_writes(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.multi_store import MultiStore

    fs_store = FsspecStore(str(tmp_path / "fs"))
    multi = MultiStore([fs_store, MlflowStore(f"sqlite:///{tmp_path}/mlflow.db", "multi")])
    with pytest.raises(ValueTooLargeError):
        multi.add_metadata("slurm://torchx/multi-1", weights="w" * (MAX_SPLIT_VALUE + 1))
    assert fs_store.metadata("slurm://torchx/multi-1") == {}


def test_a_run_deleted_by_a_user_is_created_again(tracking_uri):
    experiment, run_id = f"del-{uuid.uuid4().hex[:6]}", "slurm://torchx/deleted-1"
    store = MlflowStore(tracking_uri, experiment)
    store.add_metadata(run_id, first=1)
    MlflowClient(tracking_uri).delete_run(store.mlflow_run_id(run_id))
    fresh = MlflowStore(tracking_uri, experiment)
    fresh.add_metadata(run_id, second=2)
    assert fresh.metadata(run_id) == {"second": 2}
    assert fresh.mlflow_run_id(run_id) != store.mlflow_run_id(run_id)


@pytest.fixture
def requests_made(monkeypatch) -> list[str]:
    """The endpoints of the HTTP requests MLflow's client makes from here on (the real requests,
    counted on their way out)."""
    from mlflow.utils import rest_utils

    endpoints: list[str] = []
    real_request = rest_utils.http_request

    def counting(*args, **kwargs):
        endpoints.append(kwargs.get("endpoint") or args[1])
        return real_request(*args, **kwargs)

    monkeypatch.setattr(rest_utils, "http_request", counting)
    return endpoints


def test_a_new_run_with_a_hundred_keys_takes_five_requests(mlflow_uri, requests_made):
    """A job's first write to a new run: the experiment lookup (which names the claims run), one read
    of the claims (which bind run ids to runs), create_run carrying the first batch of tags, the
    claim, and one log_batch (the run id tag and the metrics). The previous version made seven."""
    experiment = f"requests-{uuid.uuid4().hex[:6]}"
    MlflowStore(mlflow_uri, experiment).add_metadata("slurm://torchx/earlier", a=1)  # claims run made
    requests_made.clear()
    run_id = f"slurm://torchx/new-{uuid.uuid4().hex[:6]}"
    values = {f"k{k}": k for k in range(100)}
    MlflowStore(mlflow_uri, experiment).add_metadata(run_id, **values)
    assert len(requests_made) == 5, requests_made
    fresh = MlflowStore(mlflow_uri, experiment)
    assert fresh.metadata(run_id) == values
    assert sorted(fresh.run_ids()) == sorted(["slurm://torchx/earlier", run_id])
    assert MlflowClient(mlflow_uri).get_run(fresh.mlflow_run_id(run_id)).data.metrics["k99"] == 99.0


def test_graph_reads_every_edge_in_one_search_and_answers_details_from_it(mlflow_uri, requests_made):
    """graph() (what the lineage view reads first) costs the experiment lookup, one search and one
    read of the claims (each run id's run is the one its claim names); the details of its runs then
    cost no request, except a run this store object wrote since."""
    experiment = f"graph-{uuid.uuid4().hex[:6]}"
    writer = MlflowStore(mlflow_uri, experiment)
    writer.add_metadata("x://s/parent", kind="data")
    writer.add_metadata("x://s/child", lr=0.1)
    writer.add_artifact("x://s/child", "model", "/m.pt")
    writer.add_source("x://s/child", "x://s/parent", "data")
    writer.add_source("x://s/child", "x://s/parent", "model")
    writer.add_source("x://s/grandchild", "x://s/child")
    requests_made.clear()
    store = MlflowStore(mlflow_uri, experiment)
    graph = store.graph()
    assert len(requests_made) == 3, requests_made  # the experiment lookup, one page of runs, the claims
    assert graph.children_of("x://s/parent") == {"x://s/child": ("data", "model")}
    assert graph.parents_of("x://s/grandchild") == {"x://s/child": (None,)}
    assert graph.children_of("x://s/child") == {"x://s/grandchild": (None,)}
    assert store.metadata("x://s/child") == {"lr": 0.1}
    assert set(store.artifacts("x://s/child")) == {"model"}
    assert len(requests_made) == 3
    store.add_metadata("x://s/child", lr=0.2)
    assert store.metadata("x://s/child") == {"lr": 0.2}  # read again after its own write


def test_a_rank_losing_the_claim_writes_its_first_batch_to_the_winner(mlflow_uri):
    """The losing rank's own run carried its first batch and is deleted: the batch reaches the
    winner's run all the same, split values included."""
    experiment = f"loser-{uuid.uuid4().hex[:6]}"
    run_id = f"slurm://torchx/lost-{uuid.uuid4().hex[:6]}"
    winner = MlflowStore(mlflow_uri, experiment)
    winner_id, won = winner._create_once(run_id)  # another rank's claim, made first
    assert won
    winner.client.set_tag(winner_id, RUN_ID_TAG, run_id)
    loser = MlflowStore(mlflow_uri, experiment)
    loser._claimed = lambda _run_id, runs=None: None  # this rank searched before the winner's run had its tag
    loser.add_metadata(run_id, big="b" * 20000, **{f"k{k}": k for k in range(150)})
    assert loser.mlflow_run_id(run_id) == winner_id
    assert MlflowStore(mlflow_uri, experiment).metadata(run_id) == {
        "big": "b" * 20000,
        **{f"k{k}": k for k in range(150)},
    }


def test_more_than_a_batch_of_metadata_and_numbers_as_metrics(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"batch-{uuid.uuid4().hex[:6]}")
    run_id = "slurm://torchx/batch-1"
    values = {f"k{i}": i for i in range(250)}
    store.add_metadata(run_id, **values, note="text")
    assert store.metadata(run_id) == {**values, "note": "text"}
    mlflow_run = MlflowClient(mlflow_uri).get_run(store.mlflow_run_id(run_id))
    assert mlflow_run.data.metrics["k249"] == 249.0
    assert "note" not in mlflow_run.data.metrics


def test_values_over_mlflow_limits_read_back_whole(mlflow_uri):
    """Every value MLflow cannot hold in one tag (metadata, artifact path or metadata, a key) reads back."""
    store = MlflowStore(mlflow_uri, f"limits-{uuid.uuid4().hex[:6]}")
    run_id = "slurm://torchx/limits-1"
    huge_path = "s3://b/" + "x" * 9000  # the artifact path itself over the limit: this used to hang
    quoted = {"q": '"\\' * 30000}  # JSON escaping doubles it: parts must still fit a request
    store.add_metadata(run_id, huge="x" * 20000, fine=1, quoted=quoted)
    store.add_artifact(run_id, "model", huge_path, {"blob": "y" * 20000})
    store.add_metadata(run_id, **{"weird key: with/колон": 5, "k" * 400: "long key"})
    store.add_source(run_id, "s3://data/" + "z" * 9000, "n" * 9000)
    metadata = store.metadata(run_id)
    assert metadata["fine"] == 1
    assert metadata["huge"] == "x" * 20000
    assert metadata["quoted"] == quoted
    assert metadata["weird key: with/колон"] == 5  # the key reads back exactly
    assert metadata["k" * 400] == "long key"
    artifact = store.artifacts(run_id)["model"]
    assert (artifact.path, artifact.metadata) == (huge_path, {"blob": "y" * 20000})
    assert [(s.source_run_id, s.artifact_name) for s in store.sources(run_id)] == [
        ("s3://data/" + "z" * 9000, "n" * 9000)
    ]
    assert store.run_ids(parent_run_id="s3://data/" + "z" * 9000) == [run_id]


def test_a_value_over_the_split_limit_is_a_named_error_and_writes_nothing(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"limits-{uuid.uuid4().hex[:6]}")
    run_id = "slurm://torchx/limits-2"
    store.add_metadata(run_id, before=1)
    with pytest.raises(ValueTooLargeError, match=r"torchx\.metadata\.weights.*add_artifact"):
        store.add_metadata(run_id, small=2, weights="w" * (MAX_SPLIT_VALUE + 1))
    assert store.metadata(run_id) == {"before": 1}


def test_a_later_smaller_value_replaces_a_split_one(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"limits-{uuid.uuid4().hex[:6]}")
    run_id = "slurm://torchx/limits-3"
    store.add_metadata(run_id, notes="n" * 30000)
    store.add_metadata(run_id, notes="short")
    store.add_metadata(run_id, other="o" * 17000)
    assert store.metadata(run_id) == {"notes": "short", "other": "o" * 17000}


def test_lineage_is_one_tag_per_source(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"tags-{uuid.uuid4().hex[:6]}")
    store.add_source("x://s/child", "x://s/parent", "model")
    store.add_source("x://s/child", "x://s/parent", "data")
    tags = MlflowClient(mlflow_uri).get_run(store.mlflow_run_id("x://s/child")).data.tags
    assert len([k for k in tags if k.startswith("torchx.source.")]) == 1
    assert store.run_url("x://s/child").startswith(f"{mlflow_uri}/#/experiments/")


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (None, "needs a config"),
        ('{"uri": "x"}', "Unknown key(s) ['uri']"),
        ('{"experiment": "e"}', "missing ['tracking_uri']"),
    ],
)
def test_bad_config(config, fragment):
    with pytest.raises(TrackerConfigError) as err:
        create(config)
    assert fragment in str(err.value)


def test_inline_config_and_default_experiment():
    store = create('{"tracking_uri": "sqlite:////tmp/x.db"}')
    assert (store.tracking_uri, store.experiment) == ("sqlite:////tmp/x.db", "torchx")


@pytest.mark.parametrize("credentials", [{}, {"username": "u", "password": "p"}], ids=["env", "given"])
def test_a_store_being_built_elsewhere_in_the_process_holds_no_http_store_back(mlflow_uri, credentials):
    """MLflow builds the stores of its registry under one process-wide lock: a database store whose
    server is down holds it for minutes. An http(s) store (every lineage view of the API server, a
    second tracker of a task) must not wait for it. The lock is held here as that build holds it."""
    from mlflow.tracking._tracking_service import registry

    run_id = f"held-{uuid.uuid4().hex}"
    with registry._building_store_lock:
        done: list[dict] = []

        def write_and_read() -> None:
            store = MlflowStore(mlflow_uri, f"held-{uuid.uuid4().hex[:8]}", **credentials)
            store.add_metadata(run_id, epoch=3)
            done.append(dict(store.metadata(run_id)))

        worker = threading.Thread(target=write_and_read, daemon=True)
        worker.start()
        worker.join(60)
        assert done == [{"epoch": 3}], "the http store waited for MLflow's store-building lock"


def test_a_store_whose_server_hangs_holds_no_other_store_back(mlflow_uri):
    """An MLflow server that does not answer keeps its store busy for minutes (MLflow retries with
    backoff); every other store of the process goes on (Python 3.10/3.11's cached_property would
    hold them all behind one lock per class)."""
    stuck = MlflowStore("https://127.0.0.1:9", "nowhere", username="a", password="b")

    looking_up = threading.Event()
    look_up = stuck.client.get_experiment_by_name

    def entered_look_up(name: str):
        looking_up.set()
        return look_up(name)

    stuck.client.get_experiment_by_name = entered_look_up  # type: ignore[method-assign]

    def look_up_forever() -> None:
        with contextlib.suppress(Exception):  # it gives up in the end, long after this test
            _ = stuck.experiment_id

    threading.Thread(target=look_up_forever, daemon=True).start()
    assert looking_up.wait(60), "the stuck store never started its experiment lookup"
    opened: list[str] = []
    worker = threading.Thread(
        target=lambda: opened.append(MlflowStore(mlflow_uri, f"free-{uuid.uuid4().hex[:8]}").experiment_id),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    assert len(opened) == 1, "a store waited for another store's stuck server"


def test_a_run_dated_1970_carrying_another_runs_id_changes_nothing_a_reader_sees(mlflow_uri):
    """Any client of the server can create a run, date it 1970 and tag it with a victim's run id,
    before or after the victim's first write. The victim's run is the one its claim names: every
    reader (metadata, artifacts, sources, the graph, the run list) sees only it, and the victim's
    later writes, through a new store object as the worker's are, land in it, never in the impostor."""
    experiment = f"impostor-{uuid.uuid4().hex[:6]}"
    victim_id, early_id = (
        f"slurm://torchx/victim-{uuid.uuid4().hex[:6]}",
        f"slurm://torchx/early-{uuid.uuid4().hex[:6]}",
    )
    client = MlflowClient(mlflow_uri)
    victim = MlflowStore(mlflow_uri, experiment)

    def impostor(run_id: str) -> str:
        run = client.create_run(victim.experiment_id, start_time=0, run_name=run_id)
        forged = {"key": "loss", "value": 0.0001}
        for key, value in {
            RUN_ID_TAG: run_id,
            "torchx.metadata.loss": json.dumps(forged),
            "torchx.artifact.model": json.dumps(
                {"name": "model", "path": "/attacker/model.pt", "metadata": None}
            ),
        }.items():
            client.set_tag(run.info.run_id, key, value)
        return run.info.run_id

    early = impostor(early_id)  # before the victim ever wrote: the victim's first write still claims its own
    victim.add_metadata(early_id, loss=0.7)
    victim.add_metadata(victim_id, loss=0.5)
    victim.add_artifact(victim_id, "model", "/runs/victim/model.pt")
    victim.add_source(victim_id, "slurm://torchx/prepare-1", "data")
    late = impostor(victim_id)  # after it

    for reader in (MlflowStore(mlflow_uri, experiment), MlflowStore(mlflow_uri, experiment)):
        assert reader.metadata(victim_id) == {"loss": 0.5} and reader.metadata(early_id) == {"loss": 0.7}
        assert reader.artifacts(victim_id)["model"].path == "/runs/victim/model.pt"
        assert [s.source_run_id for s in reader.sources(victim_id)] == ["slurm://torchx/prepare-1"]
        assert sorted(reader.run_ids()) == sorted([victim_id, early_id])
        graph = reader.graph()
        assert graph.parents_of(victim_id) == {"slurm://torchx/prepare-1": ("data",)}
        assert reader.mlflow_run_id(victim_id) not in (early, late)

    worker = MlflowStore(mlflow_uri, experiment)  # the worker records usage afterwards
    worker.add_metadata(victim_id, torchx_usage={"elapsed_s": 3})
    assert MlflowStore(mlflow_uri, experiment).metadata(victim_id) == {
        "loss": 0.5,
        "torchx_usage": {"elapsed_s": 3},
    }
    for impostor_id in (early, late):
        tags = client.get_run(impostor_id).data.tags
        assert (
            "torchx.metadata.torchx_usage" not in tags
            and json.loads(tags["torchx.metadata.loss"])["value"] == 0.0001
        )
