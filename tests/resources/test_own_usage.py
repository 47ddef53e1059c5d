"""An executor's own CPU and memory use, measured from inside: /proc, or its own cgroup (v1 here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_primus.master.telemetry import _usage
from airflow_provider_primus.resources.backend import Observation
from airflow_provider_primus.resources.own_usage import OWN_CGROUP_ENV, own_usage

FS = Path("/sys/fs/cgroup")
CHILD = """
import json, time
from airflow_provider_primus.resources.own_usage import own_usage
block = bytearray(64 << 20)
block[::4096] = b"\\x01" * (len(block) // 4096)
end = time.process_time() + 0.4
while time.process_time() < end:
    pass
print(json.dumps(own_usage()))
"""


def test_from_proc_by_default() -> None:
    before = own_usage()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = own_usage()
    assert before["source"] == after["source"] == "proc"
    assert after["cpu_s"] >= before["cpu_s"] + 0.15 and after["rss"] > 10 << 20


def own_group(controller: str) -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return FS / controller / path.lstrip("/")
    raise LookupError(controller)


def test_from_its_own_cgroup_v1_counting_only_its_own_use() -> None:
    try:
        bases = [own_group("cpuacct"), own_group("memory")]
    except LookupError as e:
        pytest.skip(f"no cgroup v1 {e} hierarchy")
    if not all(os.access(b, os.W_OK) for b in bases):
        pytest.skip("cgroup v1 groups not writable (run as root)")
    groups = [b / f"primus-test-{uuid.uuid4().hex[:8]}" for b in bases]
    for g in groups:
        g.mkdir()
    try:
        join = ";".join(
            f"open({str(g / 'cgroup.procs')!r}, 'w').write(str(__import__('os').getpid()))" for g in groups
        )
        code = f"{join}\nexec(compile({CHILD!r}, 'child', 'exec'))"
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, OWN_CGROUP_ENV: "1"},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        usage = json.loads(out.strip().splitlines()[-1])
    finally:
        for g in groups:
            g.rmdir()
    assert usage["source"] == "cgroup-v1"
    # Its own group's figures, not the machine's: at least its busy loop, far below what the
    # whole machine has used since boot.
    assert 0.35 <= usage["cpu_s"] < 30
    assert 64 << 20 <= usage["rss"] < 2 << 30


def test_the_master_takes_pushed_usage_only_where_it_cannot_see_the_process() -> None:
    seen = Observation("data-0", 1.0, True, cpu_s=2.5, rss=100)
    assert _usage(seen, {"cpu_s": 9.0, "rss": 900}) == (2.5, 100, True)
    pod = Observation("data-0", 1.0, True)  # a pod: nothing visible from the master
    assert _usage(pod, {"cpu_s": 9.0, "rss": 900}) == (9.0, 900, True)
    assert _usage(pod, {"rows": 10}) == (0.0, 0, False)  # unknown, never "idle"
