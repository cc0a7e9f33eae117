#!/usr/bin/python3
"""rlbench against real memcached and redis-server, and against lying mock servers:
a benchmark whose checker cannot fail would measure nothing."""
import json
import os
import socket
import subprocess
import threading
import time
import unittest

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
RLBENCH = os.path.join(BUILD, "tools", "rlbench")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc):
    for _ in range(100):
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not listening")


def rlbench(*args):
    """Runs rlbench --json; returns (exit status, parsed line or None)."""
    out = subprocess.run([RLBENCH, "--json", "--timeout", "3", *args], capture_output=True,
                         text=True, timeout=60)
    lines = out.stdout.strip().splitlines()
    return out.returncode, (json.loads(lines[-1]) if lines else None)


class MockMemcached:
    """Answers every 'set' with STORED and every 'get' with the value rlbench
    expects, except that mode decides how it lies."""

    def __init__(self, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self.accept, daemon=True).start()

    @staticmethod
    def value(n, size=100):
        cycle = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        hdr = str(n).encode() + b"|"
        pat = bytes(cycle[i % 62] for i in range(n % 62, n % 62 + size))
        return (hdr + pat[len(hdr):])[:size]

    def accept(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        served = 0
        with c:
            while not self.stop:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
                out = b""
                while b"\r\n" in buf:
                    line, rest = buf.split(b"\r\n", 1)
                    parts = line.split()
                    if parts[0] == b"set":
                        size = int(parts[4])
                        if len(rest) < size + 2:
                            break
                        buf = rest[size + 2:]
                        out += b"STORED\r\n"
                    else:
                        buf = rest
                        key = parts[1]
                        v = self.value(int(key.split(b":")[1]))
                        if self.mode == "corrupt" and served % 10 == 9:
                            v = v[:50] + bytes([v[50] ^ 1]) + v[51:]
                        if self.mode == "error" and served % 10 == 9:
                            out += b"SERVER_ERROR out of memory\r\n"
                        elif self.mode == "miss" and served % 10 == 9:
                            out += b"END\r\n"
                        else:
                            out += b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(v), v)
                    served += 1
                    if self.mode == "hangup" and served == 5:
                        return
                c.sendall(out)


