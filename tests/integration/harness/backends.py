"""Real backends on free ports: memcached and redis-server, and owners() (which backend
holds each key, asked directly)."""

import os

from .common import StartError
from .procs import Proc, _start_with_retry, tmpdir
from .wire import Raw, _b, resp_encode


class Memcached:
    def __init__(self, port, extra=()):
        self.port = port
        self.addr = ("127.0.0.1", port)
        argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1",
                "-m", "64"] + list(extra)
        if os.geteuid() == 0:
            argv += ["-u", "root"]     # memcached refuses to run as root without -u
        self.proc = Proc("memcached-%d" % port, argv)
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    @classmethod
    def start(cls, port=None, extra=()):
        if port is not None:
            return cls(port, extra)
        return _start_with_retry(lambda p: cls(p, extra))

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def client(self):
        return Raw(self.addr)

    def get_many(self, keys):
        """{key: value} for the keys this server holds (asked directly, 100 per get)."""
        found = {}
        with self.client() as c:
            for i in range(0, len(keys), 100):
                for k, _f, v, _c in c.mc_get(b"get", *keys[i:i + 100]):
                    found[k] = v
        return found

    def stop(self):
        self.proc.stop()


class Redis:
    def __init__(self, port, password=None, extra=()):
        self.port = port
        self.addr = ("127.0.0.1", port)
        self.password = password
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", tmpdir(),
                "--logfile", ""]
        if password:
            argv += ["--requirepass", password]
        argv += list(extra)
        self.proc = Proc("redis-%d" % port, argv)
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    @classmethod
    def start(cls, port=None, password=None, extra=()):
        """extra: more redis-server arguments (e.g. --user NAME RULES...)."""
        if port is not None:
            return cls(port, password, extra)
        return _start_with_retry(lambda p: cls(p, password, extra))

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def client(self):
        c = Raw(self.addr)
        if self.password:
            r = c.rd("AUTH", self.password)
            assert r == "OK", r
        return c

    def exists_many(self, keys):
        """The subset of keys present on this server (EXISTS each, pipelined)."""
        keys = list(keys)
        with self.client() as c:
            c.send(b"".join(resp_encode("EXISTS", k) for k in keys))
            return {k for k in keys if c.read_resp() == 1}

    def stop(self):
        self.proc.stop()


def owners(backends, keys):
    """{key: [indices of the backends holding it]} asking every backend directly."""
    keys = [_b(k) for k in keys]
    res = {k: [] for k in keys}
    for i, be in enumerate(backends):
        held = be.get_many(keys) if isinstance(be, Memcached) else be.exists_many(keys)
        for k in held:
            res[k].append(i)
    return res
