"""Emulated cluster nodes on one machine: each node a network and UTS namespace of its own,
with its own hostname, its own CPUs (an affinity set that everything started on it inherits)
and a veth link to a switch (a bridge in a namespace of its own), every link shaped with tc's
tbf to a bandwidth. The file system is shared, as on a cluster. Needs root and iproute2.

    with Cluster(nodes=2, rate="1gbit") as c:
        p = c.mpirun(["lctrain", "train", ...], ranks_per_node=1)
        c.kill_node(1)

Addresses are 198.18.0.K/24 (RFC 2544's range for benchmarking interconnects), used only
inside the namespaces made here; nothing touches the machine's own network namespace.
Latency is not added: these kernels have the tbf and htb qdiscs but not netem, so a link
here has the bandwidth asked for and the sub-10 microsecond latency of a veth pair.
Everything is removed on exit from the `with` block, also when a test fails; namespaces
left by a killed run carry the prefix `lct` and this process's id.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time


class Unavailable(Exception):
    """This machine cannot host emulated nodes (not root, no iproute2, no namespaces)."""


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


def cpu_list(cpus):
    return ",".join(map(str, cpus))


class Cluster:
    def __init__(self, nodes, rate=None, cpus_per_node=None, burst="1mb"):
        if os.geteuid() != 0:
            raise Unavailable("needs root (network namespaces)")
        if not shutil.which("ip") or not shutil.which("tc"):
            raise Unavailable("needs iproute2 (ip, tc)")
        self.n, self.rate, self.burst = nodes, rate, burst
        self.tag = f"lct{os.getpid() % 100000}"
        self.switch = f"{self.tag}sw"
        self.ns = [f"{self.tag}n{k}" for k in range(nodes)]
        self.hostnames = [f"node{k}" for k in range(nodes)]
        self.addr = [f"198.18.0.{k + 1}" for k in range(nodes)]
        mine = sorted(os.sched_getaffinity(0))
        per = cpus_per_node or max(1, len(mine) // nodes)
        # Node k gets its own CPUs where there are enough; more nodes than CPUs share them round-robin.
        self.cpus = [[mine[(k * per + i) % len(mine)] for i in range(per)] for k in range(nodes)]
        self.state = tempfile.mkdtemp(prefix=f"{self.tag}.")
        self.agent = os.path.join(self.state, "agent.sh")

    # --- set-up and tear-down --------------------------------------------------------------

    def __enter__(self):
        try:
            self._up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _up(self):
        r = sh("ip", "netns", "add", self.switch, check=False)
        if r.returncode != 0:
            raise Unavailable(f"cannot create a network namespace: {r.stderr.strip()}")
        sw = ["ip", "netns", "exec", self.switch]
        sh(*sw, "ip", "link", "add", "br0", "type", "bridge")
        sh(*sw, "ip", "link", "set", "br0", "up")
        for k, ns in enumerate(self.ns):
            sh("ip", "netns", "add", ns)
            node = ["ip", "netns", "exec", ns]
            sh(*node, "ip", "link", "set", "lo", "up")
            # The pair is made inside the node, then its far end moved to the switch.
            sh(*node, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", f"p{k}")
            sh(*node, "ip", "link", "set", f"p{k}", "netns", self.switch)
            sh(*node, "ip", "addr", "add", f"{self.addr[k]}/24", "dev", "eth0")
            sh(*node, "ip", "link", "set", "eth0", "up")
            sh(*sw, "ip", "link", "set", f"p{k}", "master", "br0")
            sh(*sw, "ip", "link", "set", f"p{k}", "up")
            if self.rate:  # both directions: the node's egress, and the switch's port towards it
                for where, dev in ((node, "eth0"), (sw, f"p{k}")):
                    sh(*where, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                       "burst", self.burst, "latency", "50ms")
        self._write_agent()

    def _write_agent(self):
        """Open MPI's rsh agent (and hydra's launcher): `agent.sh HOST CMD...` runs CMD on the
        node whose address is HOST, in its namespaces, on its CPUs."""
        cases = "\n".join(f'  {a}) ns={ns}; host={h}; cpus={cpu_list(c)} ;;'
                          for a, ns, h, c in zip(self.addr, self.ns, self.hostnames, self.cpus))
        with open(self.agent, "w") as f:
            f.write(f"""#!/bin/bash
