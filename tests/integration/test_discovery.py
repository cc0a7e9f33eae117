"""test_discovery.py: servers from DNS (issue 26): SRV discovery and host names re-resolved.

A dnsmasq of the test's own (127.0.0.1, a free port, `dns_servers:` points the proxy at it)
serves SRV records for memcached on free ports and the names of their targets from an
addn-hosts file (re-read on SIGHUP). Proved here:

- SRV for three memcached, then four: the fourth is adopted (how long after, against
  resolve_interval + 1 s, is said, not asserted), epoch + 1, the keys that moved (found by
  where a second write of every key lands) are about a quarter, all of them to the new
  server, and the log's movement report says so;
- dnsmasq stopped: traffic goes on with 0 errors, the pool keeps its four servers, the
  failures are counted (/config's dns) and logged;
- a host name in servers: whose address changes (127.0.0.1 -> 127.0.0.2, one memcached on
  each at the same port) is reconnected at the new address without moving any key: every
  key stays with the name ringleader-ring places it on from the file (the name is hashed,
  not the address), and the movement report says 0.
"""

import hashlib
import json
import subprocess
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Proc, Proxy, Raw, Runner, Skip, StartError, binary, check, eq,  # noqa: E402
                     free_port, http, patience, ring_owners, tmpdir)

R = Runner("test_discovery", per_test_timeout=60, total_timeout=180)
SRV = "_memcache._tcp.cache.test"
INTERVAL = 1


def say(*a):
    print(*a)
    sys.stdout.flush()


class Dnsmasq:
    """dnsmasq on 127.0.0.1:port: SRV records (target, port, weight) and a hosts file."""

    def __init__(self, port, srv, hosts):
        self.port = port
        self.dir = tmpdir()
        self.hosts_path = os.path.join(self.dir, "dns-hosts-%d" % port)
        self.write_hosts(hosts)
        argv = ["dnsmasq", "--no-daemon", "--port=%d" % port, "--listen-address=127.0.0.1",
                "--bind-interfaces", "--no-resolv", "--no-hosts", "--pid-file=",
                "--addn-hosts=%s" % self.hosts_path, "--local-ttl=0"]
        if os.geteuid() == 0:
            argv.append("--user=root")
        for target, p, w in srv:
            argv.append("--srv-host=%s,%s,%d,0,%d" % (SRV, target, p, w))
        self.proc = Proc("dnsmasq-%d" % port, argv)
        deadline = time.monotonic() + patience(10)
        while "started" not in self.proc.log_tail() and time.monotonic() < deadline:
            check(self.proc.alive(), "dnsmasq exited: %s" % self.proc.log_tail())
            time.sleep(0.02)

    def write_hosts(self, hosts):
        tmp = self.hosts_path + ".tmp"
        with open(tmp, "w") as f:
            for name, ip in hosts.items():
                f.write("%s %s\n" % (ip, name))
        os.rename(tmp, self.hosts_path)

    def reread(self, hosts):
        """New addresses: the hosts file again and SIGHUP (dnsmasq re-reads addn-hosts)."""
        self.write_hosts(hosts)
        os.kill(self.proc.pid, 1)

    def stop(self):
        self.proc.stop()


class Mc:
    """memcached on ip:port (127.0.0.2 is loopback too)."""

    def __init__(self, ip, port):
        self.addr = (ip, port)
        argv = ["memcached", "-l", ip, "-p", str(port), "-U", "0", "-t", "1", "-m", "16"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        self.proc = Proc("memcached-%s-%d" % (ip, port), argv)
        deadline = time.monotonic() + patience(10)
        while True:
            try:
                Raw(self.addr, 0.5).close()
                return
            except OSError:
                check(self.proc.alive() and time.monotonic() < deadline,
                      "memcached on %s:%d did not start: %s" % (ip, port, self.proc.log_tail()))
                time.sleep(0.02)

    def holds(self, keys):
        found = {}
        with Raw(self.addr) as c:
            for i in range(0, len(keys), 100):
                for k, _f, v, _c in c.mc_get(b"get", *keys[i:i + 100]):
                    found[k] = v
        return found

    def stop(self):
        self.proc.stop()


def need_tools():
    for tool in ("dnsmasq", "memcached"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "/usr/bin:/usr/sbin").split(":") + ["/usr/sbin"]):
            raise Skip("%s is not installed (scripts/deps)" % tool)


