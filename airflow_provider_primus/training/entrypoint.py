"""A user's model entrypoint (``package.module:factory``): import it, build the model, and check it
against the protocol (training/protocol.py) before anything is launched.

Why in a child process (:func:`check_in_child`): importing user code runs user code. A module that
calls ``sys.exit``, leaks threads, holds a GPU or segfaults must not take ``primus validate``, the
scheduler's submit or the master with it, and the environment it is checked in should be the one its
trainers get (their interpreter and extra paths). The child prints one JSON line; everything it
says is a message that names the field (``training.model.entrypoint: cannot import 'acme.models':
No module named 'acme'``), so a bad entrypoint is refused up front like any other bad value.

The check itself (:func:`check_model`) is what a trainer would do to the module on its first step:
one forward on a synthetic batch shaped by the schema, logits of shape ``[B]`` in a floating dtype,
one backward reaching at least one parameter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from airflow_provider_primus.contracts.base import ENTRYPOINT_FORM
from airflow_provider_primus.errors import TerminalError
from airflow_provider_primus.imports import CallableImportError, import_callable, last_json_line
from airflow_provider_primus.training.protocol import (
    Features,
    FeatureSchema,
    split_parameters,
    synthetic_features,
)

__all__ = [
    "CHECK_ROWS",
    "ENTRYPOINT_FIELD",
    "EntrypointError",
    "ModelCheck",
    "build_model",
    "check_in_child",
    "check_model",
    "load_factory",
    "parse_entrypoint",
]

ENTRYPOINT_FIELD = "training.model.entrypoint"
CHECK_ROWS = 4  # the synthetic batch: small, and not 1 (a [B] vs scalar mix-up must show)
CHECK_TIMEOUT_S = 120.0  # importing torch and a user package on a busy machine

Factory = Callable[[FeatureSchema, dict[str, Any]], Any]


class EntrypointError(TerminalError):
    """A model entrypoint that cannot be imported, built or run as the protocol says: no restart
    makes it work, so the job fails at once with this message (it names the field)."""

    def __init__(self, message: str, *, field: str = ENTRYPOINT_FIELD) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


def parse_entrypoint(entrypoint: str) -> tuple[str, str]:
    """``package.module:factory`` as (module, attribute path)."""
    if not ENTRYPOINT_FORM.match(entrypoint):  # the contract's own rule
        raise EntrypointError(f"expected 'package.module:factory', got {entrypoint!r}")
    module, _, attribute = entrypoint.partition(":")
    return module, attribute


def load_factory(entrypoint: str) -> Factory:
    """The callable an entrypoint names, imported in this process."""
    try:
        factory: Factory = import_callable(entrypoint, "callable factory")
    except CallableImportError as exc:
        raise EntrypointError(str(exc)) from exc.__cause__
    return factory


def build_model(entrypoint: str, schema: FeatureSchema, options: Mapping[str, Any]) -> nn.Module:
    """The user's module: ``factory(schema, options)``, which must be a ``torch.nn.Module``."""
    factory = load_factory(entrypoint)
    try:
        model = factory(schema, dict(options))
    except Exception as exc:
        raise EntrypointError(f"{entrypoint} raised {_one_line(exc)}") from exc
    if not isinstance(model, nn.Module):
        raise EntrypointError(f"{entrypoint} returned {type(model).__name__}, expected a torch.nn.Module")
    return model


@dataclass(frozen=True)
class ModelCheck:
    """What the check learned of a model that passed: its parameter counts by kind."""

    embedding_parameters: int
    dense_parameters: int

    def to_dict(self) -> dict[str, int]:
        return {"embedding_parameters": self.embedding_parameters, "dense_parameters": self.dense_parameters}


