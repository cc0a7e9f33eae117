"""test_etcd.py: the pools document from etcd (config_source), three proxies that agree, and
ringleader-ring --fleet (issue 26).

An etcd of the test's own (127.0.0.1, free client and peer ports, a data directory under the
test's tmpdir) holds the pools document at one key. Three proxies run files that name only
their admin endpoint and `config_source: etcd://.../ringleader/pools`; the document's pool
listens on one port, which the three share (SO_REUSEPORT: the kernel spreads the clients
over them, as a load balancer would over a fleet). Proved here:

- a new document is served by all three with one checksum (a bounded wait), and
  `ringleader-ring --fleet` says they agree (exit 0);
- an invalid document is refused by all three: the old pools serve, /health and the log
  say why;
- a proxy whose pools differ (its own file) makes `--fleet` name it and exit 3;
- etcd killed (SIGKILL) and started again on the same data: the pools serve throughout
  (0 errors), each proxy watches again (the log says from which revision) and the next
  document reaches all three.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Memcached, Proc, Raw, Runner, Skip, StartError, binary, check, eq,  # noqa: E402
                     free_port, http, patience, tmpdir)

R = Runner("test_etcd", per_test_timeout=60, total_timeout=150)
KEY = "/ringleader/pools"


def say(*a):
    print(*a)
    sys.stdout.flush()


def have(tool):
    return any(os.access(os.path.join(d, tool), os.X_OK)
               for d in os.environ.get("PATH", "/usr/bin").split(":") + ["/usr/sbin"])


class Etcd:
    """etcd on 127.0.0.1 (client and peer ports free), its data in the test's tmpdir."""

    def __init__(self):
        self.port, self.peer = free_port(), free_port()
        self.data = os.path.join(tmpdir(), "etcd-%d" % self.port)
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.start()

    def start(self):
        peer = "http://127.0.0.1:%d" % self.peer
        self.proc = Proc("etcd-%d" % self.port, [
            "etcd", "--name", "t", "--data-dir", self.data,
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", "t=" + peer, "--log-level", "warn"])
        deadline = time.monotonic() + patience(20)
        while True:
            try:
                st, body = self.post("/v3/kv/range", {"key": self.b64("health")})
                if st == 200:
                    return
            except OSError:
                pass
            check(self.proc.alive() and time.monotonic() < deadline,
                  "etcd did not start: %s" % self.proc.log_tail())
            time.sleep(0.05)

    @staticmethod
    def b64(s):
        import base64
        return base64.b64encode(s.encode()).decode()

    def post(self, path, doc):
        import urllib.request
        req = urllib.request.Request(self.url + path, data=json.dumps(doc).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=patience(5)) as r:
            return r.status, json.loads(r.read())

    def put(self, text):
        st, body = self.post("/v3/kv/put", {"key": self.b64(KEY), "value": self.b64(text)})
        eq(st, 200, "etcd put")
        return int(body["header"]["revision"])

    def kill(self):
        self.proc.kill()
        self.proc.stop()

    def stop(self):
        if self.proc:
            self.proc.stop()


class EtcdProxy:
    """ringleader on a file with config_source only (and its admin endpoint)."""

    def __init__(self, etcd, listen_port, n, pools_text=None):
        d = tmpdir()
        self.admin_port, self.stats_port = free_port(), free_port()
        self.conf_path = os.path.join(d, "etcd-proxy-%d.yml" % self.admin_port)
        self.log_file = os.path.join(d, "etcd-proxy-%d.out" % self.admin_port)
        with open(self.conf_path, "w") as f:
            f.write("ringleader:\n  admin: 127.0.0.1:%d\n" % self.admin_port)
            if pools_text is None:
                f.write("  config_source: etcd://127.0.0.1:%d%s\n" % (etcd.port, KEY))
            else:
                f.write(pools_text)
        self.url = "http://127.0.0.1:%d" % self.admin_port
        self.proc = Proc("ringleader-etcd-%d" % n, [
            binary("ringleader"), "-c", self.conf_path, "-s", str(self.stats_port),
            "-a", "127.0.0.1", "-o", self.log_file, "-v", "6", "--workers", "1"])
        try:
            self.proc.wait_listening(self.admin_port)
            # the pool's port is shared (SO_REUSEPORT): the log says this one listens
            deadline = time.monotonic() + patience(10)
            while "listening on 127.0.0.1:%d" % listen_port not in self.log():
                if not self.proc.alive() or time.monotonic() > deadline:
                    raise StartError("not listening on %d" % listen_port)
                time.sleep(0.02)
        except StartError as e:
            self.proc.stop()
            raise StartError("%s\n%s" % (e, self.log()))

    def log(self):
        try:
            with open(self.log_file, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def pool(self):
        st, body = http(self.admin_port, "GET", "/config")
        eq(st, 200, "/config")
        return json.loads(body)["pools"]["cache"]

    def health(self):
        return http(self.admin_port, "GET", "/health")[1]

    def stop(self):
        return self.proc.stop()


def doc(listen_port, servers):
    return "cache:\n  listen: 127.0.0.1:%d\n  servers:\n%s" % (
        listen_port, "".join("    - %s:1\n" % s.hostport() for s in servers))


def wait_all(proxies, pred, what, timeout):
    deadline = time.monotonic() + patience(timeout)
    t0 = time.monotonic()
    while True:
        got = [pred(p) for p in proxies]
        if all(got):
            return time.monotonic() - t0
        check(time.monotonic() < deadline, "not within %.1fs: %s (%r)" % (
            patience(timeout), what, got))
        time.sleep(0.05)


def fleet(urls):
    r = subprocess.run([binary("ringleader-ring"), "--fleet", ",".join(urls)],
                       capture_output=True, timeout=patience(30))
    return r.returncode, r.stdout.decode() + r.stderr.decode()


class EtcdEnv:
    def __init__(self):
        if not have("etcd"):
            raise Skip("etcd is not installed (scripts/deps: etcd-server)")
        self.mcs = [Memcached.start() for _ in range(2)]
        self.etcd = Etcd()
        self.listen = free_port()
        self.rev = self.etcd.put(doc(self.listen, self.mcs[:1]))
        self.proxies = []
        try:
            for i in range(3):
                self.proxies.append(EtcdProxy(self.etcd, self.listen, i))
        except Exception:
            self.close()
            raise

    def close(self):
        for p in self.proxies:
            p.stop()
        self.etcd.stop()
        for m in self.mcs:
            m.stop()


@R.test
def a_new_document_reaches_all_three_with_one_checksum(env):
    before = {p.pool()["ring_checksum"] for p in env.proxies}
    eq(len(before), 1, "three proxies, one checksum at start")
    eq({p.pool()["source_revision"] for p in env.proxies}, {env.rev}, "the revision read")
    rev = env.etcd.put(doc(env.listen, env.mcs))
    took = wait_all(env.proxies, lambda p: p.pool()["source_revision"] == rev,
                    "revision %d everywhere" % rev, 2)
    sums = {p.pool()["ring_checksum"] for p in env.proxies}
    eq(len(sums), 1, "one checksum on the three")
    check(sums != before, "a new ring")
    eq({len(p.pool()["servers"]) for p in env.proxies}, {2}, "two servers everywhere")
    say("new document (revision %d) served by all three in %.2fs, checksum %s" % (
        rev, took, sums.pop()))
    rc, out = fleet([p.url for p in env.proxies])
    say(out.strip())
    eq(rc, 0, "--fleet agrees")
    check("pool cache: agree" in out, out)


@R.test
def an_invalid_document_is_refused_by_all_three(env):
    sums = {p.pool()["ring_checksum"] for p in env.proxies}
    env.etcd.put("cache: [not, closed\n")
    wait_all(env.proxies, lambda p: "last reload failed" in p.health(), "/health says so", 5)
    eq({p.pool()["ring_checksum"] for p in env.proxies}, sums, "the old pools serve")
    for p in env.proxies:
        check("reload (etcd) refused" in p.log(), "the log says so")
    with Raw(("127.0.0.1", env.listen)) as c:
        eq(c.mc_store(b"set", b"etcd:k", b"v"), b"STORED\r\n", "still serving")


@R.test
def fleet_names_the_proxy_that_differs(env):
    odd = EtcdProxy(env.etcd, env.listen, 9, pools_text="cache:\n  listen: 127.0.0.1:%d\n"
                    "  servers:\n    - %s:1\n" % (env.listen, env.mcs[0].hostport()))
    try:
        rc, out = fleet([p.url for p in env.proxies] + [odd.url])
        say(out.strip())
        eq(rc, 3, "--fleet exit status on disagreement")
        check("pool cache: DIFFER" in out, out)
        lines = [ln for ln in out.splitlines() if ln.startswith("  *")]
        eq(len(lines), 1, "one proxy marked")
        check(odd.url in lines[0], "the odd one is named: %s" % out)
    finally:
        odd.stop()


@R.test
def etcd_killed_and_restarted_serving_throughout_watch_resumed(env):
    env.etcd.kill()
    t_end = time.monotonic() + patience(1.5)
    n = 0
    with Raw(("127.0.0.1", env.listen)) as c:
        while time.monotonic() < t_end or n < 50:
            k = b"down:%d" % n
            eq(c.mc_store(b"set", k, b"v" + k), b"STORED\r\n", "set while etcd is down")
            eq([v for _k, _f, v, _c in c.mc_get(b"get", k)], [b"v" + k], "get while etcd is down")
            n += 1
            time.sleep(0.005)   # a client's pace, not a load test
    for p in env.proxies:
        check("keep serving" in p.log(), "the outage is logged")
    env.etcd.start()
    rev = env.etcd.put(doc(env.listen, env.mcs[1:]))
    took = wait_all(env.proxies, lambda p: p.pool()["source_revision"] == rev,
                    "revision %d after the restart" % rev, 10)
    eq(len({p.pool()["ring_checksum"] for p in env.proxies}), 1, "one checksum")
    for p in env.proxies:
        check(p.log().count("watching from revision") >= 2, "the watch resumed")
    say("etcd down: %d set+get, 0 errors; after the restart revision %d everywhere in %.2fs" % (
        n, rev, took))
    for p in env.proxies:
        eq(p.stop(), 0, "clean exit")


if __name__ == "__main__":
    R.main(EtcdEnv)