def pool_config(px, pool="cache"):
    st, body = http(px.admin_port, "GET", "/config")
    eq(st, 200, "/config")
    return json.loads(body)["pools"][pool]


def wait_for(what, pred, timeout):
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("not within %.1fs: %s" % (patience(timeout), what))


def spread_keys(prefix, n):
    """Keys whose fnv1a hashes spread (numbered keys cluster on a few ketama points)."""
    return [prefix + b":" + hashlib.sha1(b"%d" % i).hexdigest()[:16].encode() for i in range(n)]


def set_all(px, keys, value):
    with px.client() as c:
        for k in keys:
            eq(c.mc_store(b"set", k, value + k), b"STORED\r\n", "set %r through the proxy" % k)


def where(mcs, keys, value):
    """{key: index of the memcached holding value+key}."""
    out = {}
    for i, m in enumerate(mcs):
        for k, v in m.holds(keys).items():
            if v == value + k:
                out[k] = i
    eq(len(out), len(keys), "every key found on one server")
    return out


@R.test
def srv_discovery_adopts_a_fourth_server_and_survives_dns_down(env):
    need_tools()
    dport = free_port()
    mcs = [Mc("127.0.0.1", free_port()) for _ in range(4)]
    names = {"m%d.cache.test" % i: "127.0.0.1" for i in range(4)}
    srv3 = [("m%d.cache.test" % i, mcs[i].addr[1], 1) for i in range(3)]
    dns = Dnsmasq(dport, srv3, names)
    px = None
    try:
        px = Proxy({"cache": {"resolve_interval": INTERVAL, "discovery": "srv:" + SRV}},
                   glob={"dns_servers": ["127.0.0.1:%d" % dport]}, admin=True)
        cfg = pool_config(px)
        eq(sorted(s["address"] for s in cfg["servers"]),
           sorted("127.0.0.1:%d" % m.addr[1] for m in mcs[:3]), "three servers from SRV")
        epoch = cfg["epoch"]
        keys = spread_keys(b"disc", 400)
        set_all(px, keys, b"one:")
        before = where(mcs, keys, b"one:")
        eq(sorted(set(before.values())), [0, 1, 2], "the keys spread over the three")

        # four records: a new dnsmasq on the same port (SRV records are its command line)
        dns.stop()
        dns = Dnsmasq(dport, srv3 + [("m3.cache.test", mcs[3].addr[1], 1)], names)
        t0 = time.monotonic()
        cfg = wait_for("a fourth server", lambda: (lambda c: c if len(c["servers"]) == 4 else None)(
            pool_config(px)), 30)     # a bound against a hang; the figure is said below
        took = time.monotonic() - t0
        say("fourth server adopted %.2fs after dnsmasq answered (resolve_interval %ds)" % (
            took, INTERVAL))
        eq(cfg["epoch"], epoch + 1, "epoch + 1")
        set_all(px, keys, b"two:")
        after = where(mcs, keys, b"two:")
        moved = [k for k in keys if after[k] != before[k]]
        frac = len(moved) / len(keys)
        say("keys moved: %d of %d (%.3f; the floor is 0.25)" % (len(moved), len(keys), frac))
        check(all(after[k] == 3 for k in moved), "every moved key went to the new server")
        check(0.15 <= frac <= 0.35, "about a quarter of the keys moved: %.3f" % frac)
        log = px.log_tail(200)
        check("reload (dns)" in log and "+1 -0 servers" in log, "the movement report: %s" % log)

        # DNS down: 0 errors, the last list kept, failures counted
        dns.stop()
        deadline = time.monotonic() + patience(3 * INTERVAL + 0.5)
        rounds = 0
        with px.client() as c:
            while time.monotonic() < deadline or rounds < 3:
                for k in keys[rounds % 4::8]:
                    got = c.mc_get(b"get", k)
                    eq([v for _k, _f, v, _c in got], [b"two:" + k], "get %r with DNS down" % k)
                rounds += 1
                time.sleep(0.02)    # a client's pace, not a load test
        cfg = pool_config(px)
        eq(len(cfg["servers"]), 4, "the last good list is kept")
        srv = [n for n in cfg["dns"]["names"] if n["type"] == "SRV"][0]
        check(srv["failures"] > 0 and srv["failing"], "DNS failures counted: %r" % srv)
        check("the last good answer stays in use" in px.log_tail(50), "DNS failure logged")
        say("DNS down for %d rounds of gets: 0 errors, %d failure(s) counted" % (
            rounds, srv["failures"]))
    finally:
        if px is not None:
            eq(px.stop(), 0, "clean exit")
        dns.stop()
        for m in mcs:
            m.stop()


