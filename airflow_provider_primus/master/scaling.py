"""Scaling: applies manual requests and the autoscaler's decisions, and converges replicas.

Desired replicas per role live here; manual requests (the control API, the Kubernetes scale
subresource) and the autoscaler's decisions change them, and ``converge`` launches or removes
executors until what runs matches. Resizes (manual or decided) change a running executor's
allotment in place through the backend.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_primus.contracts.job import PrimusJob, parse_cpu, parse_memory
from airflow_provider_primus.contracts.status import Desired, EventType, JobStatus, ResizeWant
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import COMPLETED, REMOVING, RUNNING, Executors
from airflow_provider_primus.master.store import JobStore, modify
from airflow_provider_primus.resources.autoscaler import Decision, RoleView, decide
from airflow_provider_primus.resources.backend import Allotment
from airflow_provider_primus.resources.telemetry import Sample

__all__ = ["Scaling"]

DECISIONS_KEPT = 50


class Scaling:
    def __init__(
        self,
        job: PrimusJob,
        executors: Executors,
        events: EventLog,
        *,
        applied: dict[str, Any],
        previous: JobStatus,
    ) -> None:
        """``applied`` is the master's record of requests already acted on (shared, persisted with
        the status); ``previous`` the status a restarted master found."""
        self.job, self.executors, self.events, self.applied = job, executors, events, applied
        spec = job.spec
        self.replicas: dict[str, int] = dict(previous.replicas)
        self.replicas.setdefault("data", spec.roles.data.replicas.start)
        self.replicas.setdefault("trainer", spec.roles.trainer.replicas.start)
        self.decisions: list[Decision] = [Decision.from_dict(d.model_dump()) for d in previous.decisions]
        self._warm_since: float | None = None

    # --- requests ----------------------------------------------------------------------------------

    def apply_requests(self, desired: Desired) -> None:
        gen = desired.scale_gen
        scale = dict(desired.scale)
        # A request through the control API bumps scale_gen; the Kubernetes scale subresource
        # (kubectl scale, an HPA) only writes scale.data, so a changed value counts as a request too.
        requested = gen > int(self.applied.get("scale_gen", 0))
        if requested or scale != self.applied.get("scale", {}):
            for role, replicas in scale.items():
                changed = replicas != self.applied.get("scale", {}).get(role)
                if requested or (changed and replicas != self.replicas.get(role)):
                    self.manual_scale(role, replicas)
            self.applied["scale_gen"] = gen
            self.applied["scale"] = scale
        gen = desired.resize_gen
        if gen > int(self.applied.get("resize_gen", 0)):
            for name, want in desired.resize.items():
                self.manual_resize(name, want)
            self.applied["resize_gen"] = gen

    def manual_scale(self, role: str, replicas: int) -> None:
        spec_role = self.job.spec.roles.get(role)
        if spec_role is None or role not in self.replicas:
            self.events.emit(EventType.SCALE_REFUSED, f"role {role!r} cannot be scaled horizontally")
            return
        lo, hi = spec_role.replicas.min, spec_role.replicas.top
        clamped = max(lo, min(hi, replicas))
        note = "" if clamped == replicas else f" (clamped to [{lo}, {hi}])"
        if role == "trainer":  # the trainer group regroups at its next checkpoint (master/trainers.py)
            note += " at the next checkpoint"
        self.events.emit(
            EventType.SCALE_REQUESTED,
            f"{role}: {self.replicas.get(role)} -> {clamped} replicas{note}",
            data={"manual": True},
        )
        self.replicas[role] = clamped

    def manual_resize(self, name: str, want: ResizeWant) -> None:
        ex = self.executors.all.get(name)
        if ex is None or ex.state != RUNNING:
            self.events.emit(EventType.RESIZE_REFUSED, f"no running executor {name!r}")
            return
        a = ex.handle.allotment
        try:  # a request written to the job by hand (kubectl patch) may say "512Mi" or "500m"
            cpu = parse_cpu(want.cpu) if want.cpu else a.cpu
            memory = parse_memory(want.memory) if want.memory else a.memory
        except ValueError as exc:
            self.events.emit(EventType.RESIZE_REFUSED, f"{name}: cannot resize: {exc}", name)
            return
        new = Allotment(cpu, memory)
        if new != a:
            self.executors.resize(ex, new)  # samples carry the allotment: a new regime
            if ex.handle.allotment != new:
                return  # the backend kept the old allotment and said why (its ResizeRefused event)
            self.events.emit(
                EventType.RESIZED,
                f"{name}: cpu {a.cpu:g} -> {new.cpu:g}, "
                f"memory {a.memory // 2**20} -> {new.memory // 2**20} MiB",
                name,
                {"manual": True, "cpu": new.cpu, "memory": new.memory},
            )

    def publish(self, store: JobStore, name: str) -> None:
        """Kubernetes: ``spec.desired.scale.data`` follows the master's own decisions (autoscaler,
        clamping), so ``kubectl scale`` and an HPA read the current target through the scale
        subresource. A person's request not yet applied is never overwritten."""
        if store.kind != "kubernetes":
            return
        want, applied = self.replicas["data"], dict(self.applied.get("scale") or {})
        if applied.get("data") == want:
            return

        def change(record: Any) -> dict[str, Any]:
            desired = dict(record.desired)
            scale = dict(desired.get("scale") or {})
            if scale.get("data") == applied.get("data"):
                desired["scale"] = {**scale, "data": want}
            return desired

        scale = modify(store, name, change).job_desired.scale
        if scale.get("data") == want:
            self.applied["scale"] = dict(scale)

    # --- the autoscaler ----------------------------------------------------------------------------

    def autoscale(self, samples: Sequence[Sample]) -> None:
        policy = self.job.spec.scaling
        if not policy.enabled:
            return
        roles = {}
        for name in ("data", "trainer"):
            role = self.executors.role(name)
            res = role.resources
            roles[name] = RoleView(
                name=name,
                replicas=len(self.executors.running(name)),
                min_replicas=role.replicas.min,
                max_replicas=role.replicas.top,
                cpu_range=res.cpu_range,
                memory_range=res.memory_range,
                initial_cpu=res.cpu,
                initial_memory=res.memory,
            )
        now = time.monotonic()
        # Judge nothing until the trainers consume: before that every data executor looks idle
        # (blocked on credit) and every trainer starved, which says nothing about their sizes.
        trainers = self.executors.running("trainer")
        latest = {s.executor: s for s in samples}
        if not trainers or any(latest.get(t.name) is None or latest[t.name].rows <= 0 for t in trainers):
            self._warm_since = None
            return
        if self._warm_since is None:
            self._warm_since = now
        # An executor is judged from its first row on: start-up (imports, registration) is neither
        # saturation nor idleness.
        serving: dict[str, float] = {}
        for s in samples:
            if s.rows > 0 and s.executor not in serving:
                serving[s.executor] = s.t
        window = [s for s in samples if s.t >= max(self._warm_since, serving.get(s.executor, float("inf")))]
        for d in decide(window, roles, policy, now, self.decisions):
            self.decisions.append(d)
            del self.decisions[:-DECISIONS_KEPT]
            self.events.emit(EventType.SCALE_DECISION, d.reason, d.executor, d.to_dict())
            self._act(d)

    def _act(self, d: Decision) -> None:
        if d.action in ("scale_out", "scale_in"):
            self.replicas[d.role] = int(d.after)
            victim = self.executors.all.get(d.executor or "")
            if d.action == "scale_in" and victim is not None and victim.state == RUNNING:
                self.executors.remove(victim)
            return
        ex = self.executors.all.get(d.executor or "")
        if ex is None or ex.state != RUNNING:
            return
        a = ex.handle.allotment
        self.executors.resize(
            ex, Allotment(d.after, a.memory) if d.action == "resize_cpu" else Allotment(a.cpu, int(d.after))
        )

    # --- convergence -------------------------------------------------------------------------------

    def converge(self, *, data_done: bool) -> None:
        """Launch or remove executors until each role runs its desired replicas. ``data_done``: the
        data pass is over (or there is none), so no new data executors are started."""
        trainer_done = any(e.state == COMPLETED for e in self.executors.all.values() if e.role == "trainer")
        for role in ("data",):  # the trainers are one group: master/trainers.py converges them
            want = self.replicas[role]
            running = self.executors.running(role)
            if data_done or trainer_done:
                want = len(running)  # no new data executors once the pass is over
            spec_role = self.executors.role(role)
            used = {
                e.handle.index
                for e in self.executors.all.values()
                if e.role == role and e.state in (RUNNING, REMOVING)
            }
            free = (i for i in range(want + len(used) + 1) if i not in used)
            indexes = [next(free) for _ in range(want - len(running))]
            allotment = Allotment(spec_role.resources.cpu, spec_role.resources.memory)
            self.executors.launch_all(role, indexes, allotment)
            if len(running) > want:
                for victim in sorted(running, key=lambda e: -e.handle.index)[: len(running) - want]:
                    self.executors.remove(victim)

    def roles_summary(self) -> str:
        """``data 3/3, trainer 1/1``: running of wanted, for ``kubectl get primusjobs``."""
        return ", ".join(
            f"{role} {len(self.executors.running(role))}/{want}"
            for role, want in sorted(self.replicas.items())
        )
