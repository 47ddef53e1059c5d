"""The job commands: ``primus run | submit | status | events | scale | stop | master``.

``run`` and ``submit`` take a PrimusJob document; the others take a job name (or the document, whose
``metadata.name`` is used). Reads come from the job store; changes go through the master's
authenticated control API, like the Airflow hook's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

EXIT = {"Succeeded": 0, "Failed": 1, "Stopped": 3}


def _store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=Path, help="the job store (default: $PRIMUS_HOME/jobs.sqlite)")
    kube = parser.add_argument_group(
        "Kubernetes", "jobs as PrimusJob resources in a cluster (given --namespace or --kubeconfig)"
    )
    kube.add_argument("--namespace", "-n", help="the namespace of the PrimusJob resources")
    kube.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)"
    )
    kube.add_argument("--context", help="kubeconfig context")


def _kube_api(place: Any) -> Any:
    from airflow_provider_primus.kubernetes.client import KubeApi, api_client_from

    try:
        return KubeApi(api_client_from(kubeconfig=place.kubeconfig, context=place.context))
    except Exception as exc:  # no kubeconfig, unknown context, not in a cluster
        print(f"error: no Kubernetes configuration ({exc}); pass --kubeconfig/--context", file=sys.stderr)
        raise SystemExit(2) from None


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a PrimusJob with its master in the foreground (live status line)",
        description="Submit the job (unless a job of that name exists and has not ended: then its master "
        "is restarted and re-adopts the running executors) and run its master in this process until the "
        "job ends. Exit code 0: succeeded, 1: failed, 3: stopped.",
    )
    run.add_argument("job", type=Path, help="the PrimusJob document (YAML or JSON)")
    run.add_argument("--replace", action="store_true", help="delete an ended job of the same name first")
    run.add_argument("--quiet", action="store_true", help="no live status line")
    run.add_argument(
        "--json",
        action="store_true",
        help="only the final JSON line: no progress, no status lines on a terminal",
    )
    _store_arg(run)
    run.set_defaults(handler=cmd_run)

    submit = sub.add_parser(
        "submit",
        help="submit a PrimusJob and start its master in the background",
        description="Validate the job and every document it references, store it and start its master as "
        "a background process (log: $PRIMUS_HOME/jobs/NAME/master.log). Prints the job name.",
    )
    submit.add_argument("job", type=Path, help="the PrimusJob document (YAML or JSON)")
    submit.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE label for lookups (repeatable)"
    )
    submit.add_argument("--replace", action="store_true", help="delete an ended job of the same name first")
    _store_arg(submit)
    submit.set_defaults(handler=cmd_submit)

    status = sub.add_parser("status", help="print a job's status", description="Print the job's status.")
    status.add_argument("job", help="job name (or its document)")
    status.add_argument("--json", action="store_true", help="the whole status object as JSON")
    _store_arg(status)
    status.set_defaults(handler=cmd_status)

    events = sub.add_parser("events", help="print a job's events", description="Print the job's events.")
    events.add_argument("job", help="job name (or its document)")
    events.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new events until the job ends"
    )
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    _store_arg(events)
    events.set_defaults(handler=cmd_events)

    scale = sub.add_parser(
        "scale",
        help="set a role's executor count (manual scaling)",
        description="Ask the job's master to run REPLICAS executors of ROLE (clamped to the role's bounds). "
        "Trainers are one data-parallel group: they stop at their next checkpoint and resume from it "
        "as REPLICAS trainers.",
    )
    scale.add_argument("job", help="job name (or its document)")
    scale.add_argument("--role", required=True, choices=("data", "trainer", "evaluator"))
    scale.add_argument("--replicas", type=int, required=True)
    _store_arg(scale)
    scale.set_defaults(handler=cmd_scale)

    stop = sub.add_parser("stop", help="stop a job", description="Ask the job's master to stop the job.")
    stop.add_argument("job", help="job name (or its document)")
    stop.add_argument("--wait", action="store_true", help="wait until the job has stopped")
    _store_arg(stop)
    stop.set_defaults(handler=cmd_stop)

    master = sub.add_parser(
        "master",
        help="run the master of a submitted job (what submit starts)",
        description="Run the master of an already submitted job in the foreground.",
    )
    master.add_argument("name", help="job name")
    _store_arg(master)
    master.set_defaults(handler=cmd_master)


def _backend(args: argparse.Namespace) -> Any:
    """Where the command's jobs live (``backends.for_document``: the flags, else the document's own
    cluster, else the local store); its store is opened here."""
    from airflow_provider_primus.backends import for_document

    job = getattr(args, "job", None)
    backend = for_document(
        Path(str(job)) if job else None,
        store_path=args.store,
        namespace=getattr(args, "namespace", None),
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        kube_api=_kube_api,
    )
    backend.store  # noqa: B018 (opened now: a cluster without configuration fails the command here)
    return backend


def _job_name(arg: str) -> str:
    path = Path(arg)
    if path.suffix.lower() in (".yaml", ".yml", ".json") and path.is_file():
        from airflow_provider_primus.contracts.loader import read_document

        return str(read_document(path).get("metadata", {}).get("name", arg))
    return arg


def _client(backend: Any, name: str) -> Any:
    from airflow_provider_primus.master.client import ControlClient

    api = (backend.store.get(name).status.get("master") or {}).get("api")
    if not api:
        raise RuntimeError(f"job {name!r} has no running master")
    token, ca = backend.credentials(name)
    return ControlClient(api, token, ca=ca)


def _submit(args: argparse.Namespace, backend: Any, labels: dict[str, str] | None = None) -> tuple[str, bool]:
    """Returns (name, fresh); an unfinished job of the same name is reused (master restart)."""
    from airflow_provider_primus.contracts.loader import read_document
    from airflow_provider_primus.contracts.status import TERMINAL
    from airflow_provider_primus.master.jobs import load_job, submit
    from airflow_provider_primus.master.store import JobNotFound

    store = backend.store
    document = read_document(args.job)
    _, stored = load_job(document, args.job.resolve().parent, backend.store_kind)
    name = str(stored["metadata"]["name"])
    try:
        existing = store.get(name)
    except JobNotFound:
        existing = None
    if existing is not None:
        if existing.status.get("phase") in TERMINAL:
            if not args.replace:
                raise RuntimeError(
                    f"job {name!r} already ran ({existing.status['phase']}); pass --replace to run it again"
                )
            store.delete(name)
        elif existing.spec != stored:
            raise RuntimeError(
                f"job {name!r} is still {existing.status.get('phase', 'Pending')} with a different "
                "spec; stop it first (`primus stop`) or give this one another name"
            )
        else:
            return name, False
    submit(args.job, store=store, labels=labels)
    return name, True


def _line(status: dict[str, Any]) -> str:
    p = status.get("progress", {})
    ex = status.get("executors", {})
    running = sum(1 for e in ex.values() if e["state"] == "running")
    return (
        f"{status.get('phase')}: {running} executors, data {p.get('tasks_done')}/{p.get('tasks')} tasks, "
        f"{p.get('acked_rows')} rows acked, trainer step {p.get('trainer_step')}"
    )


def cmd_run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.cli.progress import Bar, chatty, on_terminal
    from airflow_provider_primus.contracts import SpecError
    from airflow_provider_primus.master.master import MasterError

    backend = _backend(args)
    store = backend.store
    lines = not args.quiet and chatty(args.json)
    try:
        name, fresh = _submit(args, backend)
        bar = Bar(f"job {name}", enabled=on_terminal(args.json, disabled=args.quiet))
        last = [0.0]

        def show(status: dict[str, Any]) -> None:
            if bar.enabled:
                p = status.get("progress", {})
                bar.update(completed=p.get("tasks_done") or 0, total=p.get("tasks"), detail=_line(status))
            elif lines and time.monotonic() - last[0] >= 2.0:
                print(_line(status), file=sys.stderr, flush=True)
                last[0] = time.monotonic()

        master = backend.for_job(name).master(name, on_status=show)
    except (SpecError, MasterError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if chatty(args.json):
        print(
            f"job {name}: {'submitted' if fresh else 'master restarted'}; control API {master.api.url}",
            file=sys.stderr,
        )
    try:
        with bar:
            phase = master.run()
    except KeyboardInterrupt:
        print(
            "interrupted: the job's executors keep running; `primus run` again re-adopts them",
            file=sys.stderr,
        )
        return 130
    status = store.get(name).status
    print(
        json.dumps(
            {
                "job": name,
                "phase": phase,
                "message": status.get("message"),
                "progress": status.get("progress"),
            }
        )
    )
    return EXIT.get(phase, 1)


def cmd_submit(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts import SpecError
    from airflow_provider_primus.contracts.status import TERMINAL
    from airflow_provider_primus.master.jobs import job_paths, wait_for

    backend = _backend(args)
    store = backend.store
    labels = dict(item.split("=", 1) for item in args.label if "=" in item)
    try:
        name, fresh = _submit(args, backend, labels)
    except (SpecError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pid = None
    if fresh or not (store.get(name).status.get("master") or {}).get("pid"):
        pid = backend.spawn_master(name)

    def settled(record: Any) -> bool:
        # Started, ended (a master that cannot plan the data fails the job at once), or gone.
        return bool(record.status.get("master")) or record.status.get("phase") in TERMINAL or not _alive(pid)

    try:
        wait_for(store, name, settled, timeout_s=60)
    except TimeoutError as exc:
        print(f"error: the master did not start: {exc}", file=sys.stderr)
        return 1
    record = store.get(name)  # read after the master's exit was seen: it wrote its status before
    phase = record.status.get("phase")
    if phase in TERMINAL:
        message = record.status.get("message") or "(no message)"
        print(f"error: job {name!r} {phase}: {message}", file=sys.stderr)
        return EXIT.get(phase, 1) or 1
    if not record.status.get("master"):
        log = job_paths(name).master_log
        tail = log.read_text(errors="replace").strip().splitlines()[-20:] if log.exists() else []
        print(
            f"error: the master exited without starting the job; the end of {log}:\n" + "\n".join(tail),
            file=sys.stderr,
        )
        return 1
    print(name)
    return 0


def _alive(pid: int | None) -> bool:
    """Whether the master we started still runs (None: none was started here, so assume so)."""
    if pid is None:
        return True
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cmd_status(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.status import TERMINAL
    from airflow_provider_primus.master.store import JobNotFound
    from airflow_provider_primus.master.store_health import read_note, stale_reason

    store, name = _backend(args).store, _job_name(args.job)
    try:
        status = store.get(name).status
    except JobNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status.pop("data_progress", None)
    stale = stale_reason(status, read_note(store, name), time.time())
    if args.json:
        print(json.dumps({**status, **({"stale": stale} if stale else {})}, sort_keys=True))
        return 0
    print(_line(status))
    if stale:
        print(f"  warning: {stale}")
    for name, ex in status.get("executors", {}).items():
        a = ex["handle"]["allotment"]
        t = ex.get("telemetry") or {}
        print(
            f"  {name:<12} {ex['state']:<9} pid {ex['handle']['ref'].get('pid')}  cpu {a['cpu']:g}  "
            f"mem {a['memory'] // 2**20} MiB  util {t.get('cpu_util', '-')}  "
            f"rss {t.get('rss', 0) // 2**20} MiB  "
            f"restarts {ex['restarts']}" + _enforcement(ex["handle"]["ref"])
        )
        if ex.get("error"):
            print(f"  {'':<12} last error: {ex['error']}")
    if status.get("message"):
        print(f"  message: {status['message']}")
    if (status.get("master") or {}).get("metrics") and status.get("phase") not in TERMINAL:
        print(f"  metrics: {status['master']['metrics']} (Prometheus; the job token as bearer)")
    return 0


def _enforcement(ref: dict[str, Any]) -> str:
    """How the backend holds an executor to its allotment (local: cgroup v1/v2 or the fallback)."""
    how = ref.get("enforcement")
    return f"  limits cpu:{how['cpu']} memory:{how['memory']}" if how else ""


def cmd_events(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.status import TERMINAL

    store = _backend(args).store
    name = _job_name(args.job)
    after = 0
    while True:
        for event in store.events(name, after):
            after = event.seq
            if args.json:
                print(json.dumps(event.to_dict()), flush=True)
            else:
                stamp = time.strftime("%H:%M:%S", time.localtime(event.t))
                who = f" [{event.executor}]" if event.executor else ""
                print(f"{stamp} {event.type}{who}: {event.message}", flush=True)
        if not args.follow or store.get(name).status.get("phase") in TERMINAL:
            return 0
        time.sleep(0.5)


def cmd_scale(args: argparse.Namespace) -> int:
    try:
        result = _client(_backend(args), _job_name(args.job)).scale(args.role, args.replicas)
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.status import TERMINAL
    from airflow_provider_primus.master.jobs import wait_for

    backend = _backend(args)
    name = _job_name(args.job)
    try:
        _client(backend, name).stop()
    except Exception as exc:  # no master answering: record the intent for its next start
        print(f"note: {exc}; the stop is recorded for the master's next start", file=sys.stderr)
        backend.request_stop_offline(name)
    if args.wait:
        wait_for(backend.store, name, lambda r: r.status.get("phase") in TERMINAL, timeout_s=120)
    print(json.dumps({"job": name, "stop": "requested"}))
    return 0


def cmd_master(args: argparse.Namespace) -> int:
    import logging

    from airflow_provider_primus.master.master import MasterError
    from airflow_provider_primus.master.publish import JobEndedError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        backend = _backend(args)
        master = backend.for_job(args.name).master(args.name)
    except JobEndedError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT.get(exc.phase, 1)  # the job's own outcome: a restarted driver pod ends as it did
    except MasterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    phase = master.run()
    return EXIT.get(phase, 1)
