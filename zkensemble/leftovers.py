"""How the parts of an ensemble are marked, so that they can be found and removed without the process
that started them: docker containers and networks by label, local java servers by a marker on their
command line. The providers mark what they start; the reaper and `zk down` find it again.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ProviderUnavailable

LABEL = "rebalance-lab.zk"  # value: the ensemble's name; `zk down` finds leftovers by it
MARKER = "-Drebalance.lab.zk="  # on every java command line, so a process can be told ours


def docker_client(timeout_s: int = 30):
    """A docker-py client whose engine answered a ping, or ProviderUnavailable."""
    import docker

    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
        return client
    except Exception as error:
        raise ProviderUnavailable(f"the Docker engine does not answer ({type(error).__name__})") from None


def labelled(client, name: str) -> tuple[list, list]:
    """The containers and networks of ensemble `name`, by label: all that is left of it, live or not."""
    flt = {"label": f"{LABEL}={name}"}
    # ignore_removed: a container removed between the listing and its inspection is gone, not an error
    return client.containers.list(all=True, filters=flt, ignore_removed=True), client.networks.list(filters=flt)


def remove_labelled(client, name: str) -> None:
    """Remove ensemble `name`'s containers (with their volumes), then its network. Needs only the name."""
    import docker.errors

    containers, _ = labelled(client, name)
    for container in containers:
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    for network in labelled(client, name)[1]:
        try:
            network.remove()
        except docker.errors.NotFound:
            pass


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # fields[0] is field 3 (state), fields[19] field 22
    if fields[0] in ("Z", "X", "x"):
        return None
    return int(fields[19])


def local_pids(name: str) -> list[int]:
    """Pids of the live java servers of local ensemble `name` (by the marker on their command line)."""
    marker = f"{MARKER}{name}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline.split(b"\0") and start_time(int(proc.name)) is not None:
            pids.append(int(proc.name))
    return pids
