"""cluster_harness.py: a real Redis Cluster (redis-server --cluster-enabled yes) on free 127.0.0.1 ports.

RedisCluster.start(masters=3, replicas=1) starts masters * (1 + replicas) redis-servers,
each with its own cluster bus port (`cluster-port`, so no port + 10000 arithmetic), joins
them with `redis-cli --cluster create ... --cluster-yes` and waits until every node says
cluster_state:ok and agrees on the slot map. Every process is stopped by its PID (the
harness's Proc); every wait is bounded.

RedisCluster.start(..., tls=NodeTls(...)) starts every node with TLS only (--port 0,
--tls-port, --tls-cluster yes, --tls-replication yes) and creates the cluster with
redis-cli --tls; the helpers then talk TLS to the nodes (test_cluster_tls.py).

The helpers read the cluster straight from its nodes: keyslot(), the node serving a slot,
the map as CLUSTER SLOTS has it, a slot migrated by hand, a failover, a master killed.
"""

import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import time

from harness import Proc, Raw, RespError, StartError, free_port, tmpdir, eq

NODE_TIMEOUT_MS = 1000

# The stats fields only a redis_cluster pool (and its nodes) has: test_stats, whose pools
# are not clusters, leaves them out of its -D check; test_cluster finds them.
CLUSTER_ONLY_FIELDS = {"cluster_epoch", "cluster_state", "cluster_refreshes",
                       "cluster_refresh_errors", "cluster_map_changes", "cluster_refresh_asked",
                       "cluster_refreshed_at", "cluster_refresh_error", "role", "slots"}


def _crc16_table():
    t = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
        t.append(crc)
    return t


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16-XMODEM, Redis Cluster's key hash."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def tags_for_slots(slots, prefix="t"):
    """{slot: tag} with keyslot(tag) == slot for every slot of `slots` (searched)."""
    want = set(slots)
    out = {}
    i = 0
    while want and i < 5000000:
        t = "%s%d" % (prefix, i)
        s = crc16(t.encode()) & 16383
        if s in want:
            out[s] = t
            want.discard(s)
        i += 1
    if want:
        raise AssertionError("no tag found for %d slots" % len(want))
    return out


def keyslot(key):
    """The slot of key as Redis Cluster computes it (hash tags included)."""
    if isinstance(key, str):
        key = key.encode()
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key) % 16384


def key_in_slot(slot, prefix="k"):
    """A key whose slot is `slot` (searched: at most a few hundred thousand tries)."""
    for i in range(2000000):
        k = "%s%d" % (prefix, i)
        if keyslot(k) == slot:
            return k
    raise AssertionError("no key found for slot %d" % slot)


class NodeTls:
    """TLS for every node: its certificate and key, the CA bundle it trusts (for the cluster
    bus, replication and clients), and how the harness connects to a node
    (connect(addr, timeout) -> a harness.Raw over TLS)."""

    def __init__(self, cert, key, ca, connect):
        self.cert, self.key, self.ca, self.connect = cert, key, ca, connect

    def server_argv(self, port):
        return ["--port", "0", "--tls-port", str(port), "--tls-cluster", "yes",
                "--tls-replication", "yes", "--tls-cert-file", self.cert,
                "--tls-key-file", self.key, "--tls-ca-cert-file", self.ca]

    def cli_argv(self):
        return ["--tls", "--cacert", self.ca, "--cert", self.cert, "--key", self.key]


