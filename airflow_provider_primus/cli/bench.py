"""``primus bench …``: measured figures, printed as one JSON line per run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_primus.cli.args import count_of, positive_float
from airflow_provider_primus.cli.progress import Bar, bench_stages, on_terminal


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="run a benchmark and print one JSON line",
        description="Benchmarks (see docs/benchmarks.md).",
    )
    bsub = parser.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    p = bsub.add_parser(
        "plan",
        help="serial vs parallel vs incremental planning on a store with a per-call delay",
        description="Plan days x 2 sources x 24 hourly partitions x FILES Parquet files through a "
        "filesystem adding DELAY ms per listing/metadata call: serially, with the default planner, "
        "and incrementally after one more day; plus tasks/s on a local tree without delay.",
    )
    p.add_argument("--days", type=int, default=20)
    p.add_argument("--files", type=int, help="files per hourly partition (default 4; 40 with --sweep)")
    p.add_argument(
        "--delay-ms",
        type=positive_float("milliseconds"),
        default=20.0,
        help="per listing/metadata call, above 0",
    )
    p.add_argument("--local-files", type=int, default=100_000, help="0 skips the no-delay measurement")
    p.add_argument("--workdir", type=Path, help="where to generate the stores (default: system temp)")
    median = "; the median is reported"
    p.add_argument("--parallel-runs", type=count_of("runs"), default=3, help="default-planner runs" + median)
    p.add_argument("--incremental-runs", type=count_of("runs"), default=5, help="incremental runs" + median)
    p.add_argument(
        "--sweep",
        action="store_true",
        help="instead: days {5,20,60} x sources {1,2,8} x 24 hours x FILES (default 40 here) files, one "
        "process per point (plan time, I/O floor, round trips, peak RSS, tasks/s), then the largest "
        "point as an Iceberg table planned from its manifests",
    )
    p.add_argument("--no-iceberg", action="store_true", help="with --sweep: leave out the Iceberg point")
    p.set_defaults(handler=run_plan)

    d = bsub.add_parser(
        "dataplane",
        help="the data service end to end (1 and 2 executors) vs reading in the trainer's process",
        description="Generate a click-log Parquet store of ROWS rows, then read all of it to tensors "
        "(a) in this process, (b) through the dispatcher, one executor process and the loader, "
        "(c) the same with two executors, (d) with --store s3 (b) from a real object store, (e) with "
        "--tls (b) over TLS; rows/s, CPU per million rows and peak memory side by side.",
    )
    d.add_argument("--rows", type=int, default=5_000_000)
    d.add_argument("--files", type=int, help="Parquet files to generate (default: one per 500,000 rows)")
    d.add_argument("--batch-rows", type=int, default=8192, help="rows per tensor batch the trainer takes")
    d.add_argument(
        "--message-rows", type=int, default=32768, help="rows per Flight message an executor sends"
    )
    d.add_argument("--window", type=int, default=2, help="messages an executor reads ahead, at most")
    d.add_argument("--credits", type=int, default=2, help="messages in flight per executor stream")
    d.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds of the three variants; figures are medians"
    )
    d.add_argument("--workdir", type=Path, help="where to generate the store (default: system temp)")
    d.add_argument(
        "--store",
        choices=("local", "s3"),
        default="local",
        help="s3: also read the same files from a real S3-compatible server started for the run "
        "(SeaweedFS on loopback) through one executor; adds s3_vs_local",
    )
    d.add_argument(
        "--tls",
        action="store_true",
        help="also run one executor with TLS (a job CA made for the run) on the dispatcher and the "
        "executor; adds tls_cost",
    )
    d.set_defaults(handler=run_dataplane)

    h = bsub.add_parser(
        "hybrid",
        help="batch vs stream vs mixed training on a drifting click log; mixing and ingest overheads",
        description="Generate a drifting click log (HISTORY_DAYS of Parquet, STREAM_DAYS of JSON events "
        "in Kafka; the last stream day is today), train the three modes on identical data with "
        "progressive validation, with explicit best settings and with the embedded defaults, then the "
        "defaults on the same world six years earlier (an old log); measure the mixed loader against "
        "in-memory tensors and stream ingest against a bare kafka-python consumer. Starts an embedded "
        "broker unless --bootstrap-servers is given.",
    )
    _click_log_world(h, history_days=20, stream_days=3)
    h.set_defaults(handler=run_hybrid)

    mo = bsub.add_parser(
        "model",
        help="the model kinds side by side: AUC, and the training step's speed of a user model",
        description="On primus bench hybrid's world with the embedded defaults: a mixed run of each "
        "model kind (dlrm, dcn_v2, and the built-in DLRM brought as a type: python entrypoint) for "
        "progressive AUC, then the training step alone on the DLRM run's recorded steps, paired and "
        "repeated, for rows/s and the user model's ratio; and stream ingest. Starts an embedded "
        "broker unless --bootstrap-servers is given.",
    )
    _click_log_world(mo, history_days=6, stream_days=1)
    mo.add_argument(
        "--repeats", type=count_of("repeats"), default=5, help="interleaved rounds of speed passes" + median
    )
    mo.set_defaults(handler=run_model)

    j = bsub.add_parser(
        "join",
        help="a data executor's transform with and without an as-of feature join: rows/s, cost ratio",
        description="The same generated click batches transformed twice, by a schema that reads "
        "user_ctr from the data and by one that joins it as of each row's event time from a Parquet "
        "feature table; passes alternate, medians reported, the table's load and index build timed apart.",
    )
    j.add_argument("--rows", type=count_of("rows"), default=1_000_000)
    j.add_argument("--feature-rows", type=count_of("rows"), default=1_000_000, help="feature table updates")
    j.add_argument(
        "--keys", type=count_of("keys"), default=100_000, help="distinct users in the feature table"
    )
    j.add_argument("--repeats", type=count_of("repeats"), default=5, help="interleaved rounds" + median)
    j.set_defaults(handler=run_join)

    ts = bsub.add_parser(
        "train-scale",
        help="one trainer vs two data-parallel trainers on the same rows: rows/s, communication share",
        description="Train ROWS generated click rows (in memory) with one trainer, then with two "
        "data-parallel trainer processes (gloo over loopback, each stepping BATCH_SIZE rows): rows/s "
        "of both and, for two, the share of a step's time spent in collectives.",
    )
    ts.add_argument("--rows", type=count_of("rows"), default=400_000)
    ts.add_argument("--batch-size", type=count_of("rows"), default=2048, help="rows per trainer step")
    ts.add_argument("--seed", type=int, default=7)
    ts.add_argument("--workdir", type=Path, help="where the runs write (default: system temp)")
    ts.add_argument(
        "--table-rows",
        type=int,
        default=400_000,
        help="rows per embedding table of the replicated vs row-wise memory run (0 skips it)",
    )
    # Set for each of the two trainer processes the benchmark starts.
    ts.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ts.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    ts.add_argument("--dist-init", help=argparse.SUPPRESS)
    ts.set_defaults(handler=run_train_scale)

    a = bsub.add_parser(
        "autoscale",
        help="a mis-sized job (one half-core data executor) with autoscaling off and on",
        description="Generate ROWS click events as gzipped JSON lines in FILES files and train them twice "
        "as a PrimusJob on the local backend — one data executor with half a CPU and a tight memory limit "
        "feeding one trainer — with scaling off, then on. Prints throughput, CPU utilisation, samples per "
        "allotted core-second, peak memory ratio and the autoscaler's decisions side by side.",
    )
    a.add_argument("--rows", type=int, default=2_000_000)
    a.add_argument("--files", type=int, default=80)
    a.add_argument("--window-s", type=float, default=3.0, help="the autoscaler's adjustment window")
    a.add_argument("--cooldown-s", type=float, default=3.0)
    a.add_argument(
        "--data-cpu", type=float, default=0.5, help="the data executor's starting CPU (default: 0.5)"
    )
    a.add_argument("--workdir", type=Path, help="where to generate the data (default: system temp)")
    a.set_defaults(handler=run_autoscale)

    k = bsub.add_parser(
        "k8s",
        help="one master scaling a job from 10 to 1,000 executor pods and back on a real apiserver",
        description="Start the embedded control plane (kube-apiserver + etcd, kube-scheduler, kwok with "
        "NODES simulated nodes), submit a PrimusJob with LOW data executors, scale it to HIGH through the "
        "scale subresource and back. Prints the master's pass time at HIGH, the time until HIGH pods run, "
        "and the apiserver requests per idle pass at LOW and at HIGH.",
    )
    k.add_argument("--nodes", type=int, default=50)
    k.add_argument("--low", type=int, default=10)
    k.add_argument("--high", type=int, default=1000)
    k.add_argument("--idle-passes", type=int, default=40, help="idle passes measured at each size")
    k.add_argument("--settle-s", type=float, default=12.0, help="wait before measuring idle passes")
    k.add_argument("--workdir", type=Path, help="where the cluster's files go (default: system temp)")
    k.add_argument(
        "--real",
        action="store_true",
        help="instead: the same job on the local backend and in pods on a real node (kubelet, containerd; "
        "root), from the project's images; prints rows/s of both, pod readiness, scale-out and resize times",
    )
    k.add_argument("--hours", type=int, default=4, help="--real: hours of click logs")
    k.add_argument("--rows-per-hour", type=int, default=100_000, help="--real: rows per hour of logs")
    k.set_defaults(handler=run_k8s)

    y = bsub.add_parser(
        "yarn",
        help="the YARN backend on Hadoop's mini cluster against the local backend",
        description="Run the same job on the local backend and on YARN (executors in containers of "
        "the job's application). Prints container allocation to executor serving (p50/p95), the time "
        "an in-place container resize takes to apply, and rows/s on YARN against local.",
    )
    y.add_argument("--rows", type=int, default=60_000)
    y.add_argument("--executors", type=int, default=4, help="data executors (containers)")
    y.add_argument("--conf-dir", type=Path, help="a running cluster's HADOOP_CONF_DIR (default: start one)")
    y.add_argument("--workdir", type=Path, help="where the data and cluster go (default: system temp)")
    y.set_defaults(handler=run_yarn)

    f = bsub.add_parser(
        "faults",
        help="a mixed follow-mode job through broker outages and executor kills, row by row",
        description="Per trial (seeded): a real broker, a click log's history and stream, a mixed "
        "follow-mode job; the broker is stopped and started again on the same port after an outage "
        "of MIN..MAX seconds mid-pass, then the trainer or a data executor is SIGKILLed. Reports rows "
        "lost and duplicated (from the trainer's trace), trainer crashes and the longest time from "
        "the broker's return to the stream training again. One more trial rewrites a planned history "
        "file while the job runs: its task must be quarantined, none of its new rows trained; another "
        "stops the only data executor with SIGSTOP: the master must declare it hung and replace it.",
    )
    f.add_argument("--trials", type=count_of("runs"), default=3)
    f.add_argument("--seed", type=int, default=0, help="trial i uses seed SEED+i")
    f.add_argument("--min-outage-s", type=float, default=3.0)
    f.add_argument("--max-outage-s", type=float, default=15.0)
    f.add_argument(
        "--no-file-changed",
        dest="file_changed",
        action="store_false",
        help="skip the trial that rewrites a planned history file while the job runs",
    )
    f.add_argument("--workdir", type=Path, help="where trials build their worlds (default: system temp)")
    f.set_defaults(handler=run_faults)
    s = _register_sharding(bsub)
    for each in (p, d, h, mo, a, k, f, s, ts):
        each.add_argument("--json", action="store_true", help="only the JSON line: no progress on a terminal")


def _click_log_world(parser: argparse.ArgumentParser, *, history_days: int, stream_days: int) -> None:
    """The generated click log's size, the training batch and seed, and where it runs: the options the
    benchmarks on ``primus gen``'s world share."""
    parser.add_argument("--history-days", type=int, default=history_days)
    parser.add_argument("--stream-days", type=int, default=stream_days)
    parser.add_argument("--rows-per-day", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=20_000, help="users on day 0 (3%% more arrive daily)")
    parser.add_argument("--items", type=int, default=5_000, help="items on day 0 (3%% more arrive daily)")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bootstrap-servers", help="use this broker instead of an embedded one")
    parser.add_argument("--workdir", type=Path, help="where to generate the data (default: system temp)")


