"""Every XCom key and tracker metadata key the provider writes, and the lineage view reads."""

from __future__ import annotations

# XCom keys of a TorchX task
#: the app handle ``scheduler://session/app_id`` of the task's job
XCOM_APP_HANDLE = "app_handle"
#: the task's tracker run id (the app handle, or ``airflow://...`` for a tracked task or a cache hit)
XCOM_RUN_ID = "torchx_run_id"
#: the scheduler's UI page of the app, and the tracker's page of the run (extra links)
XCOM_UI_URL = "ui_url"
XCOM_TRACKER_URL = "tracker_url"
#: what the task submitted (``lineage.submitted``): scheduler, run options, roles; secrets masked
XCOM_SUBMITTED_APP = "torchx_app"
#: the cache key of the run the task waits on (also in the task's state store)
XCOM_CACHE_KEY = "torchx_cache_key"
#: of a task that is not a TorchX run, between TorchX tasks (a sweep's plan): ``{downstream task id:
#: [the parents of each of its map indexes, or None to look further up]}``
XCOM_LINEAGE_PARENTS = "torchx_lineage_parents"
#: of a sweep's plan (``sweeps.tasks``): the sweep's spending and why it stopped (when it did), and
#: what the sweep is (objective, mode, budgets, the plan's rung), which its comparison view reads
XCOM_SWEEP = "torchx_sweep"
XCOM_SWEEP_SPEC = "torchx_sweep_spec"
#: the field of a sweep segment's result that holds its own trial
RESULT_TRIAL = "sweep_trial"
#: of a sweep segment whose task failed: what its job cost (a failed task pushes no result)
XCOM_SEGMENT_SPENT = "torchx_sweep_spent"

# tracker metadata keys of a run
METADATA_PREFIX = "airflow_"
#: the attempt number of a resubmitted job, and what ended the attempt before it
ATTEMPT_KEY = f"{METADATA_PREFIX}attempt"
ENDED_BY_KEY = f"{METADATA_PREFIX}attempt_ended_by"
#: a cache hit's run: the handle it was cached from, and its key
CACHED_FROM_KEY = f"{METADATA_PREFIX}cached_from"
CACHE_KEY_KEY = f"{METADATA_PREFIX}cache_key"
#: what the run used and cost (``policies.cost``)
USAGE_KEY = "torchx_usage"
COST_KEY = "torchx_cost"
#: a promoted run: the asset it was promoted to, by which DAG run or user, with the objective's value
PROMOTED_KEY = f"{METADATA_PREFIX}promoted"
