"""``primus validate``: check spec files before anything reads data or starts executors.

Exit codes: 0 all files valid, 2 any file invalid or unreadable (the same code argparse uses for a
bad command line: in both cases the input is wrong, not the machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

INVALID = 2


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
    parser.set_defaults(handler=run)


def _summaries() -> dict[str, Callable[[dict[str, Any], Path], str]]:
    """One validator per ``kind``."""
    from airflow_provider_primus.spec import load_data_spec
    from airflow_provider_primus.spec.loader import load_training_spec

    def data(document: dict[str, Any], path: Path) -> str:
        spec = load_data_spec(document)
        count = len(spec.spec.sources)
        return f"PrimusData {spec.metadata.name!r}: {count} source{'' if count == 1 else 's'}"

    def training(document: dict[str, Any], path: Path) -> str:
        spec = load_training_spec(document)
        return f"PrimusTraining {spec.metadata.name!r}: mode {spec.spec.mode}, batch {spec.spec.batch_size}"

    def job(document: dict[str, Any], path: Path) -> str:
        from airflow_provider_primus.master.jobs import load_job

        # The documents it references are validated too, relative to the job file.
        spec = load_job(document, path.resolve().parent)[0]
        roles = spec.spec.roles
        return (
            f"PrimusJob {spec.metadata.name!r}: backend {spec.spec.backend.type}, data executors "
            f"{roles.data.replicas.min}..{roles.data.replicas.top}, scaling "
            f"{'on' if spec.spec.scaling.enabled else 'off'}"
        )

    return {"PrimusData": data, "PrimusTraining": training, "PrimusJob": job}


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.spec import SpecError, read_document

    validators = _summaries()
    code = 0
    for path in args.files:
        try:
            document = read_document(path)
            # An unknown kind is validated as PrimusData, whose own check then names the kinds expected.
            summary = validators.get(str(document.get("kind")), validators["PrimusData"])(
                document, Path(path)
            )
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
