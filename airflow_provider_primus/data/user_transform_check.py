"""A data document's python transforms imported before anything is launched, in a child process.

Why a child (as for python models, training/entrypoint.py): importing user code runs user code, and
the check must see the executors' environment (their interpreter and extra import paths), not the
submitter's. The child prints one JSON line: for each function that does not import or is not
callable, the field that names it and why (``spec.sources[0].schema.transforms[1].function: cannot
import 'acme.features': No module named 'acme'``). Only the import is checked: what a function makes
of a batch is known on its first batch, where the output check names it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.user_transform import PythonTransform
from airflow_provider_primus.imports import last_json_line

__all__ = ["CHECK_TIMEOUT_S", "FunctionIssue", "check_in_child", "python_functions"]

CHECK_TIMEOUT_S = 120.0  # importing a user package (and what it imports) on a busy machine

FunctionIssue = tuple[str, str]  # (field, reason)


def python_functions(data: PrimusData) -> list[tuple[str, str]]:
    """Every python step of the document as (field, function), in document order."""
    out: list[tuple[str, str]] = []
    for i, source in enumerate(data.spec.sources):
        for j, step in enumerate(source.schema_.transforms):
            if isinstance(step, PythonTransform):
                out.append((f"spec.sources[{i}].schema.transforms[{j}].function", step.function))
    return out


def check_in_child(
    functions: Sequence[tuple[str, str]],
    *,
    python: str | None = None,
    paths: Sequence[str] = (),
    timeout_s: float = CHECK_TIMEOUT_S,
) -> list[FunctionIssue]:
    """The functions imported by a child ``python`` (this interpreter by default) with ``paths``
    ahead of its import path; what is wrong, per field."""
    if not functions:
        return []
    env = dict(os.environ)
    own = str(Path(__file__).resolve().parents[2])  # the child imports this product too
    env["PYTHONPATH"] = os.pathsep.join([*paths, own, env.get("PYTHONPATH", "")]).strip(os.pathsep)
    request = json.dumps([{"field": f, "function": fn} for f, fn in functions])
    first = functions[0][0]
    try:
        done = subprocess.run(
            [python or sys.executable, "-m", __name__],
            input=request, capture_output=True, text=True, env=env, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return [(first, f"importing the transform functions took over {timeout_s:.0f} s")]
    except OSError as exc:
        return [(first, f"cannot start the interpreter {python!r}: {exc}")]
    answer = last_json_line(done.stdout)
    if answer is None:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return [(first, f"checking the transform functions ended without an answer: {tail}")]
    return [(str(f), str(reason)) for f, reason in answer.get("issues", [])]


def _child() -> int:
    """The child's side: the functions on stdin, one JSON answer on stdout (user prints go first)."""
    argparse.ArgumentParser(description="import python transform functions (JSON on stdin)").parse_args()
    from airflow_provider_primus.data.user_transforms import TransformFunctionError, load_function

    issues: list[FunctionIssue] = []
    for entry in json.loads(sys.stdin.read()):
        try:
            load_function(entry["function"])
        except TransformFunctionError as exc:
            issues.append((entry["field"], str(exc)))
    sys.stdout.write("\n" + json.dumps({"issues": issues}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_child())
