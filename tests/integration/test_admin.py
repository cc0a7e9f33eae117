"""test_admin.py: the status page (GET /) in headless Chromium names every pool and server, has no external asset, and a screenshot is taken; /health answers under 100 stalled connections."""

import base64
import http.client
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
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Redis, Runner, Skip, check, eq,  # noqa: E402
                     free_port, ring_owners, server_lines, tmpdir)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_admin", per_test_timeout=45, total_timeout=150)
ADMIN_NAME = "Ringleader-Admin.test"     # the one name admin_hosts lists besides another

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


class Env(harness.Env):
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
        }, glob={"admin": "127.0.0.1:%d" % self.admin_port,
                 "admin_hosts": [ADMIN_NAME, "second.name.test"]})
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
            check("source /" in p["facts"], "the configuration source of %s shown" % pool)
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


@R.test(ringleader=True)
def ring_answers_any_key_bytes_as_the_stats_show_them(env):
    """Issue 22 item 8: /ring takes any key bytes (%FF, NUL, a long binary key); JSON strings
    are UTF-8, so the key is shown as the hot keys show one ("\\xHH" and key_hex), with the
    owner that ringleader-ring computes from the same bytes."""
    keys = [b"\xff", b"a\x00b\xc3(", b"\x80" * 300, "caf\u00e9".encode()]
    own = ring_owners(env.proxy.conf_path, "cache", keys)
    for k in keys:
        st, headers, body = env.get("/ring?pool=cache&key=" + urllib.parse.quote(k, safe=""))
        eq(st, 200, "/ring of %r: %r" % (k[:8], body[:200]))
        check(headers["Content-Type"].startswith("application/json"), "JSON")
        doc = json.loads(body)
        eq(doc["owner"], own[k], "owner of %r" % k[:8])
        printable = k == "caf\u00e9".encode()
        if printable:
            eq((doc["key"], "key_hex" in doc), ("caf\u00e9", False), "a printable key as it is")
        else:
            eq(bytes.fromhex(doc["key_hex"]), k, "key_hex is the exact bytes")
            check("\\x" in doc["key"], "the shown key escapes bytes: %r" % doc["key"][:40])
    eq(json.loads(env.get("/ring?pool=cache&key=%FF")[2])["key"], "\\xff", "%FF shown as \\xff")


def ask(port, method, path, host=None, headers=None, body=None):
    """(status, body bytes) of one request with exactly this Host (None: the address)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        h = dict(headers or {})
        h["Host"] = host if host is not None else "127.0.0.1:%d" % port
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def last_reload(env):
    return json.loads(env.get("/stats")[2])["cache"]["last_reload"]


# Issue 22 item 10: a page on another site reaches the admin endpoint through the browser,
# by DNS rebinding (its own name resolved to 127.0.0.1: Host carries that name) or by a form.

@R.test(ringleader=True)
def a_foreign_host_gets_421_and_no_data(env):
    """Host must be an address, localhost or a name of admin_hosts (any port): every path,
    every method; the answer holds nothing of the proxy's."""
    before = last_reload(env)
    for host in ("rebind.attacker.test:%d" % env.admin_port, "rebind.attacker.test",
                 "127.0.0.1.attacker.test", "localhost.attacker.test", "ringleader-admin",
                 "second.name.test.attacker.test"):
        for path in ("/stats", "/config", "/metrics", "/ring?pool=cache&key=k", "/", "/health"):
            st, body = ask(env.admin_port, "GET", path, host)
            eq(st, 421, "GET %s with Host %s: %r" % (path, host, body[:100]))
            check(b"cache" not in body and b"alpha" not in body and b"<html" not in body,
                  "nothing leaks: %r" % body)
        st, body = ask(env.admin_port, "POST", "/reload", host)
        eq(st, 421, "POST /reload with Host %s" % host)
    eq(last_reload(env), before, "no reload ran for a foreign Host")


