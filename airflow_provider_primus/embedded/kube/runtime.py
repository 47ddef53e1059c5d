"""The node's container runtime: Debian's containerd and runc, in a directory of their own.

containerd gets its own root, state, socket, ``opt`` and runc root under the node's state dir, so it
never meets a system containerd (there may be one) and a teardown knows what to remove. Settings
that are not taste but the fix for an error seen on this kind of machine:

* ``restrict_oom_score_adj = true``: root here lacks CAP_SYS_RESOURCE, and without it every
  sandbox fails with ``runc create failed: ... can't get final child's PID from pipe: EOF``;
* ``SystemdCgroup = false``: the kubelet uses the cgroupfs driver (no systemd on such machines);
* ``netns_mounts_under_state_dir``: network namespaces mount under our state dir, not /run/netns.

Images cannot be pulled, so ``sandbox_image`` is the locally built pause image (``images.py``),
imported with ``ctr images import`` into the ``k8s.io`` namespace that the CRI plugin reads.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from airflow_provider_primus.embedded.kube.host import CNI_BIN_DIR, HostError
from airflow_provider_primus.process import tied_to_launcher

K8S_NAMESPACE = "k8s.io"
# Snapshotters containerd 1.6 would otherwise load (and log about) on a machine without them.
_DISABLED = (
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
)


def containerd_config(state_dir: Path, sandbox_image: str, cni_conf_dir: Path) -> str:
    root, run = state_dir / "containerd", state_dir / "containerd-state"
    disabled = ", ".join(f'"{p}"' for p in _DISABLED)
    return f"""version = 2
root = "{root}"
state = "{run}"
disabled_plugins = [{disabled}]

[grpc]
  address = "{socket_path(state_dir)}"

[ttrpc]
  address = "{state_dir / "containerd-ttrpc.sock"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state_dir / "containerd-opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{state_dir / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
"""


def socket_path(state_dir: Path) -> Path:
    path = state_dir / "containerd.sock"
    if len(str(path)) > 100:  # sun_path holds 108 bytes; the CRI plugin adds nothing, stay clear
        raise HostError(f"the state dir {state_dir} is too long for a unix socket path; choose a shorter one")
    return path


class Containerd:
    """One containerd process and the ``ctr`` calls the node needs."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.socket = socket_path(state_dir)
        self.log = state_dir / "containerd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, sandbox_image: str, cni_conf_dir: Path, timeout_s: float = 30.0) -> None:
        config = self.state_dir / "containerd.toml"
        config.write_text(containerd_config(self.state_dir, sandbox_image, cni_conf_dir))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                tied_to_launcher(["containerd", "--config", str(config)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        while self.ctr("version", check=False).returncode != 0:
            if self.process.poll() is not None:
                raise HostError(f"containerd exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise HostError(f"containerd did not answer on {self.socket}:\n{self.log_tail()}")
            time.sleep(delay)  # another process's socket: nothing to block on
            delay = min(delay * 1.5, 0.25)

    def ctr(
        self, *args: str, check: bool = True, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", K8S_NAMESPACE, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
        )
        if check and proc.returncode != 0:
            raise HostError(f"`ctr {' '.join(args)}` failed: {proc.stderr.strip()}")
        return proc

    def import_image(self, tarball: Path) -> None:
        self.ctr("images", "import", str(tarball))

    def remove_all_containers(self) -> None:
        """Kill and delete every task and container: what the kubelet did not stop before it ended."""
        for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            self.ctr("tasks", "delete", "--force", task, check=False)
        containers = self.ctr("containers", "ls", "-q", check=False).stdout.split()
        if containers:
            self.ctr("containers", "delete", *containers, check=False)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