@unittest.skipUnless(os.access(RLBENCH, os.X_OK), "tools/rlbench not built")
class TestRlbench(unittest.TestCase):
    def server(self, argv, port):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (p.terminate(), p.wait(5)))
        wait_port(port, p)

    def memcached(self):
        port = free_port()
        argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        self.server(argv, port)
        return port

    def test_memcached_prefilled_gets_all_hit_and_verify(self):
        port = self.memcached()
        rc, r = rlbench("--port", str(port), "--prefill", "-P", "8", "-n", "20000",
                        "--keys", "2000", "--ratio", "9:1", "-c", "10")
        self.assertEqual(rc, 0)
        self.assertEqual(r["requests"], 20000)
        self.assertEqual(r["errors"], 0)
        self.assertEqual(r["hits"], r["gets"])
        self.assertGreater(r["sets"], 0)
        self.assertLessEqual(r["p50_us"], r["p99_us"])
        self.assertLessEqual(r["p99_us"], r["p999_us"])
        self.assertLessEqual(r["p999_us"], r["max_us"])

    def test_rate_paces_an_open_loop(self):
        """--rate 2000 for 1 s over 4 connections issues about 2,000 requests, not as many
        as the server can answer."""
        port = self.memcached()
        rc, r = rlbench("--port", str(port), "--prefill", "--keys", "500", "-c", "4",
                        "--duration", "1", "--rate", "2000")
        self.assertEqual(rc, 0)
        self.assertEqual(r["errors"], 0)
        self.assertGreater(r["requests"], 1800)
        self.assertLess(r["requests"], 2200)
        rc, r = rlbench("--port", str(port), "--rate", "0")
        self.assertEqual(rc, 2)
        # sleeping between sends (a background load): the same number of requests
        rc, r = rlbench("--port", str(port), "--keys", "500", "-c", "4", "--duration", "1",
                        "--rate", "2000", "--rate-sleep")
        self.assertEqual(rc, 0)
        self.assertEqual(r["errors"], 0)
        self.assertGreater(r["requests"], 1800)
        self.assertLess(r["requests"], 2200)
        rc, r = rlbench("--port", str(port), "--rate-sleep")
        self.assertEqual(rc, 2)

    def test_redis_prefilled_gets_all_hit_and_verify(self):
        port = free_port()
        self.server(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                     "--appendonly", "no"], port)
        rc, r = rlbench("--proto", "redis", "--port", str(port), "--prefill", "-P", "16",
                        "--duration", "0.5", "--keys", "500", "--value-size", "1000")
        self.assertEqual(rc, 0)
        self.assertEqual(r["errors"], 0)
        self.assertGreater(r["hits"], 0)
        self.assertEqual(r["hits"], r["gets"])

    def test_direct_mode_partitions_keys_so_every_get_hits(self):
        ports = [self.memcached() for _ in range(3)]
        servers = sum((["--server", f"127.0.0.1:{p}"] for p in ports), [])
        rc, r = rlbench(*servers, "--prefill", "-c", "7", "-n", "5000", "--keys", "1000")
        self.assertEqual((rc, r["errors"], r["hits"]), (0, 0, 5000))

    def test_memcached_binary_protocol_hits_and_mismatches(self):
        port = self.memcached()
        rc, r = rlbench("--proto", "memcache-binary", "--port", str(port), "--prefill",
                        "-P", "8", "-n", "5000", "--keys", "500", "--ratio", "9:1", "-c", "4",
                        "--expect-hits")
        self.assertEqual((rc, r["errors"], r["requests"], r["proto"]), (0, 0, 5000, "memcache-binary"))
        self.assertEqual(r["hits"], r["gets"])
        rc, r = rlbench("--proto", "memcache-binary", "--port", str(port), "--expect-hits",
                        "--keys", "500", "--value-size", "99", "-n", "100")
        self.assertEqual((rc, r["mismatches"]), (1, 100))

    def test_gets_of_a_different_value_size_are_mismatches(self):
        port = self.memcached()
        self.assertEqual(rlbench("--port", str(port), "--prefill-only", "--keys", "100",
                                 "--value-size", "99")[0], 0)
        rc, r = rlbench("--port", str(port), "--expect-hits", "--keys", "100", "-n", "300")
        self.assertEqual(rc, 1)
        self.assertEqual(r["mismatches"], 300)

    def test_a_flipped_bit_is_caught(self):
        m = MockMemcached("corrupt")
        rc, r = rlbench("--port", str(m.port), "-c", "1", "-n", "100", "--keys", "50")
        self.assertEqual(rc, 1)
        self.assertEqual((r["mismatches"], r["hits"]), (10, 90))

    def test_mock_that_tells_the_truth_passes(self):
        m = MockMemcached("honest")
        rc, r = rlbench("--port", str(m.port), "-c", "2", "-P", "4", "-n", "200")
        self.assertEqual((rc, r["hits"], r["errors"]), (0, 200, 0))

    def test_error_replies_are_counted(self):
        m = MockMemcached("error")
        rc, r = rlbench("--port", str(m.port), "-c", "1", "-n", "100")
        self.assertEqual((rc, r["error_replies"]), (1, 10))

    def test_misses_are_errors_only_when_keys_were_prefilled(self):
        m = MockMemcached("miss")
        rc, r = rlbench("--port", str(m.port), "-c", "1", "-n", "100")
        self.assertEqual((rc, r["misses"], r["errors"]), (0, 10, 0))
        rc, r = rlbench("--port", str(m.port), "-c", "1", "-n", "100", "--expect-hits")
        self.assertEqual((rc, r["misses"], r["errors"]), (1, 10, 10))

    def test_a_hangup_loses_the_in_flight_requests_and_fails(self):
        m = MockMemcached("hangup")
        rc, r = rlbench("--port", str(m.port), "-c", "1", "-P", "4", "-n", "100")
        self.assertEqual(rc, 1)
        self.assertGreater(r["disconnects"], 0)
        self.assertLess(r["requests"], 100)

    def test_usage_errors_exit_2(self):
        for args in (["--ratio", "1"], ["-P", "0"], ["--requests", "5", "--duration", "1"],
                     ["--proto", "binary"], ["--port", "1"]):
            out = subprocess.run([RLBENCH, *args], capture_output=True, timeout=10)
            self.assertEqual(out.returncode, 2, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
