"""Emulated cluster nodes on one machine: each node a network and UTS namespace of its own,
with its own hostname, its own CPUs (an affinity set that everything started on it inherits)
and a veth link to a switch (a bridge in a namespace of its own), every link shaped with tc's
tbf to a bandwidth. The file system is shared, as on a cluster. Needs root and iproute2.

    with Cluster(nodes=2, rate="1gbit") as c:
        rc, out = c.run(["lctrain", "train", ...], ranks_per_node=1)
        c.kill_node(1)

The launcher is Open MPI's mpirun unless the cluster is made with mpi="mpich" (MPICH's hydra
`mpiexec`, /usr/bin/mpiexec.mpich unless mpiexec= names another): both run on node 0 and reach
the other nodes through the same agent (launch_argv, mpirun_argv, mpiexec_argv).

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
    MPIS = ("openmpi", "mpich")

    def __init__(self, nodes, rate=None, cpus_per_node=None, burst="1mb", mpi="openmpi", mpiexec=None):
        if mpi not in self.MPIS:
            raise ValueError(f"mpi is one of {self.MPIS}, not {mpi!r}")
        self.mpi = mpi
        self.mpiexec = mpiexec or {"openmpi": "mpirun", "mpich": "mpiexec.mpich"}[mpi]
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
        mpirun = [self.mpiexec, "--oversubscribe", "-np", str(sum(per)), "-H", hosts,
                  "--bind-to", "none", "--mca", "plm_rsh_agent", self.agent,
                  "--mca", "btl", "tcp,self,vader", "--mca", "btl_tcp_if_include", "eth0",
                  "--mca", "oob_tcp_if_include", "eth0", "--mca", "mpi_yield_when_idle", "1", *extra, *cmd]
        return self.on_node(0, mpirun)

    def mpiexec_argv(self, cmd, ranks_per_node, nodes=None, extra=()):
        """MPICH's hydra mpiexec started on node 0, ranks placed as mpirun_argv places them.
        Hydra starts its proxy on node 0 itself and on every other node through the agent
        (`-launcher ssh -launcher-exec AGENT` calls `AGENT -x HOST CMD`, and the agent skips
        the -x). Hosts are the nodes' addresses, as for Open MPI: the node names resolve nowhere
        (/etc/hosts is the machine's, and is left alone), and an address is what the agent
        matches. `-iface eth0` makes mpiexec give the proxies its control port at node 0's
        address on the link, which every node can reach. No binding: each node's ranks share its
        CPUs (lctrain divides them), as Open MPI's `--bind-to none` above.

        UCX (MPICH here is ch4:ucx) carries the traffic between nodes. Its shared-memory
        transports (sysv, posix, cma) count two processes as on one host when the kernel's boot
        id is the same, which it is in every namespace here: left to its defaults, UCX moved
        the 'inter-node' messages through shared memory (UCX_LOG_LEVEL=info showed
        `ep_cfg[1]: tag(sysv/memory cma/memory)` between node0 and node1), bypassing the
        shaped links. UCX_TLS=tcp,self keeps it on TCP, and UCX_NET_DEVICES=eth0 on the node's
        link (not lo). Ranks on one node are still grouped by the host hydra launched them on
        (MPI_COMM_TYPE_SHARED: 2 nodes x 2 ranks, cp 2 x dp 2, ran its ring hops over shm).

        Known hang: MPICH 4.0's MPI_Finalize closes every UCX endpoint (a flush) before its PMI
        barrier, and from UCX 1.12 a TCP endpoint's flush waits for the peer to acknowledge it
        (ucx 68fb8e3733). When one rank has finished its flush and sits in the PMI barrier, no
        longer progressing UCX, before the other's flush reaches it, the other waits forever.
        Measured here: 1 run in 3 to 25 of lctrain cp 2 or dp 2 across two nodes (S = 600 to
        16384, the host loaded), every rank's work done and written; UCX_TCP_PUT_ENABLE=n did
        not avoid it. MPICH 4.2 moved the barrier before the flushes (mpich d6c7cd5b64).
        run(finished=...) tells this hang from others and ends it."""
        nodes = nodes or self.n
        per = ranks_per_node if isinstance(ranks_per_node, list) else [ranks_per_node] * nodes
        hosts = ",".join(f"{a}:{k}" for a, k in zip(self.addr, per))
        mpiexec = [self.mpiexec, "-launcher", "ssh", "-launcher-exec", self.agent, "-hosts", hosts,
                   "-n", str(sum(per)), "-iface", "eth0", "-genv", "UCX_TLS", "tcp,self",
                   "-genv", "UCX_NET_DEVICES", "eth0", *extra, *cmd]
        return self.on_node(0, mpiexec)

    def launch_argv(self, cmd, ranks_per_node, nodes=None, extra=()):
        """The launch line of this cluster's MPI: mpirun_argv or mpiexec_argv."""
        argv = self.mpirun_argv if self.mpi == "openmpi" else self.mpiexec_argv
        return argv(cmd, ranks_per_node, nodes, extra)

    def start(self, cmd, ranks_per_node, out, nodes=None, env=None, extra=()):
        e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
        for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND"):
            e.pop(k, None)
        return subprocess.Popen(self.launch_argv(cmd, ranks_per_node, nodes, extra), stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=e)

    HUNG = "hung after finishing"  # run()'s code for a job that printed `finished` and never exited

    def run(self, cmd, ranks_per_node, nodes=None, env=None, timeout=600, extra=(), finished=None, grace=15):
        """(the launcher's exit code, the job's output). With `finished` (a text the job prints
        when its work is done, e.g. lctrain's `wrote RUN/timing.h5`): a launcher still running
        `grace` s after that text appeared is taken for MPICH 4.0's hang in MPI_Finalize (see
        mpiexec_argv); every process on the nodes is killed and the code is Cluster.HUNG."""
        with tempfile.TemporaryFile("w+") as out:
            p = self.start(cmd, ranks_per_node, out, nodes, env, extra)
            try:
                if finished is None:
                    p.wait(timeout=timeout)
                elif self._hung_after(p, out, finished, timeout, grace):
                    for ns in self.ns:
                        self._kill_pids(ns)
                    p.wait()
                    out.seek(0)
                    return self.HUNG, out.read()
            finally:
                if p.poll() is None:
                    p.kill()
            out.seek(0)
            return p.returncode, out.read()

    @staticmethod
    def _hung_after(p, out, finished, timeout, grace):
        """Waits for p; True when it was still running `grace` s after `finished` appeared in out."""
        t0, seen = time.time(), None
        while p.poll() is None:
            if time.time() - t0 > timeout:
                raise subprocess.TimeoutExpired(p.args, timeout)
            if seen is None:
                fd = out.fileno()  # pread: the launcher writes through the same file offset
                if finished in os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace"):
                    seen = time.time()
            elif time.time() - seen > grace:
                return True
            time.sleep(0.2)
        return False

    def kill_node(self, k):
        """Every process of node k dies at once (kill -9), as when a node is lost."""
        return self._kill_pids(self.ns[k])

    def wait_for(self, path, timeout=120):
        t0 = time.time()
        while not os.path.exists(path):
            if time.time() - t0 > timeout:
                raise AssertionError(f"{path} did not appear in {timeout} s")
            time.sleep(0.2)
