"""A synthetic click log whose world drifts: history files, a Kafka stream and the PrimusData spec.

The hybrid-training benchmark compares training on history alone with history plus the stream, so
the world must be *fair*: nothing here is tuned to make one mode win. Fresh data helps only for the
reasons it helps in production — user interests and item vectors move (``drift``), new users and items
appear every day (cold start), and items live through a popularity lifecycle (below) — while the
marginal statistics a model could merely memorise (traffic by hour, popularity skew, price
distribution, and the click rate up to day-to-day noise) are stationary. That is why the walks are
mean-reverting (AR(1)s with a stationary variance) rather than plain random walks: a plain walk's
vectors grow without bound, which would inflate affinities and shift the click rate over time, a change
any recent data would "win" on without learning anything about the users.

**The item lifecycle** (``item_lifecycle``, on by default): in real interaction logs
the least stationary signal is the item's own popularity — items are born, are shown and clicked most
while new, and fade; some trend for a day or two — which is why fresh training wins in production
(docs/benchmarks.md, ``primus bench hybrid``, cites what real logs show). Each item has a *heat*, in
logits: ``novelty * 2^(-age / novelty_half_life_days) + trend``, where ``age`` is whole days since
its birth and ``trend`` an AR(1) per item with stationary std ``trend_std`` that halves every
``trend_half_life_days`` (daily trending shocks). Heat adds to the item's click logit and to its score
for the exposure ranking below, so a new or trending item is both shown more and clicked more. Day 0's
items have ages spread over the days the birth rate took to make them, so the world starts in its
steady state. ``item_lifecycle=False`` (``primus gen --stationary-items``) is the stationary world:
the lifecycle draws from its own generator stream, so turning it off shifts no other number.

The model, per day ``d`` (all of it vectorised numpy, no Python loop per row):

- users ``u`` and items ``i`` have latent vectors in R^k, one AR(1) step per day:
  ``x_d = sqrt(1 - drift^2) * x_{d-1} + drift * N(0, I)``, so ``drift`` is the daily innovation's
  standard deviation and two days ``t`` apart correlate by ``(1 - drift^2)^(t/2)``;
- items also have a popularity score on the same walk; impressions pick items Zipf-like by the day's
  rank of popularity plus heat (weight ``rank^-zipf_exponent``) and users in proportion to a fixed
  log-normal activity level;
- ``P(click) = sigmoid(base_logit + affinity_scale * u.v / sqrt(k) + item_bias + heat + hour_effect)``,
  where ``item_bias`` is fixed at an item's birth (slightly lower for pricier items) and
  ``hour_effect = seasonality * cos(2 pi (hour - 20) / 24)``; traffic volume by hour follows
  ``1 + seasonality * cos(...)`` with the same evening peak;
- ``new_users_per_day * users`` users and ``new_items_per_day * items`` items (fractions of the
  *initial* counts, so growth is linear and hash buckets can be sized up front) are born each day
  from the same distributions as the initial ones, with IDs after the previous maximum. IDs are
  0-based and equal to the row of :func:`user_vectors` / :func:`item_vectors`.

Every random draw comes from a generator seeded by ``(seed, day, purpose)``, so a day depends only
on the seed and its index: ``generate_day`` walks the state forward from day 0 (caching the latest
state per world, so generating days in order costs one step each) and any process gets the same
rows. Exact bits can differ across numpy versions, whose ``Generator`` streams are not frozen.

The stream's order and JSON encoding are in ``events.py``; the files and the data document that
``primus gen`` writes are in ``files.py``.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["SCHEMA", "World", "generate_day", "item_vectors", "live_start", "user_vectors"]

SCHEMA = pa.schema(
    [
        ("sample_id", pa.int64()),
        ("user_id", pa.int64()),
        ("item_id", pa.int64()),
        ("hour", pa.int64()),
        ("user_activity", pa.float32()),
        ("item_price", pa.float32()),
        ("clicked", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)

_MS_PER_HOUR = 3_600_000
_PEAK_HOUR = 20
# Log-normal prices around 20 (median e^3); a 1-sigma pricier item loses 0.2 logits of click rate.
_LOG_PRICE_MEAN, _LOG_PRICE_STD, _PRICE_EFFECT = 3.0, 0.8, 0.2
_ITEM_BIAS_STD = 0.5
_USER_WEIGHT_SIGMA = 1.0
# Independent generator streams per (seed, day, purpose): changing how one purpose draws never shifts
# another's numbers.
_BIRTHS, _WALK, _USERS, _ROWS, _LIFECYCLE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class World:
    """Everything the log is a function of: equal worlds generate equal tables (same numpy version).

    ``start`` is the UTC midnight of day 0 (naive values are taken as UTC). Days ``0 ..
    history_days-1`` are history, the next ``stream_days`` the stream. ``label_delay_s > 0`` delays a
    click's label that many seconds after its impression; stream events are then produced in order of
    label availability (non-clicks at impression time) while ``ts`` stays the impression time.
    ``item_lifecycle`` and the four fields after it are the items' popularity lifecycle (module
    docstring); ``item_lifecycle=False`` is the stationary world.

    The lifecycle's values are round figures inside what real logs show, chosen once, before any
    benchmark ran on them (not fitted to make a training mode win): a novelty worth e^1 (about 2.7
    times) the click odds at birth that halves every 2 days (news decays within hours to a day,
    catalogue items over weeks), and trending shocks of std 0.5 logits that halve daily.
    """

    seed: int
    start: datetime
    history_days: int
    stream_days: int
    rows_per_day: int
    users: int
    items: int
    latent_dim: int = 8
    drift: float = 0.15
    new_users_per_day: float = 0.03
    new_items_per_day: float = 0.03
    seasonality: float = 0.5
    label_delay_s: float = 0.0
    zipf_exponent: float = 1.0
    base_logit: float = -3.0
    affinity_scale: float = 1.5
    price_null_rate: float = 0.01
    item_lifecycle: bool = True
    novelty: float = 1.0
    novelty_half_life_days: float = 2.0
    trend_std: float = 0.5
    trend_half_life_days: float = 1.0

    def __post_init__(self) -> None:
        start = self.start
        start = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
        object.__setattr__(self, "start", start)
        problems = []
        if start != start.replace(hour=0, minute=0, second=0, microsecond=0):
            problems.append(f"start must be a UTC midnight, got {start.isoformat()}")
        if self.seed < 0:
            problems.append(f"seed must be >= 0, got {self.seed}")
        if self.history_days < 1 or self.stream_days < 0:
            problems.append("history_days must be >= 1 and stream_days >= 0")
        for name in ("rows_per_day", "users", "items", "latent_dim"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.drift < 1.0:
            problems.append(
                f"drift must be in [0, 1) (a daily std against a unit variance), got {self.drift}"
            )
        if not 0.0 <= self.seasonality < 1.0:
            problems.append(
                f"seasonality must be in [0, 1) (traffic must stay positive), got {self.seasonality}"
            )
        if not 0.0 <= self.price_null_rate <= 1.0:
            problems.append(f"price_null_rate must be in [0, 1], got {self.price_null_rate}")
        for name in (
            "new_users_per_day",
            "new_items_per_day",
            "label_delay_s",
            "zipf_exponent",
            "novelty",
            "trend_std",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                problems.append(f"{name} must be a finite number >= 0, got {value}")
        for name in ("base_logit", "affinity_scale"):
            if not math.isfinite(getattr(self, name)):
                problems.append(f"{name} must be finite, got {getattr(self, name)}")
        for name in ("novelty_half_life_days", "trend_half_life_days"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                problems.append(f"{name} must be a finite number > 0, got {value}")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_defaults(cls, **overrides: Any) -> World:
        """The demo world (20 history days, 3 stream days, 20k rows/day, 20k users, 5k items) with
        any field overridden; unknown names are an error rather than silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown World field(s): {', '.join(unknown)}")
        params: dict[str, Any] = {
            "seed": 0,
            "start": datetime(2026, 1, 1, tzinfo=UTC),
            "history_days": 20,
            "stream_days": 3,
            "rows_per_day": 20_000,
            "users": 20_000,
            "items": 5_000,
        }
        params.update(overrides)
        return cls(**params)

    @property
    def days(self) -> int:
        return self.history_days + self.stream_days

    @property
    def new_users_daily(self) -> int:
        return round(self.new_users_per_day * self.users)

    @property
    def new_items_daily(self) -> int:
        return round(self.new_items_per_day * self.items)

    def day_start(self, day: int) -> datetime:
        return self.start + timedelta(days=day)

    def users_on(self, day: int) -> int:
        """Users that exist on ``day`` (IDs ``0 .. users_on(day)-1``)."""
        return self.users + day * self.new_users_daily

    def items_on(self, day: int) -> int:
        return self.items + day * self.new_items_daily


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class _State:
    """The world at the start of ``day``. Never mutated: cached states are shared between callers."""

    day: int
    user_vec: FloatArray
    user_weight: FloatArray
    impressions: IntArray  # per user, before ``day``
    item_vec: FloatArray
    item_pop: FloatArray
    item_bias: FloatArray
    item_price: npt.NDArray[np.float32]
    item_birth: IntArray  # the day each item was born (< 0 for day 0's items)
    item_trend: FloatArray  # the trending shock, an AR(1) per item