class Node:
    def __init__(self, port, bus, extra=(), tls=None):
        self.port = port
        self.bus = bus
        self.addr = ("127.0.0.1", port)
        self.tls = tls
        d = os.path.join(tmpdir(), "cluster-%d" % port)
        os.makedirs(d, exist_ok=True)
        ports = ["--port", str(port)] if tls is None else tls.server_argv(port)
        argv = ["redis-server"] + ports + ["--bind", "127.0.0.1",
                "--cluster-enabled", "yes", "--cluster-port", str(bus),
                "--cluster-config-file", os.path.join(d, "nodes.conf"),
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--repl-diskless-sync-delay", "0",
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", d,
                "--logfile", os.path.join(d, "redis.log")] + list(extra)
        self.argv = argv
        self.proc = Proc("cluster-%d" % port, argv)
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def client(self, timeout=10.0):
        return Raw(self.addr, timeout) if self.tls is None else self.tls.connect(self.addr, timeout)

    def cmd(self, *args, timeout=10.0):
        with self.client(timeout) as c:
            return c.rd(*args)

    def alive(self):
        return self.proc.alive()

    def kill9(self):
        """kill -9, then hold the node's two ports (bound, not listening: a connection to
        them is refused as to a dead node) so that no other process of a parallel test run
        is given them before restart() (a proxy seeded with this address would otherwise
        read another cluster's map, and the restart could not bind)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.popen.wait(5)
        self.proc.stop()
        self._held = []
        for p in (self.port, self.bus):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # SO_REUSEADDR: the dead node's TIME_WAIT sockets must not stop the bind; a
            # port bound this way is still skipped by bind(0) and connect()'s own choice
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
                self._held.append(s)
            except OSError:
                s.close()      # taken already: restart() retries, then says so

    def restart(self):
        for s in getattr(self, "_held", []):
            s.close()
        self._held = []
        for attempt in range(5):
            self.proc = Proc("cluster-%d" % self.port, self.argv)
            try:
                self.proc.wait_listening(self.port)
                return
            except StartError:
                self.proc.stop()
                if attempt == 4:
                    raise
                time.sleep(0.2)

    def nodes_line(self):
        """This node's CLUSTER NODES, for a failure message."""
        try:
            text = self.cmd("CLUSTER", "NODES", timeout=2.0)
            return text.decode() if isinstance(text, bytes) else str(text)
        except (OSError, EOFError, RespError) as e:
            return "(%s)" % e

    def stop(self):
        self.proc.stop()

    def info(self, section="cluster"):
        text = self.cmd("CLUSTER", "INFO") if section == "cluster" else self.cmd("INFO", section)
        if isinstance(text, bytes):
            text = text.decode()
        out = {}
        for line in text.splitlines():
            if ":" in line:
                k, _, v = line.partition(":")
                out[k.strip()] = v.strip()
        return out

    def myid(self):
        return self.cmd("CLUSTER", "MYID").decode()


def slots_map(node):
    """{slot: (master 'ip:port', [replica 'ip:port' ...])} from CLUSTER SLOTS of node."""
    out = {}
    for rng in node.cmd("CLUSTER", "SLOTS"):
        lo, hi = rng[0], rng[1]
        addrs = ["%s:%d" % (n[0].decode(), n[1]) for n in rng[2:]]
        for s in range(lo, hi + 1):
            out[s] = (addrs[0], addrs[1:])
    return out


_lock = None


def _one_cluster_at_a_time(wait=240.0):
    """Test programs that run a cluster take turns (make check runs programs in parallel):
    six redis-servers with a 1 s node timeout, a sanitized proxy and another program's
    cluster on two cores starve each other's cluster bus into false failovers. The lock is
    held until this program exits; past `wait` seconds the program goes on without it."""
    global _lock
    if _lock is not None:
        return
    f = open(os.path.join(tempfile.gettempdir(), "ringleader-test-cluster.lock"), "a")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _lock = f
            return
        except OSError:
            if time.monotonic() > deadline:
                print("  (another program's cluster still runs after %.0f s; going on)" % wait)
                f.close()
                _lock = False
                return
            time.sleep(0.2)