def _world_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "history_days": args.history_days,
        "stream_days": args.stream_days,
        "rows_per_day": args.rows_per_day,
        "users": args.users,
        "items": args.items,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "bootstrap_servers": args.bootstrap_servers,
        "workdir": args.workdir,
    }


def _register_sharding(bsub: Any) -> argparse.ArgumentParser:
    s: argparse.ArgumentParser = bsub.add_parser(
        "sharding",
        help="peak memory per trainer with replicated vs row-wise embedding tables",
        description="Train the same DLRM on the same synthetic batches with TRAINERS trainer processes "
        "(gloo, loopback), its TABLES tables of ROWS rows once replicated and once row-wise; prints each "
        "run's peak RSS per trainer next to the tables' and the dense part's training footprint.",
    )
    s.add_argument("--rows", type=count_of("rows"), default=400_000, help="rows per embedding table")
    s.add_argument("--tables", type=count_of("tables"), default=2)
    s.add_argument("--embedding-dim", type=count_of("dimensions"), default=16)
    s.add_argument("--steps", type=count_of("steps"), default=6)
    s.add_argument("--trainers", type=count_of("trainers"), default=2)
    s.set_defaults(handler=run_sharding)
    return s


def run_join(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.asof_join import join_speeds

    print(
        json.dumps(
            join_speeds(rows=args.rows, feature_rows=args.feature_rows, keys=args.keys, repeats=args.repeats)
        )
    )
    return 0


def run_sharding(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.sharding import run

    rows = tuple(args.rows for _ in range(args.tables))
    return _report(
        args,
        lambda: run(rows=rows, embedding_dim=args.embedding_dim, steps=args.steps, trainers=args.trainers),
    )


def _report(args: argparse.Namespace, measure: Callable[[], dict[str, Any]]) -> int:
    """Run one benchmark, its stages drawn on a terminal, and print its one JSON line."""
    bar = Bar(f"bench {args.bench_command}", enabled=on_terminal(args.json), counted=False)
    with bar, bench_stages(bar):
        result = measure()
    print(json.dumps(result))
    return 0


def run_k8s(args: argparse.Namespace) -> int:
    if args.real:
        from airflow_provider_primus.bench.k8s_real import run as run_real

        print(json.dumps(run_real(hours=args.hours, rows_per_hour=args.rows_per_hour, workdir=args.workdir)))
        return 0
    from airflow_provider_primus.bench.k8s import run

    return _report(
        args,
        lambda: run(
            nodes=args.nodes,
            low=args.low,
            high=args.high,
            idle_passes=args.idle_passes,
            settle_s=args.settle_s,
            workdir=args.workdir,
        ),
    )


def run_yarn(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.yarn import run

    result = run(rows=args.rows, executors=args.executors, conf_dir=args.conf_dir, workdir=args.workdir)
    print(json.dumps(result))
    return 0


def run_faults(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.faults import run

    if not 0 <= args.min_outage_s <= args.max_outage_s:
        print("error: need 0 <= --min-outage-s <= --max-outage-s", file=sys.stderr)
        return 2
    return _report(
        args,
        lambda: run(
            trials=args.trials,
            seed=args.seed,
            min_outage_s=args.min_outage_s,
            max_outage_s=args.max_outage_s,
            file_changed=args.file_changed,
            workdir=args.workdir,
        ),
    )


def run_autoscale(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.autoscale import run

    return _report(
        args,
        lambda: run(
            rows=args.rows,
            files=args.files,
            window_s=args.window_s,
            cooldown_s=args.cooldown_s,
            workdir=args.workdir,
            data_cpu=args.data_cpu,
        ),
    )


def run_plan(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.plan import run

    if args.sweep:
        from airflow_provider_primus.bench.plan_sweep import sweep

        files = args.files or 40
        return _report(
            args,
            lambda: sweep(
                files=files, delay_ms=args.delay_ms, workdir=args.workdir, iceberg=not args.no_iceberg
            ),
        )
    return _report(
        args,
        lambda: run(
            days=args.days,
            files=args.files or 4,
            delay_ms=args.delay_ms,
            local_files=args.local_files,
            workdir=args.workdir,
            parallel_runs=args.parallel_runs,
            incremental_runs=args.incremental_runs,
        ),
    )


def run_dataplane(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.dataplane import run

    return _report(
        args,
        lambda: run(
            rows=args.rows,
            workdir=args.workdir,
            batch_rows=args.batch_rows,
            window=args.window,
            credits=args.credits,
            files=args.files,
            rounds=args.rounds,
            message_rows=args.message_rows,
            store=args.store,
            tls=args.tls,
        ),
    )


def run_train_scale(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.train_scale import run, worker

    sizes = {"rows": args.rows, "batch_size": args.batch_size, "seed": args.seed}
    if args.rank is not None:
        worker(rank=args.rank, world=args.world, init=args.dist_init, workdir=args.workdir, **sizes)
        return 0
    if args.table_rows < 0:
        raise SystemExit("primus bench train-scale: --table-rows must be 0 (skip) or more")
    return _report(args, lambda: run(workdir=args.workdir, table_rows=args.table_rows, **sizes))


def run_hybrid(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.hybrid import run

    return _report(args, lambda: run(**_world_kwargs(args)))


def run_model(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.model import run

    return _report(args, lambda: run(**_world_kwargs(args), repeats=args.repeats))