@R.test(ringleader=True)
def addresses_localhost_and_admin_hosts_are_served(env):
    """What operators and scrapers send: the address (Prometheus target host:port), another
    address or port (a port forward), localhost (an ssh tunnel), a listed name, any case."""
    port = env.admin_port
    for host in ("127.0.0.1:%d" % port, "127.0.0.1:8080", "localhost:%d" % port, "LocalHost",
                 "[::1]:%d" % port, "10.9.8.7:%d" % port, ADMIN_NAME.lower() + ":%d" % port,
                 ADMIN_NAME.upper(), "second.name.test"):
        st, body = ask(port, "GET", "/stats", host)
        eq(st, 200, "GET /stats with Host %s: %r" % (host, body[:100]))
        check("cache" in json.loads(body), "the document")
        st, body = ask(port, "GET", "/metrics", host)
        eq(st, 200, "GET /metrics with Host %s" % host)


@R.test(ringleader=True)
def cross_site_forms_and_origins_cannot_reload(env):
    """Without admin_token: a POST with a form's content type is refused (403), so is any
    request with a foreign Origin; curl -X POST (no content type) reloads."""
    port = env.admin_port
    before = last_reload(env)
    for ctype, body in (("application/x-www-form-urlencoded", b"a=b"),
                        ("multipart/form-data; boundary=xyz", b"--xyz--\r\n"),
                        ("text/plain;charset=UTF-8", b"hello")):
        st, text = ask(port, "POST", "/reload", headers={"Content-Type": ctype}, body=body)
        eq(st, 403, "POST /reload as a form (%s): %r" % (ctype, text))
        check(b"admin_token" in text, "the refusal says what to do: %r" % text)
    for origin in ("http://attacker.test", "null", "https://127.0.0.1.attacker.test"):
        st, text = ask(port, "POST", "/reload", headers={"Origin": origin})
        eq(st, 403, "POST /reload from Origin %s: %r" % (origin, text))
        st, text = ask(port, "GET", "/config", headers={"Origin": origin})
        eq(st, 403, "GET /config from Origin %s" % origin)
        check(b"cache" not in text, "nothing leaks: %r" % text)
    eq(last_reload(env), before, "no reload ran for a form or a foreign Origin")
    # what curl -X POST sends (no body, no type), and the endpoint's own origin
    r = subprocess.run(["curl", "-sS", "-X", "POST", "-w", "\n%{http_code}",
                        "http://127.0.0.1:%d/reload" % port], capture_output=True, timeout=30) \
        if shutil.which("curl") else None
    if r is not None:
        eq(r.stdout.decode().split("\n")[-1], "200", "curl -X POST /reload: %r" % r.stdout)
    def reload_once(**kw):
        """A reload the endpoint takes; 409 while the last one is still being adopted by
        every worker (the endpoint's answer to a second POST too soon): asked again."""
        for _ in range(100):
            st, text = ask(port, "POST", "/reload", **kw)
            if st != 409:
                return st, text
            time.sleep(0.05)
        return st, text
    st, text = reload_once(headers={"Origin": "http://127.0.0.1:%d" % port})
    eq(st, 200, "POST /reload with the endpoint's own Origin: %r" % text)
    st, text = reload_once(headers={"Content-Type": "application/json"}, body=b"{}")
    eq(st, 200, "POST /reload with a JSON body: %r" % text)
    eq(last_reload(env), "ok", "the reloads ran")


@R.test(ringleader=True)
def with_a_token_a_form_post_needs_the_token(env):
    """With admin_token, the token decides: a form's POST without it gets 401, with it 200."""
    port = free_port()
    token = "tok-%d" % os.getpid()
    p = Proxy({"cache": {"servers": server_lines(env.mc[:1], NAMES[:1])}},
              glob={"admin": "127.0.0.1:%d" % port, "admin_token": token})
    try:
        p.proc.wait_listening(port)
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        st, text = ask(port, "POST", "/reload", headers=form, body=b"a=b")
        eq(st, 401, "a form's POST without the token: %r" % text)
        st, text = ask(port, "POST", "/reload", headers=dict(form, Authorization="Bearer " + token),
                       body=b"a=b")
        eq(st, 200, "a POST with the token: %r" % text)
        st, text = ask(port, "POST", "/reload", "evil.test", {"Authorization": "Bearer " + token})
        eq(st, 421, "the token does not make a foreign Host good")
    finally:
        p.proc.stop()


R.main(Env)
