"""Pipeline step 2: train the MLP of model.py with DistributedDataParallel at one learning rate.

Launched by TorchX's ``dist.ddp`` component, which starts one process per rank with torchrun::

    torchx run --scheduler local_cwd dist.ddp -j 1x2 --script dags/jobs/train.py -- \\
        --data data.csv --lr 0.2 --epochs 10 --out /tmp/train

gloo on CPU, NCCL when every rank has a GPU. Every rank records itself with ``AppRun.run_from_env()``;
rank 0 also records the model artifact. The loss of every epoch is a step metric ``train_loss`` and
the model's loss the final metric ``loss`` (``torchx_airflow_tracker.metrics``: every rank calls
it, rank 0 writes, to every tracker of the job: MLflow metrics on an MLflow store).

Rank 0 saves a checkpoint after every epoch (``checkpoint.pt`` in ``--out``, recorded as artifact
``checkpoint`` with its epoch). A job the cluster ended (a node failure, a preemption) is resubmitted
by ``TorchXOperator`` with that checkpoint's path in ``TORCHX_AIRFLOW_RESUME_FROM``: training goes on
from the epoch after it.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
from model import load_data, make_model, mse  # the job's own directory is on sys.path
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torchx.tracker.api import AppRun
from torchx_airflow_tracker.metrics import log_final_metrics, log_metrics

RESUME_FROM = "TORCHX_AIRFLOW_RESUME_FROM"  # set by TorchXOperator when it resubmits this job
ATTEMPT = "TORCHX_AIRFLOW_ATTEMPT"


def device_and_backend() -> tuple[torch.device, str]:
    """NCCL on this rank's GPU when every local rank has one; gloo on the CPU otherwise."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


# --8<-- [start:resume]
def resume(model: DistributedDataParallel, optimizer: torch.optim.Optimizer, rank: int) -> int:
    """The first epoch to train: 1, or the one after the checkpoint in ``TORCHX_AIRFLOW_RESUME_FROM``
    (model and optimizer state loaded from it on every rank)."""
    path = os.environ.get(RESUME_FROM)
    if not path:
        return 1
    # weights_only: a checkpoint is data; never unpickle code from a file a job could have replaced
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.module.load_state_dict(state["state_dict"])
    optimizer.load_state_dict(state["optimizer"])
    if rank == 0:
        attempt = os.environ.get(ATTEMPT, "?")
        print(f"attempt {attempt}: resuming from epoch {state['epoch']} of {path}", flush=True)
    return int(state["epoch"]) + 1


# --8<-- [end:resume]


# --8<-- [start:checkpoint]
def save_checkpoint(
    run: AppRun, model: DistributedDataParallel, optimizer: torch.optim.Optimizer, epoch: int, out: Path
) -> None:
    """``checkpoint.pt`` in ``out`` (written whole, then renamed), recorded as artifact ``checkpoint``."""
    out.mkdir(parents=True, exist_ok=True)
    path, partial = out / "checkpoint.pt", out / "checkpoint.pt.partial"
    torch.save(
        {"state_dict": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
        partial,
    )
    os.replace(partial, path)
    run.add_artifact("checkpoint", str(path), {"epoch": epoch})


# --8<-- [end:checkpoint]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="data.csv written by prepare")
    parser.add_argument("--lr", type=float, required=True, help="learning rate")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=10, help="per rank")
    parser.add_argument("--out", required=True, help="directory for model.pt and checkpoint.pt")
    parser.add_argument(
        "--epoch-seconds", type=float, default=0.0, help="wait this long after each epoch (a longer job)"
    )
    args = parser.parse_args()

    torch.set_num_threads(1)  # two ranks on a small machine: one thread each, no oversubscription
    device, backend = device_and_backend()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)

    x, y = load_data(args.data)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(
        make_model().to(device), device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    first_epoch = resume(model, optimizer, rank)

    host = socket.gethostname()  # the node: on a multi-node cluster each rank names its own
    run = AppRun.run_from_env()
    share = {f"rank{rank}_samples": len(sampler), f"rank{rank}_host": host}
    run.add_metadata(**share, world_size=world, backend=backend)
    print(
        f"rank {rank}/{world}: {len(sampler)} samples, backend {backend}, device {device}, host {host}",
        flush=True,
    )
    out = Path(args.out)

    for epoch in range(first_epoch, args.epochs + 1):
        sampler.set_epoch(epoch)
        totals = torch.zeros(2, device=device)  # sum of squared errors, samples
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()  # DDP averages the gradients of all ranks here
            optimizer.step()
            totals += torch.stack([loss.detach() * len(xb), torch.tensor(float(len(xb)), device=device)])
        dist.all_reduce(totals)  # the epoch's loss over every rank's samples
        epoch_loss = float(totals[0] / totals[1])
        log_metrics(epoch, train_loss=epoch_loss)  # every rank calls it; rank 0 writes the point
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs} lr={args.lr} loss={epoch_loss:.5f}", flush=True)
            save_checkpoint(run, model, optimizer, epoch, out)
        time.sleep(args.epoch_seconds)

    if rank == 0:
        net = model.module.cpu()
        loss = mse(net, x, y)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "model.pt"
        torch.save({"state_dict": net.state_dict(), "lr": args.lr, "epochs": args.epochs}, path)
        run.add_metadata(lr=args.lr, epochs=args.epochs)
        log_final_metrics(loss=loss)  # what TorchXPromoteOperator compares the runs by
        run.add_artifact("model", str(path), {"format": "torch", "lr": args.lr})
        print(f"model loss={loss:.5f} -> {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