def _rng(world: World, day: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(world.seed, spawn_key=(day, purpose)))


def _born(world: World, day: int, n_users: int, n_items: int) -> dict[str, Any]:
    rng = _rng(world, day, _BIRTHS)
    k = world.latent_dim
    log_price = rng.normal(_LOG_PRICE_MEAN, _LOG_PRICE_STD, n_items)
    price = np.maximum(np.round(np.exp(log_price), 2), 0.01).astype(np.float32)
    z_price = (log_price - _LOG_PRICE_MEAN) / _LOG_PRICE_STD
    return {
        "user_vec": rng.standard_normal((n_users, k)),
        "user_weight": np.exp(rng.normal(0.0, _USER_WEIGHT_SIGMA, n_users)),
        "item_vec": rng.standard_normal((n_items, k)),
        "item_pop": rng.standard_normal(n_items),
        "item_bias": rng.normal(0.0, _ITEM_BIAS_STD, n_items) - _PRICE_EFFECT * z_price,
        "item_price": price,
    }


def _trend_keep(world: World) -> float:
    return float(0.5 ** (1.0 / world.trend_half_life_days))


def _initial(world: World) -> _State:
    b = _born(world, 0, world.users, world.items)
    # Day 0's items were born at the world's constant rate before it, so their ages are spread over the
    # days that rate took to make them: the world starts in its steady state, not with every item new.
    rng = _rng(world, 0, _LIFECYCLE)
    span = world.items / max(world.new_items_daily, 1)
    birth = -np.floor(rng.uniform(0.0, span, world.items)).astype(np.int64)
    trend = world.trend_std * rng.standard_normal(world.items)
    return _State(day=0, impressions=np.zeros(world.users, np.int64), item_birth=birth, item_trend=trend, **b)