class RedisCluster:
    """masters x (1 + replicas) cluster nodes, joined and agreed."""

    def __init__(self, nodes):
        self.nodes = nodes

    @classmethod
    def start(cls, masters=3, replicas=1, extra=(), tls=None):
        _one_cluster_at_a_time()
        nodes = []
        try:
            for _ in range(masters * (1 + replicas)):
                for attempt in range(3):
                    try:
                        nodes.append(Node(free_port(), free_port(), extra, tls))
                        break
                    except StartError:
                        if attempt == 2:
                            raise
            argv = ["redis-cli"] + ([] if tls is None else tls.cli_argv()) + \
                   ["--cluster", "create"] + [n.hostport() for n in nodes] + \
                   ["--cluster-replicas", str(replicas), "--cluster-yes"]
            r = subprocess.run(argv, capture_output=True, timeout=60)
            if r.returncode != 0:
                raise StartError("redis-cli --cluster create failed: %s %s" % (
                    r.stdout[-500:], r.stderr[-500:]))
            cl = cls(nodes)
            cl.wait_ok()
            if replicas:
                cl.wait_synced()
            return cl
        except BaseException:
            for n in nodes:
                n.stop()
            raise

    def live(self):
        return [n for n in self.nodes if n.alive()]

    def by_addr(self, addr):
        for n in self.nodes:
            if n.hostport() == addr:
                return n
        raise KeyError(addr)

    def wait_ok(self, timeout=30.0, nodes=None):
        """Until every live node says cluster_state:ok, knows every slot, and all agree on
        the map (CLUSTER SLOTS identical)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                maps = []
                ok = True
                for n in (nodes or self.live()):
                    i = n.info()
                    if i.get("cluster_state") != "ok" or i.get("cluster_slots_assigned") != "16384":
                        ok = False
                        last = (n.port, i.get("cluster_state"), i.get("cluster_slots_assigned"))
                        break
                    maps.append(slots_map(n))
                if ok and all(m == maps[0] for m in maps):
                    return maps[0]
                if ok:
                    last = "maps differ"
            except (OSError, EOFError, RespError) as e:
                last = e
            time.sleep(0.1)
        raise AssertionError("cluster not ok after %.0fs: %s\n%s" % (
            timeout, last, "\n".join("node %d:\n%s" % (n.port, n.nodes_line())
                                     for n in (nodes or self.live()))))

    def wait_ok_or_fix(self, first=25.0, then=40.0):
        """wait_ok; if the cluster has not converged after `first` seconds, give each master
        the slots its own view leaves unassigned while every other live node says they are
        its (CLUSTER ADDSLOTS on it, as an operator would), and wait again. Seen after a
        reshard, a manual failover and a master killed in a row on a loaded box: the
        promoted replica's own view lacked one slot every other node gave it, so it said
        cluster_state:fail for good. That is the cluster's state, not the proxy's; the
        repair is printed."""
        try:
            return self.wait_ok(timeout=first)
        except AssertionError as e:
            print("  (the cluster had not converged after %.0f s: %s)" % (
                first, str(e).splitlines()[0]))
        views = {n.port: slots_map(n) for n in self.live()}
        for n in self.live():
            others = [v for p, v in views.items() if p != n.port]
            mine = [s for s in range(16384) if s not in views[n.port] and others and
                    all(v.get(s, (None,))[0] == n.hostport() for v in others)]
            if mine:
                print("  CLUSTER ADDSLOTS on %s: %d slot(s) (the first %d) its own view left "
                      "unassigned and every other node gives it" % (n.hostport(), len(mine), mine[0]))
                n.cmd("CLUSTER", "ADDSLOTS", *mine)
        return self.wait_ok(timeout=then)

    def wait_synced(self, timeout=30.0):
        """Until every live replica's link to its master is up (a replica that never
        synced does not fail over)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [n.port for n in self.live()
                       if n.info("replication").get("role") == "slave" and
                       n.info("replication").get("master_link_status") != "up"]
            if not pending:
                return
            time.sleep(0.1)
        raise AssertionError("replicas not synced after %.0fs: %s" % (timeout, pending))

    def map(self):
        return slots_map(self.live()[0])

    def masters(self):
        m = self.map()
        return sorted({v[0] for v in m.values()})

    def master_of(self, key):
        return self.by_addr(self.map()[keyslot(key)][0])

    def replicas_of(self, master):
        """The nodes replicating master (a Node), from its own INFO replication."""
        out = []
        for n in self.live():
            i = n.info("replication")
            if i.get("role") == "slave" and int(i.get("master_port", 0)) == master.port:
                out.append(n)
        return out

    def migrate_slot(self, slot, dst, batch=10, pause=0.0, between=None):
        """Move slot to node dst by hand: IMPORTING on dst, MIGRATING on the source, MIGRATE
        the keys in batches (between(i) is called after each batch), then SETSLOT NODE on
        both and on every other master. Returns the number of keys moved."""
        src = self.by_addr(self.map()[slot][0])
        dst_id = dst.myid()
        src_id = src.myid()
        eq(dst.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id), "OK", "IMPORTING")
        eq(src.cmd("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id), "OK", "MIGRATING")
        moved = 0
        i = 0
        while True:
            keys = src.cmd("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            r = src.cmd("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
            eq(r, "OK", "MIGRATE")
            moved += len(keys)
            i += 1
            if between:
                between(i)
            if pause:
                time.sleep(pause)
        for n in [dst, src] + [self.by_addr(a) for a in self.masters()]:
            n.cmd("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return moved

    def stop(self):
        for n in self.nodes:
            n.stop()
