"""``primus jobs``, ``savepoint``, ``suspend``, ``resume``, ``resize``, ``window``: the control API's
verbs as the commands an operator expects, beside ``status``, ``events``, ``scale`` and ``stop``
(cli/jobs.py).

Each talks to the job's master through its control API (the job token read from the job's home or
its Secret), prints one JSON object, and exits 1 with the master's reason when it refuses.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from airflow_provider_primus.cli.jobs import _backend, _client, _job_name, _store_arg

__all__ = ["register"]


def register(sub: Any) -> None:
    jobs = sub.add_parser(
        "jobs",
        help="list jobs",
        description="List the jobs in the store (or a namespace): name, phase, executors, rows, age.",
    )
    jobs.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE: only jobs with it (repeatable)"
    )
    jobs.add_argument("--phase", action="append", default=[], help="only jobs in this phase (repeatable)")
    jobs.add_argument("--json", action="store_true", help="one JSON object per job, per line")
    _store_arg(jobs)
    jobs.set_defaults(handler=cmd_jobs)

    savepoint = sub.add_parser(
        "savepoint",
        help="ask the trainer for a checkpoint now",
        description="Request a savepoint: the trainer's next checkpoint covers it; --wait until it is "
        "durable (the status's savepoints entry says which checkpoint).",
    )
    savepoint.add_argument("job", help="job name (or its document)")
    savepoint.add_argument("--id", help="an id for the savepoint (default: generated)")
    savepoint.add_argument("--wait", type=float, metavar="SECONDS", help="wait this long for it to be done")
    _store_arg(savepoint)
    savepoint.set_defaults(handler=cmd_savepoint)

    for verb, text in (("suspend", "stop the job's executors, keeping its state"), ("resume", "resume it")):
        p = sub.add_parser(verb, help=text, description=f"Ask the job's master to {text}.")
        p.add_argument("job", help="job name (or its document)")
        _store_arg(p)
        p.set_defaults(handler=cmd_suspend if verb == "suspend" else cmd_resume)

    resize = sub.add_parser(
        "resize",
        help="change the CPU and/or memory of running executors in place",
        description="Resize every running executor of --role (or one --executor) in place: CPU in cores "
        "or millicores (1.5, 500m), memory as a quantity (2Gi, 512Mi).",
    )
    resize.add_argument("job", help="job name (or its document)")
    target = resize.add_mutually_exclusive_group(required=True)
    target.add_argument("--role", choices=("data", "trainer", "evaluator"))
    target.add_argument("--executor", help="one executor by name (data-0, trainer-0, ...)")
    resize.add_argument("--cpu", help="cores (1.5) or millicores (500m)")
    resize.add_argument("--memory", help="bytes or a quantity (2Gi)")
    _store_arg(resize)
    resize.set_defaults(handler=cmd_resize)

    window = sub.add_parser(
        "window",
        help="append a historical window of a files source to a running job",
        description="Append [--start, --end) of one files source to a running job (the same window "
        "twice is kept once); --wait until every task of it is consumed.",
    )
    window.add_argument("job", help="job name (or its document)")
    window.add_argument("--start", required=True, help="ISO 8601 start")
    window.add_argument("--end", required=True, help="ISO 8601 end, exclusive")
    window.add_argument(
        "--source", help="the files source it belongs to (may be left out when the data has one)"
    )
    window.add_argument("--wait", type=float, metavar="SECONDS", help="wait this long for it to be consumed")
    _store_arg(window)
    window.set_defaults(handler=cmd_window)


def _fail(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 1


def _labels(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --label wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _row(record: Any) -> dict[str, Any]:
    status = record.status
    executors = status.get("executors") or {}
    return {
        "name": record.name,
        "phase": status.get("phase", "Pending"),
        "running": sum(1 for e in executors.values() if e.get("state") == "running"),
        "acked_rows": (status.get("progress") or {}).get("acked_rows", 0),
        "labels": dict(record.labels),
        "message": status.get("message"),
    }


def cmd_jobs(args: argparse.Namespace) -> int:
    records = _backend(args).store.find(_labels(args.label) or None)
    rows = [_row(r) for r in sorted(records, key=lambda r: r.name)]
    if args.phase:
        rows = [r for r in rows if r["phase"] in args.phase]
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    print(f"{'NAME':<28} {'PHASE':<10} {'RUNNING':>7} {'ROWS':>12}  LABELS")
    for row in rows:
        labels = ",".join(f"{k}={v}" for k, v in sorted(row["labels"].items()))
        print(f"{row['name']:<28} {row['phase']:<10} {row['running']:>7} {row['acked_rows']:>12}  {labels}")
    return 0


def cmd_savepoint(args: argparse.Namespace) -> int:
    backend, name = _backend(args), _job_name(args.job)
    store = backend.store
    try:
        result = _client(backend, name).savepoint(args.id)
    except Exception as exc:
        return _fail(exc)
    if args.wait:
        from airflow_provider_primus.master.jobs import wait_for

        sid = str((result.get("request") or {}).get("savepoint"))
        try:
            record = wait_for(
                store,
                name,
                lambda r: (
                    ((r.status.get("savepoints") or {}).get(sid) or {}).get("state") in ("done", "failed")
                ),
                args.wait,
            )
        except TimeoutError as exc:
            return _fail(exc)
        result = {"id": sid, **record.status["savepoints"][sid]}
        if result["state"] == "failed":
            print(json.dumps(result))
            return 1
    print(json.dumps(result))
    return 0


def cmd_suspend(args: argparse.Namespace) -> int:
    try:
        print(json.dumps(_client(_backend(args), _job_name(args.job)).suspend()))
    except Exception as exc:
        return _fail(exc)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    try:
        print(json.dumps(_client(_backend(args), _job_name(args.job)).resume()))
    except Exception as exc:
        return _fail(exc)
    return 0


def cmd_resize(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.job import parse_cpu, parse_memory

    if args.cpu is None and args.memory is None:
        return _fail(ValueError("give --cpu, --memory or both"))
    try:
        cpu = None if args.cpu is None else parse_cpu(args.cpu)
        memory = None if args.memory is None else parse_memory(args.memory)
    except (TypeError, ValueError) as exc:
        return _fail(exc)
    backend, name = _backend(args), _job_name(args.job)
    store = backend.store
    try:
        executors = store.get(name).status.get("executors") or {}
        if args.executor:
            targets = [args.executor]
        else:
            targets = sorted(
                n
                for n, e in executors.items()
                if e.get("state") == "running" and (e.get("handle") or {}).get("role") == args.role
            )
        if not targets:
            return _fail(RuntimeError(f"job {name!r} has no running {args.role} executor"))
        client = _client(backend, name)
        results = {t: client.resize(t, cpu=cpu, memory=memory) for t in targets}
    except Exception as exc:
        return _fail(exc)
    print(json.dumps({"job": name, "resized": results}))
    return 0


def cmd_window(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.data import Window
    from airflow_provider_primus.master.jobs import wait_for

    try:  # as the master records them (UTC, ISO 8601), so the wait finds the window
        span = Window.model_validate({"start": args.start, "end": args.end})
    except ValueError as exc:
        return _fail(exc)
    start, end = span.start.isoformat(), span.end.isoformat()
    backend, name = _backend(args), _job_name(args.job)
    store = backend.store
    try:
        result = _client(backend, name).append_window(start, end, args.source)
    except Exception as exc:
        return _fail(exc)
    sent = dict((result.get("request") or {}).get("window") or {})
    if args.wait:

        def found(record: Any) -> dict[str, Any] | None:
            for w in record.status.get("windows") or []:
                if (w["start"], w["end"], w.get("source")) == (start, end, sent.get("source")):
                    return dict(w)
            return None

        def settled(record: Any) -> bool:
            w = found(record)
            return w is not None and (bool(w.get("consumed")) or w.get("state") == "refused")

        try:
            window = found(wait_for(store, name, settled, args.wait)) or {}
        except TimeoutError as exc:
            return _fail(exc)
        window.pop("task_ids", None)
        print(json.dumps(window))
        return 1 if window.get("state") == "refused" else 0
    print(json.dumps(result))
    return 0
