"""``primus convert FILE --to v1beta1``: a document at another version of its contract.

The document is validated first (at the newest version, through the same conversion a load does), so
what is written is a document every served version reads the same way. Comments are not kept: the
output is the parsed document, re-serialised. Exit codes as ``primus validate``: 2 for a document
that is invalid, of an unknown kind, or asked for a version its kind does not have.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

INVALID = 2


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "convert",
        help="convert a PrimusData, PrimusTraining or PrimusJob document to another version",
        description="Write FILE at the contract version --to (v1alpha1, v1beta1), to stdout or -o. "
        "Older versions keep what they cannot express in the annotation primus.dev/v1beta1-model, "
        "so converting back gives the same document. Exits 2 when the document is invalid or the "
        "version unknown.",
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="a .yaml, .yml or .json document")
    parser.add_argument("--to", required=True, metavar="VERSION", help="v1alpha1 or v1beta1")
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write here (JSON for .json, else YAML)"
    )
    parser.set_defaults(handler=run)


def _serialise(document: dict[str, Any], output: Path | None) -> str:
    import yaml

    if output is not None and output.suffix.lower() == ".json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts import SpecError, read_document
    from airflow_provider_primus.contracts.loader import validate_document
    from airflow_provider_primus.contracts.versions import convert, hub_version

    try:
        document = read_document(args.file)
        converted = convert(document, args.to)
        kind = str(document["kind"])
        validate_document(convert(document, hub_version(kind)))
    except SpecError as exc:
        count = len(exc.issues)
        print(f"error: {args.file}: {count} problem{'' if count == 1 else 's'}", file=sys.stderr)
        for issue in exc.issues:
            print(issue, file=sys.stderr)
        return INVALID
    text = _serialise(converted, args.output)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return 0
