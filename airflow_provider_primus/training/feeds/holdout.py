"""The held-out evaluation at the end of a run: the files sources' rows in a time window the model
never trained on, read through the data service and scored once.

Separate from the loop: it runs after training, reads its own feeds, and changes with how the model
is judged rather than with how it trains.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from airflow_provider_primus.contracts.data import PrimusData, Window, is_history
from airflow_provider_primus.credentials import new_token
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.feeds.feed import FileFeed
from airflow_provider_primus.training.gpu import BatchStager, Placement, Prefetcher
from airflow_provider_primus.training.metrics import ScoreLog
from airflow_provider_primus.training.summary import round_metric

__all__ = ["evaluate_holdout"]


def _batches(feed: FileFeed) -> Iterator[list[tuple[str, TensorBatch]]]:
    while feed.available(4096):
        for b in feed.take(4096):
            yield [(feed.name, b)]


def evaluate_holdout(
    data: PrimusData,
    holdout: Window,
    model: torch.nn.Module,
    device: torch.device,
    *,
    spec_path: Path,
    sparse: list[str],
    dense: list[str],
) -> dict[str, Any]:
    """Rows, AUC and log-loss of ``model`` on every files source's rows in ``holdout``."""
    graph = plan(data, holdout.start, holdout.end)
    tables = next((p.device for n, p in model.named_parameters() if n.startswith("embeddings.")), device)
    stager = BatchStager(Placement(device, tables, "the trained model's"))
    log_ = ScoreLog()
    token = new_token()
    model.eval()
    for source in data.spec.sources:
        if not is_history(source):
            continue
        tasks = [t for t in graph.tasks if t.source == source.name]
        if not tasks:
            continue
        feed = FileFeed(
            f"holdout-{source.name}",
            tasks,
            [],
            spec_path=spec_path,
            token=token,
            sparse=sparse,
            dense=dense,
        )
        try:
            with torch.no_grad():
                # One batch ahead: the next batch is on its way to the GPU while this one is scored.
                for staged in Prefetcher(_batches(feed), stager):
                    ids, values, labels = staged.ready()
                    p = torch.sigmoid(model(ids, values, staged.bags))
                    log_.append(labels.cpu().numpy(), p.float().cpu().numpy())
        finally:
            feed.close()
    return {"rows": len(log_), "auc": round_metric(log_.auc()), "logloss": round_metric(log_.logloss())}
