"""How much a click log's stream can teach about its items: a counting reference for ``bench hybrid``.

Whether mixed training can beat the offline model by a margin depends first on the data: if what a
model can learn about an item from the history still holds on the stream days, fresh rows add little
however they are trained. This module measures that on the log itself, with the simplest learner
that uses nothing but the rows: each item's click rate, counted, smoothed towards the history's click
rate by a prior of ``PRIOR_IMPRESSIONS`` impressions, and combined with each hour's click rate counted
on the history (``score = logit(item rate) + logit(hour rate) - logit(history rate)``). Two versions
score every stream row, in production order and in steps of ``batch_size`` rows, scoring a step
before counting it (progressive validation, as the trainer does):

- ``history``: counts frozen at the end of the history — the offline counter;
- ``history_and_stream``: the same counts, updated with each stream step after it is scored.

Their AUC difference is the item-level gain fresh data offers to a learner that needs no training
(``bench hybrid`` reports it beside the models' margins). It reads the generator's tables directly,
not the data plane: a reference, not a training mode. It knows nothing of users (their interests are
latent), so it bounds nothing about them; it is a yardstick for the item and time signal, which is
what a one-pass model learns from a log with under one impression per user per day.
"""

from __future__ import annotations

import numpy as np

from airflow_provider_primus.gen.clicklog import World, generate_day
from airflow_provider_primus.gen.events import iter_stream
from airflow_provider_primus.training.metrics import auc

__all__ = ["PRIOR_IMPRESSIONS", "item_ctr_reference"]

# The counted rate of an item with n impressions weighs like n against this many at the mean rate.
PRIOR_IMPRESSIONS = 20.0


def _logit(p: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.log(p / (1.0 - p))
    return out


def item_ctr_reference(world: World, batch_size: int) -> dict[str, float]:
    """``{"history": AUC, "history_and_stream": AUC}`` over the stream days' rows (module docstring)."""
    if world.stream_days < 1:
        raise ValueError("the item click-rate reference needs at least one stream day")
    items = np.zeros(world.items_on(world.days - 1))
    item_clicks = np.zeros_like(items)
    hours, hour_clicks = np.zeros(24), np.zeros(24)
    for day in range(world.history_days):
        t = generate_day(world, day)
        item, hour, clicked = (t.column(c).to_numpy() for c in ("item_id", "hour", "clicked"))
        np.add.at(items, item, 1.0)
        np.add.at(item_clicks, item, clicked)
        np.add.at(hours, hour, 1.0)
        np.add.at(hour_clicks, hour, clicked)
    rate = float(item_clicks.sum() / items.sum())
    hour_term = _logit((hour_clicks + PRIOR_IMPRESSIONS * rate) / (hours + PRIOR_IMPRESSIONS * 1.0)) - _logit(
        np.array(rate)
    )
    frozen = _logit((item_clicks + PRIOR_IMPRESSIONS * rate) / (items + PRIOR_IMPRESSIONS))
    labels, scores_frozen, scores_fresh = [], [], []
    for t in iter_stream(world):  # the stream's rows in production order, as the topic holds them
        item, hour, clicked = (t.column(c).to_numpy() for c in ("item_id", "hour", "clicked"))
        for start in range(0, len(item), batch_size):
            step = slice(start, start + batch_size)
            i = item[step]
            fresh = (item_clicks[i] + PRIOR_IMPRESSIONS * rate) / (items[i] + PRIOR_IMPRESSIONS)
            scores_fresh.append(_logit(fresh) + hour_term[hour[step]])
            scores_frozen.append(frozen[i] + hour_term[hour[step]])
            np.add.at(items, i, 1.0)
            np.add.at(item_clicks, i, clicked[step])
        labels.append(clicked)
    y = np.concatenate(labels)
    return {
        "history": round(auc(y, np.concatenate(scores_frozen)), 6),
        "history_and_stream": round(auc(y, np.concatenate(scores_fresh)), 6),
    }
