"""test_admin.py: the status page (GET /) in headless Chromium names every pool and server, has no external asset, and a screenshot is taken; /health answers under 100 stalled connections."""

import base64
import fcntl
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NAMES, Memcached, Proxy, ProxyEnv, Redis, Runner, Skip, check, eq,  # noqa: E402
                     free_port, server_lines, tmpdir)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_admin", per_test_timeout=45, total_timeout=150)

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1280,1000"]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise Skip("no Chromium here (scripts/deps installs Debian's chromium): the status page "
               "was not loaded in a browser")


class DevTools:
    """Chromium driven over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-framed JSON):
    the page runs in real time, unlike --virtual-time-budget, so its rates are real."""

    def __init__(self, exe, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        os.set_inheritable(to_chrome_r, True)
        os.set_inheritable(from_chrome_w, True)

        def fds():
            # Chromium reads fd 3 and writes fd 4. subprocess closes what pass_fds does not
            # name after this runs; move both out of the way first so neither is clobbered.
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
        log = open(os.path.join(tmpdir(), "chromium.log"), "wb")
        self.proc = subprocess.Popen([exe] + CHROMIUM_FLAGS + ["--remote-debugging-pipe",
                                      "--user-data-dir=" + profile, "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     preexec_fn=fds, pass_fds=(3, 4),
                                     start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def call(self, method, timeout=20, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, _, self.buf = self.buf.partition(b"\0")
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise AssertionError("%s: %s" % (method, reply["error"]))
                    return reply["result"]
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError("Chromium gave no answer to %s" % method)
            r, _, _ = select.select([self.from_chrome], [], [], 0.5)
            if r:
                self.buf += os.read(self.from_chrome, 1 << 20)

    def open(self, url):
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def evaluate(self, expr):
        return self.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.session = None
            self.call("Browser.close", timeout=5)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(5)
        os.close(self.to_chrome)
        os.close(self.from_chrome)


class Env(ProxyEnv):
    def __init__(self):
        self.mc = [Memcached.start() for _ in range(3)]
        self.rd = [Redis.start() for _ in range(2)]
        self.backends = self.mc + self.rd
        self.admin_port = free_port()
        self.proxy = Proxy({
            "cache": {"hash": "fnv1a_64", "distribution": "ketama", "auto_eject_hosts": False,
                      "servers": server_lines(self.mc, NAMES[:3], weights=[1, 2, 3])},
            "sessions": {"redis": True, "hash": "fnv1a_64", "distribution": "ketama",
                         "servers": server_lines(self.rd, ["redis-a", "redis-b"])},
        }, glob={"admin": "127.0.0.1:%d" % self.admin_port})
        self.base = "http://127.0.0.1:%d" % self.admin_port

    def get(self, path, timeout=5):
        with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()

    def traffic(self, rounds=200):
        with self.proxy.client("cache") as c:
            for i in range(rounds):
                c.send(b"get hot:%d\r\nget user:%d\r\n" % (i % 5, i))
                c.read_values()
                c.read_values()
        with self.proxy.client("sessions") as c:
            for i in range(50):
                eq(c.rd("SET", "s:%d" % i, "v"), "OK")



@R.test(ringleader=True)
def the_page_is_one_file_with_no_external_asset(env):
    st, headers, body = env.get("/")
    eq(st, 200, "GET /")
    check(headers["Content-Type"].startswith("text/html"), "content type %r" % headers["Content-Type"])
    csp = headers.get("Content-Security-Policy", "")
    check("default-src 'none'" in csp and "connect-src 'self'" in csp, "CSP %r" % csp)
    text = body.decode()
    for pattern in (r"<script[^>]+src=", r"<link\b", r"<img\b", r"@import", r"url\(",
                    r"https?://", r"<iframe\b"):
        check(not re.search(pattern, text, re.I), "an external reference (%s) in the page" % pattern)
    check('fetch("stats"' in text, "it reads /stats (relative, from where it came)")
    req = urllib.request.Request(env.base + "/", method="HEAD")
    with urllib.request.urlopen(req, timeout=5) as r:
        eq(r.status, 200, "HEAD /")


@R.test(ringleader=True)
def chromium_draws_every_pool_and_server_and_a_screenshot_is_taken(env):
    exe = chromium()
    env.traffic()
    stats = json.loads(env.get("/stats")[2])
    dev = DevTools(exe, os.path.join(tmpdir(), "chromium-profile"))
    try:
        dev.open(env.base + "/")
        # Traffic while the page reads /stats twice (every 2 s), so that rates show.
        deadline = time.monotonic() + patience(15)
        drawn = None
        while time.monotonic() < deadline:
            env.traffic(100)
            drawn = dev.evaluate("""(function () {
                var pools = {};
                document.querySelectorAll('section.pool').forEach(function (s) {
                    var servers = {};
                    s.querySelectorAll('tr[data-server]').forEach(function (tr) {
                        servers[tr.getAttribute('data-server')] = Array.from(tr.cells).map(
                            function (c) { return c.textContent; });
                    });
                    pools[s.getAttribute('data-pool')] = {
                        heading: s.querySelector('h2').textContent,
                        facts: s.querySelector('.facts').textContent,
                        servers: servers,
                        hot: Array.from(s.querySelectorAll('table.hot tr')).length - 1 };
                });
                return { title: document.getElementById('title').textContent, pools: pools,
                         error: document.getElementById('error').hidden ? null :
                                document.getElementById('error').textContent };
            })()""")
            rates = [row[4] for p in (drawn or {}).get("pools", {}).values()
                     for row in p["servers"].values()]
            if rates and any(r not in ("\u2013", "0.0") for r in rates):
                break
            time.sleep(0.5)
        check(drawn is not None and drawn["error"] is None, "the page drew without error: %r" % drawn)
        eq(sorted(drawn["pools"]), ["cache", "sessions"], "every pool of the document")
        for pool, names in (("cache", NAMES[:3]), ("sessions", ["redis-a", "redis-b"])):
            p = drawn["pools"][pool]
            eq(p["heading"], pool, "pool heading")
            eq(sorted(p["servers"]), sorted(names), "every server of %s" % pool)
            check(stats[pool]["ring_checksum"] in p["facts"], "checksum of %s shown" % pool)
            check("epoch %d" % stats[pool]["epoch"] in p["facts"], "epoch of %s shown" % pool)
            for name, cells in p["servers"].items():
                eq(cells[1], "up", "%s/%s state" % (pool, name))
                eq(cells[2], str(stats[pool][name]["weight"]), "%s/%s weight" % (pool, name))
                want = "%.2f%% of the keyspace" % (100 * stats[pool][name]["keyspace_share"])
                check(want in cells[3], "%s/%s share %r in %r" % (pool, name, want, cells[3]))
        # weights 1:2:3 -> fair shares 16.67%, 33.33%, 50.00%
        check("fair 50.00%" in drawn["pools"]["cache"]["servers"]["gamma"][3], "gamma's fair share")
        check(drawn["pools"]["cache"]["hot"] >= 5, "the hot keys are listed")
        check(any(r not in ("\u2013", "0.0") for r in
                  (row[4] for row in drawn["pools"]["cache"]["servers"].values())),
              "a request rate shows under traffic: %r" % drawn["pools"]["cache"]["servers"])
        shot = os.environ.get("RL_SCREENSHOT") or os.path.join(tmpdir(), "status-page.png")
        dev.screenshot(shot)
        with open(shot, "rb") as f:
            png = f.read()
        check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, "a screenshot of %d bytes" % len(png))
        print("screenshot: %s (%d bytes)" % (shot, len(png)))
    finally:
        dev.close()


@R.test(ringleader=True)
def health_answers_under_100_stalled_connections(env):
    stalled = []
    try:
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", env.admin_port), 5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")     # half a request, then nothing
            stalled.append(s)
        t0 = time.monotonic()
        st, _, body = env.get("/health", timeout=4)
        took = time.monotonic() - t0
        eq((st, body), (200, b"ok\n"), "/health")
        # Not a speed target: an endpoint blocked by the stalled ones would answer only
        # when the idle timeout (5 s) closes them; anything under that is the outcome.
        check(took < 4.0, "/health took %.2fs beside 100 stalled connections" % took)
        # The stalled ones are closed by the idle timeout (5 s), every one of them.
        deadline = time.monotonic() + 5 + patience(7)
        open_ = list(stalled)
        while open_ and time.monotonic() < deadline:
            for s in list(open_):
                s.settimeout(0.05)
                try:
                    if s.recv(4096) == b"":
                        open_.remove(s)
                except socket.timeout:
                    pass
                except OSError:
                    open_.remove(s)
        eq(len(open_), 0, "stalled connections still open after the idle timeout")
        eq(env.get("/health")[0], 200, "/health after")
    finally:
        for s in stalled:
            s.close()


R.main(Env)