def check_model(model: nn.Module, schema: FeatureSchema, *, entrypoint: str = "the model") -> ModelCheck:
    """One forward and one backward on a synthetic batch; the protocol's promises checked."""
    features: Features = synthetic_features(schema, CHECK_ROWS, seed=0)
    model.train()
    try:
        logits = model(features)
    except Exception as exc:
        raise EntrypointError(f"{entrypoint}'s forward raised {_one_line(exc)}") from exc
    if not isinstance(logits, torch.Tensor):
        raise EntrypointError(f"{entrypoint}'s forward returned {type(logits).__name__}, expected a Tensor")
    if tuple(logits.shape) != (CHECK_ROWS,):
        shape = ", ".join("B" if d == CHECK_ROWS else str(d) for d in logits.shape)
        raise EntrypointError(f"{entrypoint} returned logits of shape [{shape}], expected [B]")
    if not logits.dtype.is_floating_point:
        raise EntrypointError(f"{entrypoint} returned logits of dtype {logits.dtype}, expected a float dtype")
    tables, dense = split_parameters(model)
    if not tables and not dense:
        raise EntrypointError(f"{entrypoint} has no parameters to train")
    try:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
        loss.backward()  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise EntrypointError(f"{entrypoint}'s backward raised {_one_line(exc)}") from exc
    if not any(p.grad is not None for p in tables + dense):
        raise EntrypointError(f"{entrypoint}'s logits do not depend on any of its parameters")
    model.zero_grad(set_to_none=True)
    return ModelCheck(
        embedding_parameters=sum(p.numel() for p in tables),
        dense_parameters=sum(p.numel() for p in dense),
    )


def check_in_child(
    entrypoint: str,
    schema: FeatureSchema,
    options: Mapping[str, Any],
    *,
    python: str | None = None,
    paths: Sequence[Path] = (),
    timeout_s: float = CHECK_TIMEOUT_S,
) -> ModelCheck:
    """:func:`check_model` of the built model, in a child ``python`` (this interpreter by default)
    with ``paths`` ahead of its import path: the trainers' environment, not this process's."""
    parse_entrypoint(entrypoint)  # a malformed name needs no child
    env = dict(os.environ)
    # The child must import this product (its protocol) as well as the user's package.
    own = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), own, env.get("PYTHONPATH", "")]).strip(
        os.pathsep
    )
    request = json.dumps({"entrypoint": entrypoint, "schema": schema.to_dict(), "options": dict(options)})
    try:
        done = subprocess.run(
            [python or sys.executable, "-m", __name__],
            input=request,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EntrypointError(
            f"checking {entrypoint} took over {timeout_s:.0f} s (importing or building it)"
        ) from exc
    except OSError as exc:
        raise EntrypointError(f"cannot start the interpreter {python!r}: {exc}") from exc
    answer = last_json_line(done.stdout)
    if answer is None:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise EntrypointError(f"checking {entrypoint} ended without an answer: {tail}")
    if not answer.get("ok"):
        raise EntrypointError(str(answer.get("reason")), field=str(answer.get("field") or ENTRYPOINT_FIELD))
    return ModelCheck(int(answer["embedding_parameters"]), int(answer["dense_parameters"]))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _child() -> int:
    """The child's side: a request on stdin, one JSON answer on stdout (user prints go first)."""
    argparse.ArgumentParser(
        description="check a model entrypoint (reads a JSON request on stdin)"
    ).parse_args()
    request = json.loads(sys.stdin.read())
    try:
        schema = FeatureSchema.from_dict(request["schema"])
        model = build_model(request["entrypoint"], schema, request.get("options") or {})
        answer: dict[str, Any] = {
            "ok": True,
            **check_model(model, schema, entrypoint=request["entrypoint"]).to_dict(),
        }
    except EntrypointError as exc:
        answer = {"ok": False, "field": exc.field, "reason": exc.reason}
    except Exception as exc:  # a bug of ours: say it, with where
        answer = {
            "ok": False,
            "field": ENTRYPOINT_FIELD,
            "reason": "".join(traceback.format_exception_only(exc)).strip(),
        }
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_child())