def _heat(world: World, state: _State) -> FloatArray:
    """Each item's lifecycle on ``state.day``, in logits: a novelty that halves every
    ``novelty_half_life_days`` of age, plus the trending shock. Zero in a stationary world."""
    if not world.item_lifecycle:
        return np.zeros(len(state.item_pop))
    age = (state.day - state.item_birth).astype(np.float64)
    heat: FloatArray = world.novelty * 0.5 ** (age / world.novelty_half_life_days) + state.item_trend
    return heat


def _sample_users(world: World, state: _State) -> IntArray:
    p = state.user_weight / state.user_weight.sum()
    users: IntArray = _rng(world, state.day, _USERS).choice(len(p), size=world.rows_per_day, p=p)
    return users.astype(np.int64)


def _advance(world: World, state: _State) -> _State:
    """One day of the walk: count the day's impressions, step every vector, add the day's births."""
    day = state.day + 1
    seen = np.bincount(_sample_users(world, state), minlength=len(state.impressions))
    rng = _rng(world, day, _WALK)
    keep = math.sqrt(1.0 - world.drift**2)

    def step(x: FloatArray) -> FloatArray:
        out: FloatArray = keep * x + world.drift * rng.standard_normal(x.shape)
        return out

    user_vec, item_vec, item_pop = step(state.user_vec), step(state.item_vec), step(state.item_pop)
    b = _born(world, day, world.new_users_daily, world.new_items_daily)
    # Its own generator stream: the lifecycle never shifts the numbers of the stationary world.
    life = _rng(world, day, _LIFECYCLE)
    trend_keep = _trend_keep(world)
    trend = trend_keep * state.item_trend + math.sqrt(1.0 - trend_keep**2) * world.trend_std * (
        life.standard_normal(len(state.item_trend))
    )
    new_trend = world.trend_std * life.standard_normal(world.new_items_daily)
    return _State(
        day=day,
        user_vec=np.concatenate([user_vec, b["user_vec"]]),
        user_weight=np.concatenate([state.user_weight, b["user_weight"]]),
        impressions=np.concatenate([state.impressions + seen, np.zeros(len(b["user_weight"]), np.int64)]),
        item_vec=np.concatenate([item_vec, b["item_vec"]]),
        item_pop=np.concatenate([item_pop, b["item_pop"]]),
        item_bias=np.concatenate([state.item_bias, b["item_bias"]]),
        item_price=np.concatenate([state.item_price, b["item_price"]]),
        item_birth=np.concatenate([state.item_birth, np.full(world.new_items_daily, day, np.int64)]),
        item_trend=np.concatenate([trend, new_trend]),
    )