@R.test
def a_name_whose_address_changes_reconnects_without_moving_keys(env):
    need_tools()
    dport = free_port()
    port = free_port()
    a1, a2 = Mc("127.0.0.1", port), Mc("127.0.0.2", port)
    b = Mc("127.0.0.1", free_port())
    dns = Dnsmasq(dport, [], {"a.cache.test": "127.0.0.1", "b.cache.test": "127.0.0.1"})
    px = None
    try:
        px = Proxy({"cache": {"resolve_interval": INTERVAL,
                              "servers": ["a.cache.test:%d:1" % port,
                                          "b.cache.test:%d:1" % b.addr[1]]}},
                   glob={"dns_servers": ["127.0.0.1:%d" % dport]}, admin=True)
        keys = spread_keys(b"addr", 200)
        # the placement of the file's names, as ringleader-ring computes it
        want = ring_owners(px.conf_path, "cache", keys)
        label_a = "a.cache.test:%d" % port
        set_all(px, keys, b"one:")
        at = where([a1, b], keys, b"one:")
        eq({k: ("a" if at[k] == 0 else "b") for k in keys},
           {k: ("a" if want[k] == label_a else "b") for k in keys},
           "keys placed by the names ringleader-ring hashes")
        epoch = pool_config(px)["epoch"]

        dns.reread({"a.cache.test": "127.0.0.2", "b.cache.test": "127.0.0.1"})
        addr2 = "127.0.0.2:%d" % port
        wait_for("a.cache.test at 127.0.0.2", lambda: addr2 in [
            s["address"] for s in pool_config(px)["servers"]], INTERVAL + 1)
        set_all(px, keys, b"two:")
        at2 = where([a2, b], keys, b"two:")
        eq(at2, at, "every key stays with its name (a's now at 127.0.0.2)")
        check(not any(v == b"two:" + k for k, v in a1.holds(keys).items()),
              "nothing written at the old address")
        log = px.log_tail(100)
        check("now resolves to 127.0.0.2" in log, "the change is logged")
        check("moved 0.0000 of the keyspace" in log, "the movement report says 0: %s" % log)
        say("address change: epoch %d -> %d, 0 keys moved" % (epoch, pool_config(px)["epoch"]))
    finally:
        if px is not None:
            eq(px.stop(), 0, "clean exit")
        dns.stop()
        for m in (a1, a2, b):
            m.stop()


@R.test
def the_new_keys_are_checked_with_clear_errors(env):
    d = tmpdir()
    path = os.path.join(d, "discovery-bad.yml")
    with open(path, "w") as f:
        f.write("ringleader:\n  config_source: etcd://127.0.0.1:2379/x\n"
                "  dns_servers: [dns.example:53]\n"
                "c:\n  listen: 127.0.0.1:1\n  discovery: _memcache\n"
                "  servers:\n   - 127.0.0.1:11211:1\n")
    r = subprocess.run([binary("ringleader"), "-t", "-c", path], capture_output=True,
                       timeout=patience(20))
    out = r.stdout.decode() + r.stderr.decode()
    eq(r.returncode, 1, "invalid: %s" % out)
    for want in ("3:16: key 'dns_servers': 'dns.example:53' is not an IP address and port",
                 "4:1: key 'c': a pool in a file with config_source",
                 "6:14: key 'discovery': '_memcache' is not srv:NAME"):
        check(want in out, "%r in %s" % (want, out))
    # discovery without servers:, and config_source without pools, are whole files
    for text in ("c:\n  listen: 127.0.0.1:1\n  discovery: srv:_m._tcp.x\n",
                 "ringleader:\n  config_source: etcd://127.0.0.1:2379/x\n"):
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([binary("ringleader"), "-t", "-c", path], capture_output=True,
                           timeout=patience(20))
        eq(r.returncode, 0, "valid: %s" % (r.stdout + r.stderr).decode())


if __name__ == "__main__":
    R.main(harness.Env)