while [[ "$1" == -* ]]; do shift; done
case "$1" in
{cases}
  *) echo "agent: unknown node $1" >&2; exit 1 ;;
esac
shift
exec ip netns exec "$ns" unshare --uts /bin/bash -c 'hostname "$0"; exec taskset -c "$1" /bin/bash -c "$2"' "$host" "$cpus" "$*"
""")
        os.chmod(self.agent, 0o755)

    def close(self):
        for ns in getattr(self, "ns", []):
            self._kill_pids(ns)
            sh("ip", "netns", "del", ns, check=False)
        if hasattr(self, "switch"):
            sh("ip", "netns", "del", self.switch, check=False)
        shutil.rmtree(getattr(self, "state", ""), ignore_errors=True)

    @staticmethod
    def _kill_pids(ns, sig=signal.SIGKILL):
        r = sh("ip", "netns", "pids", ns, check=False)
        pids = [int(p) for p in r.stdout.split()]
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        return pids

    # --- running on the nodes --------------------------------------------------------------

    def on_node(self, k, cmd):
        """argv that runs `cmd` on node k (its namespaces and CPUs)."""
        return ["ip", "netns", "exec", self.ns[k], "unshare", "--uts", "/bin/bash", "-c",
                'hostname "$0"; exec taskset -c "$1" "${@:2}"', self.hostnames[k], cpu_list(self.cpus[k]),
                *map(str, cmd)]

    def mpirun_argv(self, cmd, ranks_per_node, nodes=None, extra=()):
        """Open MPI's mpirun started on node 0, with ranks_per_node ranks on each of the first
        `nodes` nodes (or a list: that many on each node): TCP between nodes over the shaped
        links, shared memory inside one."""
        nodes = nodes or self.n
        per = ranks_per_node if isinstance(ranks_per_node, list) else [ranks_per_node] * nodes
        hosts = ",".join(f"{a}:{k}" for a, k in zip(self.addr, per))
        mpirun = ["mpirun", "--oversubscribe", "-np", str(sum(per)), "-H", hosts,
                  "--bind-to", "none", "--mca", "plm_rsh_agent", self.agent,
                  "--mca", "btl", "tcp,self,vader", "--mca", "btl_tcp_if_include", "eth0",
                  "--mca", "oob_tcp_if_include", "eth0", "--mca", "mpi_yield_when_idle", "1", *extra, *cmd]
        return self.on_node(0, mpirun)

    def start(self, cmd, ranks_per_node, out, nodes=None, env=None, extra=()):
        e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
        for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND"):
            e.pop(k, None)
        return subprocess.Popen(self.mpirun_argv(cmd, ranks_per_node, nodes, extra), stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=e)

    def run(self, cmd, ranks_per_node, nodes=None, env=None, timeout=600, extra=()):
        with tempfile.TemporaryFile("w+") as out:
            p = self.start(cmd, ranks_per_node, out, nodes, env, extra)
            try:
                p.wait(timeout=timeout)
            finally:
                if p.poll() is None:
                    p.kill()
            out.seek(0)
            return p.returncode, out.read()

    def kill_node(self, k):
        """Every process of node k dies at once (kill -9), as when a node is lost."""
        return self._kill_pids(self.ns[k])

    def wait_for(self, path, timeout=120):
        t0 = time.time()
        while not os.path.exists(path):
            if time.time() - t0 > timeout:
                raise AssertionError(f"{path} did not appear in {timeout} s")
            time.sleep(0.2)
