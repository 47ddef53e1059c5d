"""Exec a command pinned to cores: ``python -S _affinity_exec.py CORES [--cgroup DIR]... -- CMD...``.

Run as a script, not imported, for the reason ``_orphan_guard`` gives: setting the affinity (and
joining a cgroup) in a ``preexec_fn`` would run Python between fork and exec in a parent full of
threads. Here the setup happens in a fresh single-threaded interpreter, so the command starts on
its cores and inside its limits from its first instruction, and every thread and process it creates
inherits them. ``CORES`` is a comma-separated list of CPU ids; each ``--cgroup`` is a group to join
(cgroup v1 has one per controller).
"""

import os
import sys


def main(argv: list[str]) -> None:
    try:
        split = argv.index("--")
    except ValueError:
        split = -1
    options, command = argv[:split], argv[split + 1 :]
    groups = options[2::2]
    if split < 1 or not command or len(options) % 2 != 1 or any(flag != "--cgroup" for flag in options[1::2]):
        sys.stderr.write("usage: _affinity_exec.py CORES [--cgroup DIR]... -- COMMAND [ARG...]\n")
        os._exit(2)
    try:
        for group in groups:
            with open(os.path.join(group, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        os.sched_setaffinity(0, [int(c) for c in options[0].split(",")])
    except (OSError, ValueError) as e:
        sys.stderr.write(f"_affinity_exec: {e}\n")
        os._exit(1)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"_affinity_exec: cannot run {command[0]!r}: {e}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
