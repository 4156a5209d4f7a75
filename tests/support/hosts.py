"""Hosts on one machine: a network namespace per host, each on a veth into a bridge that this
module creates in the root namespace. The bridge's address is the "infra" side (Redis, PostgreSQL,
the model server listen there). Nothing is routed or NATed: traffic stays between the namespaces
and the bridge. Faults are nftables rules inside a host's own namespace that DROP (never REJECT)
its packets to and from one infra port, so the host sees a silent network, not a refused one.

Needs root and `ip` (iproute2) and `nft` (nftables); `missing()` says what is not there.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

_TABLE = "partition"


def missing() -> str | None:
    """Why hosts cannot be built here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin:/sbin") is None:
            return f"`{tool}` is not installed (apt-get install iproute2 nftables)"
    return None


def _tool(name: str) -> str:
    # A clean CI shell may have no /usr/sbin on its PATH; `ip netns exec` resolves its command by PATH too.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") or name


def _sh(*args: str, input: str | None = None, check: bool = True) -> str:
    tool = _tool(args[0])
    done = subprocess.run([tool, *args[1:]], input=input, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _free_subnet(rng: random.Random) -> str:
    """A 10.x.y.0/24 that no route of this machine uses."""
    routes = _sh("ip", "-4", "route", "show", "table", "all")
    for _ in range(50):
        prefix = f"10.{rng.randrange(200, 250)}.{rng.randrange(1, 255)}"
        if f"{prefix}." not in routes:
            return prefix
    raise RuntimeError("no free 10.x.y.0/24 for the test hosts")


@dataclass
class Hosts:
    """`names` hosts as namespaces on a private bridge; use as a context manager (always torn down)."""

    names: list[str]
    seed: int = 0
    tag: str = field(default_factory=lambda: f"c{os.getpid() % 100000}")
    prefix: str = ""
    cut_ports: dict[str, set[int]] = field(default_factory=dict)
    cut_served: dict[str, set[int]] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def infra(self) -> str:
        """The bridge's address: where the hosts reach Redis, PostgreSQL and the model server."""
        return f"{self.prefix}.1"

    def netns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def address(self, host: str) -> str:
        return f"{self.prefix}.{10 + self.names.index(host)}"

    def exec_prefix(self, host: str) -> list[str]:
        """Put before a command line to run it on `host`."""
        return [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", self.netns(host)]

    def __enter__(self) -> Hosts:
        self.prefix = _free_subnet(random.Random(self.seed ^ os.getpid()))
        try:
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "addr", "add", f"{self.infra}/24", "dev", self.bridge)
            _sh("ip", "link", "set", self.bridge, "up")
            for i, host in enumerate(self.names):
                ns, outer, inner = self.netns(host), f"{self.tag}v{i}", f"{self.tag}p{i}"
                _sh("ip", "netns", "add", ns)
                _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                _sh("ip", "link", "set", inner, "netns", ns)
                _sh("ip", "link", "set", outer, "master", self.bridge, "up")
                _sh("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", inner)
                _sh("ip", "-n", ns, "link", "set", inner, "up")
                _sh("ip", "-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for host in self.names:
            self.kill(host)
            _sh("ip", "netns", "del", self.netns(host), check=False)  # takes its veth end and rules along
        _sh("ip", "link", "del", self.bridge, check=False)

    # -- faults ------------------------------------------------------------------------
    def cut(self, host: str, port: int) -> None:
        """Silently drop `host`'s traffic to and from the infra's `port` (a partition, not a refusal)."""
        self.cut_ports.setdefault(host, set()).add(port)
        self._apply(host)

    def cut_clients(self, host: str, port: int) -> None:
        """Silently drop the traffic between `host`'s own `port` (a server it runs) and clients on the
        infra side (the test process): those clients see a silent server, the server silent clients."""
        self.cut_served.setdefault(host, set()).add(port)
        self._apply(host)

    def heal(self, host: str) -> None:
        self.cut_ports.pop(host, None)
        self.cut_served.pop(host, None)
        self._apply(host)

    def _apply(self, host: str) -> None:
        ns = self.netns(host)
        _sh("ip", "netns", "exec", ns, _tool("nft"), "delete", "table", "inet", _TABLE, check=False)
        ports, served = sorted(self.cut_ports.get(host, ())), sorted(self.cut_served.get(host, ()))
        if not ports and not served:
            return
        out, into = [], []
        if ports:
            rules = ", ".join(str(p) for p in ports)
            out.append(f"ip daddr {self.infra} tcp dport {{ {rules} }} drop;")
            into.append(f"ip saddr {self.infra} tcp sport {{ {rules} }} drop;")
        if served:
            rules = ", ".join(str(p) for p in served)
            out.append(f"ip daddr {self.infra} tcp sport {{ {rules} }} drop;")
            into.append(f"ip saddr {self.infra} tcp dport {{ {rules} }} drop;")
        _sh(
            "ip",
            "netns",
            "exec",
            ns,
            _tool("nft"),
            "-f",
            "-",
            input=f"""table inet {_TABLE} {{
  chain out {{ type filter hook output priority 0; {" ".join(out)} }}
  chain in {{ type filter hook input priority 0; {" ".join(into)} }}
}}
""",
        )

    def pids(self, host: str) -> list[int]:
        out = _sh("ip", "netns", "pids", self.netns(host), check=False)
        return [int(p) for p in out.split()]

    def kill(self, host: str) -> int:
        """SIGKILL every process of `host`, as if the machine lost power; returns how many."""
        victims = self.pids(host)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(victims)