_CACHE_LOCK = threading.Lock()
_CACHE: OrderedDict[World, _State] = OrderedDict()
_CACHE_WORLDS = 4


def _state(world: World, day: int) -> _State:
    if not 0 <= day < world.days:
        raise ValueError(f"day must be in [0, {world.days}), got {day}")
    with _CACHE_LOCK:
        cached = _CACHE.get(world)
        state = cached if cached is not None and cached.day <= day else _initial(world)
        while state.day < day:
            state = _advance(world, state)
        _CACHE[world] = state
        _CACHE.move_to_end(world)
        while len(_CACHE) > _CACHE_WORLDS:
            _CACHE.popitem(last=False)
        return state


def live_start(days: int, now: datetime | None = None) -> datetime:
    """Day 0 of a ``days``-day world whose last day is today (UTC), so its stream is live data.

    A fixed start dates the whole log: months or years after it, every event is old, and training
    that tells a backfill from live data by the age of its events (``clock: auto``) sees a backfill.
    Days are UTC midnights (the history's daily partitions and the ``hour`` feature depend on it), so
    "live" is the closest a day-aligned world gets: the stream's newest events are the rest of today,
    the part already past is minutes to hours old and the rest lies ahead, by less than a day (the
    topic holds what a live stream will have held by midnight)."""
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    now = datetime.now(UTC) if now is None else now
    now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)  # naive: UTC
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days - 1)


def user_vectors(world: World, day: int) -> FloatArray:
    """Users' interest vectors on ``day``, row = user ID: the ground truth drift is measured against."""
    return _state(world, day).user_vec.copy()


def item_vectors(world: World, day: int) -> FloatArray:
    return _state(world, day).item_vec.copy()


def _within_group_rank(keys: IntArray) -> IntArray:
    """For each position, how many earlier positions hold the same key (a vectorised cumcount)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    idx = np.arange(len(keys))
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    first = np.maximum.accumulate(np.where(starts, idx, 0))
    rank = np.empty(len(keys), np.int64)
    rank[order] = idx - first
    return rank


def generate_day(world: World, day: int) -> pa.Table:
    """Day ``day``'s impressions, sorted by ``ts``, with the columns of :data:`SCHEMA`."""
    state = _state(world, day)
    n, k = world.rows_per_day, world.latent_dim
    users = _sample_users(world, state)
    rng = _rng(world, day, _ROWS)
    heat = _heat(world, state)
    score = state.item_pop + heat if world.item_lifecycle else state.item_pop
    rank = np.empty(len(score), np.int64)
    rank[np.argsort(-score, kind="stable")] = np.arange(len(score))
    item_w = (rank + 1.0) ** -world.zipf_exponent
    items = rng.choice(len(item_w), size=n, p=item_w / item_w.sum()).astype(np.int64)
    season = np.cos(2 * np.pi * (np.arange(24) - _PEAK_HOUR) / 24)
    hour_w = 1.0 + world.seasonality * season
    hours = rng.choice(24, size=n, p=hour_w / hour_w.sum()).astype(np.int64)
    ts_ms = (
        int(world.day_start(day).timestamp() * 1000) + hours * _MS_PER_HOUR + rng.integers(0, _MS_PER_HOUR, n)
    )
    order = np.argsort(ts_ms, kind="stable")
    users, items, hours, ts_ms = users[order], items[order], hours[order], ts_ms[order]

    affinity = np.einsum("ij,ij->i", state.user_vec[users], state.item_vec[items]) / math.sqrt(k)
    logit = world.base_logit + world.affinity_scale * affinity + state.item_bias[items]
    if world.item_lifecycle:
        logit += heat[items]
    logit += world.seasonality * season[hours]
    clicked = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    price_missing = rng.random(n) < world.price_null_rate
    activity = np.log1p(state.impressions[users] + _within_group_rank(users)).astype(np.float32)
    return pa.Table.from_arrays(
        [
            pa.array(day * n + np.arange(n, dtype=np.int64)),
            pa.array(users),
            pa.array(items),
            pa.array(hours),
            pa.array(activity),
            pa.array(state.item_price[items], mask=price_missing),
            pa.array(clicked),
            pa.array(ts_ms * 1000, pa.int64()).cast(SCHEMA.field("ts").type),
        ],
        schema=SCHEMA,
    )
