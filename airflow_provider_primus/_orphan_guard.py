"""Exec a command that dies with its launcher: ``python -S _orphan_guard.py PPID SIG -- CMD...``.

Run as a script, not imported: it sets ``PR_SET_PDEATHSIG`` in the child itself and then execs the
real command (the setting survives exec). Doing this in a ``preexec_fn`` instead runs Python between
fork and exec in a parent full of threads (gRPC, Arrow, Airflow), which can deadlock the child on a
lock some other thread held at fork time; we saw exactly that hang in CI. With no ``preexec_fn``
``subprocess`` forks with vfork and runs no Python at all in the child.
"""

import ctypes
import os
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: _orphan_guard.py PARENT_PID SIGNAL -- COMMAND [ARG...]\n")
        os._exit(2)
    parent, sig, command = int(argv[0]), int(argv[1]), argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, sig) != 0:
        sys.stderr.write(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}\n")
        os._exit(1)
    if os.getppid() != parent:  # the launcher died before prctl took effect: nobody to serve
        os._exit(1)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
