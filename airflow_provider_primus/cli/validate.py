"""``primus validate``: check spec files before anything reads data or starts executors.

With ``--sample N`` a data document's sources are also read (N rows each, files over the document's
window, a topic's newest records) and event times implausible in the declared unit are problems:
the document alone cannot tell epoch seconds from milliseconds, a sample can.

Exit codes: 0 all files valid, 2 any file invalid or unreadable (the same code argparse uses for a
bad command line: in both cases the input is wrong, not the machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_primus.cli.args import count_of

if TYPE_CHECKING:
    from airflow_provider_primus.contracts import SpecIssue
    from airflow_provider_primus.contracts.data import PrimusData

INVALID = 2
# What a validator returns: its one-line summary, the data document a sample would read (the file
# itself, or the one a job references) and, for a referenced one, the key its problems go under.
Checked = tuple[str, "PrimusData | None", str | None]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check PrimusData, PrimusTraining and PrimusJob documents (YAML or JSON)",
        description="Validate spec files strictly: unknown keys, wrong values and inconsistent fields "
        "are reported with their path in the document, all at once (a PrimusJob also checks the documents "
        "it references). Exits 0 when every file is valid, "
        "2 otherwise.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="a .yaml, .yml or .json spec")
    parser.add_argument("--json", action="store_true", help="print one JSON object per file instead of lines")
    parser.add_argument(
        "--sample",
        type=count_of("rows"),
        metavar="N",
        help="also read N rows of each data source (files over the window, a topic's newest records) "
        "and report event times implausible in the declared unit (before 1990 or more than a day ahead)",
    )
    parser.set_defaults(handler=run)


def _summaries() -> dict[str, Callable[[dict[str, Any], Path], Checked]]:
    """One validator per ``kind``."""
    from airflow_provider_primus.contracts import load_data_spec
    from airflow_provider_primus.contracts.loader import load_training_spec

    def data(document: dict[str, Any], path: Path) -> Checked:
        spec = load_data_spec(document)
        _check_format_files(spec, None)
        count = len(spec.spec.sources)
        return f"PrimusData {spec.metadata.name!r}: {count} source{'' if count == 1 else 's'}", spec, None

    def training(document: dict[str, Any], path: Path) -> Checked:
        spec = load_training_spec(document)
        summary = (
            f"PrimusTraining {spec.metadata.name!r}: mode {spec.spec.mode}, batch {spec.spec.batch_size}"
        )
        return summary, None, None

    def job(document: dict[str, Any], path: Path) -> Checked:
        from airflow_provider_primus.master.jobs import load_job

        # The documents it references are validated too, relative to the job file.
        spec, stored = load_job(document, path.resolve().parent)
        roles = spec.spec.roles
        summary = (
            f"PrimusJob {spec.metadata.name!r}: backend {spec.spec.backend.type}, data executors "
            f"{roles.data.replicas.min}..{roles.data.replicas.top}, scaling "
            f"{'on' if spec.spec.scaling.enabled else 'off'}"
        )
        data_spec = load_data_spec(stored["spec"]["data"])
        _check_format_files(data_spec, "spec.data")
        return summary, data_spec, "spec.data"

    return {"PrimusData": data, "PrimusTraining": training, "PrimusJob": job}


def _check_format_files(data: PrimusData, referenced_by: str | None) -> None:
    """Refuse a Kafka source whose Avro schema or Protobuf descriptor file cannot be used here,
    under the field that names it (the contract itself does no I/O)."""
    from airflow_provider_primus.contracts import SpecError, SpecIssue
    from airflow_provider_primus.contracts.sources import KafkaSource
    from airflow_provider_primus.data.formats import format_issues

    issues = []
    for i, source in enumerate(data.spec.sources):
        if not isinstance(source, KafkaSource):
            continue
        for field, message in format_issues(source):
            path = f"spec.sources[{i}].{field}"
            if referenced_by is not None:
                issues.append(SpecIssue(referenced_by, f"{path}: {message}"))
            else:
                issues.append(SpecIssue(path, message))
    if issues:
        raise SpecError(issues)


def _sample(data: PrimusData, rows: int, referenced_by: str | None) -> list[SpecIssue]:
    """The sample's problems as issues at the source's event time, where its unit is declared (a
    job's data document: under the job's key, as its other problems are)."""
    from airflow_provider_primus.contracts import SpecIssue
    from airflow_provider_primus.data.sampling import sample_event_times

    index = {s.name: i for i, s in enumerate(data.spec.sources)}
    issues = []
    for source, message in sample_event_times(data, rows):
        path = f"spec.sources[{index[source]}].schema.event_time"
        if referenced_by is not None:
            issues.append(SpecIssue(referenced_by, f"{path}: {message}"))
        else:
            issues.append(SpecIssue(path, message))
    return issues


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts import SpecError, read_document

    validators = _summaries()
    code = 0
    for path in args.files:
        try:
            document = read_document(path)
            # An unknown kind is validated as PrimusData, whose own check then names the kinds expected.
            summary, data, referenced_by = validators.get(
                str(document.get("kind")), validators["PrimusData"]
            )(document, Path(path))
            if args.sample and data is not None:
                sampled = _sample(data, args.sample, referenced_by)
                if sampled:
                    raise SpecError(sampled)
                summary += f"; sampled {args.sample} rows per source"
        except SpecError as exc:
            code = INVALID
            if args.json:
                issues = [{"path": i.path, "message": i.message} for i in exc.issues]
                print(json.dumps({"file": str(path), "ok": False, "issues": issues}))
            else:
                count = len(exc.issues)
                print(f"error: {path}: {count} problem{'' if count == 1 else 's'}", file=sys.stderr)
                for issue in exc.issues:
                    print(issue, file=sys.stderr)
            continue
        if args.json:
            print(json.dumps({"file": str(path), "ok": True, "summary": summary}))
        else:
            print(f"ok: {summary}")
    return code
