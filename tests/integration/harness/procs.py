"""Processes: free 127.0.0.1 ports, the per-process temporary directory, Proc (a child
stopped by its PID) and stop_all, which runs at exit and on SIGTERM/SIGHUP."""

import atexit
import itertools
import os
import signal
import socket
import subprocess
import tempfile
import time

from .common import START_TIMEOUT, StartError, patience

_given_ports = set()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now and that this process has not
    handed out before. (Another process may still take it before we bind: the starters
    retry with a new port when the server dies at start.)"""
    for _ in range(100):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port not in _given_ports:
            _given_ports.add(port)
            return port
    raise StartError("no free port found")


def port_is_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


_tmpdir = None


def tmpdir():
    """One temporary directory per test process, removed at exit."""
    global _tmpdir
    if _tmpdir is None:
        _tmpdir = tempfile.mkdtemp(prefix="rl-it-")
    return _tmpdir


_running = []
_log_numbers = itertools.count()

# ringleader processes that ended badly: (name, why, log tail). The Runner fails the file
# when any is here: a sanitizer report or a crash at shutdown is a defect even when every
# test passed.
bad_exits = []

SANITIZER_MARKS = (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer",
                   b"SUMMARY: UndefinedBehaviorSanitizer", b": runtime error: ")


def _is_ringleader(argv):
    return bool(argv) and os.path.basename(str(argv[0])).startswith("ringleader")


class Proc:
    """A child process with its output in a log file; stop() ends it by PID."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.argv = argv
        # numbered by a counter of its own: two processes of one name never share a log
        self.log_path = os.path.join(tmpdir(), "%s-%d.log" % (name, next(_log_numbers)))
        self.log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                      stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        self.pid = self.popen.pid
        _running.append(self)

    def alive(self):
        return self.popen.poll() is None

    def stop(self, timeout=5.0):
        """SIGTERM, wait up to timeout, then SIGKILL. Returns the exit status."""
        termed = False
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                termed = True
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                print("note: %s (pid %d) did not stop %.0f s after SIGTERM: SIGKILL" % (
                    self.name, self.pid, timeout))
                termed = False
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout)
            except ProcessLookupError:
                pass
        if self in _running:
            _running.remove(self)
            self.log.close()
            self._check_exit(termed)
        return self.popen.returncode

    def _check_exit(self, termed):
        """Record a ringleader process that ended badly: a sanitizer's report in its output,
        a signal other than the SIGKILL a test or stop() sent, or a non-zero exit status
        after a SIGTERM that it was asked to stop by."""
        if not _is_ringleader(self.argv):
            return
        why = None
        try:
            with open(self.log_path, "rb") as f:
                out = f.read()
        except OSError:
            out = b""
        rc = self.popen.returncode
        if any(m in out for m in SANITIZER_MARKS):
            why = "a sanitizer report in its output"
        elif rc is not None and rc < 0 and -rc != signal.SIGKILL:
            why = "ended by signal %d" % -rc
        elif termed and rc:
            why = "exit status %d after SIGTERM" % rc
        if why:
            bad_exits.append((self.name, why, self.log_tail(40)))

    def kill(self, timeout=5.0):
        """SIGKILL (no clean shutdown: its sockets are reset), then wait until it is gone.
        It stays registered: stop() afterwards (or at exit) closes its log."""
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout)
        return self.popen.returncode

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def wait_listening(self, port, timeout=START_TIMEOUT):
        """Wait until 127.0.0.1:port accepts a connection while this process lives."""
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise StartError("%s exited with %s before listening on %d:\n%s" % (
                    self.name, self.popen.returncode, port, self.log_tail()))
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                # It answers; make sure it is ours and did not just die on a bind error
                # (a loaded machine may take longer than any fixed pause to let it die).
                time.sleep(0.02)
                ours = listener_is(self.pid, port)
                if ours is False:
                    raise StartError("127.0.0.1:%d is another program's; %s did not get it" % (
                        port, self.name))
                if self.alive():
                    return
            except OSError:
                time.sleep(0.02)
        raise StartError("%s not listening on %d after %.0fs:\n%s" % (
            self.name, port, timeout, self.log_tail()))


def listener_is(pid, port):
    """Whether the sockets listening on 127.0.0.1:port (or the wildcard) are all pid's:
    True, False when one is another process's (a parallel test program took the port
    between free_port() and the bind), None when /proc cannot tell."""
    inodes = set()
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                ip, _, p = fields[1].partition(":")
                if fields[3] == "0A" and int(p, 16) == port and ip in ("0100007F", "00000000"):
                    inodes.add(fields[9])
        if not inodes:
            return None
        fd_dir = "/proc/%d/fd" % pid
        mine = set()
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                mine.add(link[8:-1])
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return inodes <= mine


def stop_all():
    for p in list(reversed(_running)):
        try:
            p.stop()
        except Exception:  # keep stopping the others
            pass
    if _tmpdir and not os.environ.get("RL_KEEP_TMP"):
        import shutil
        shutil.rmtree(_tmpdir, ignore_errors=True)


atexit.register(stop_all)


def _on_term(signum, frame):
    raise SystemExit(128 + signum)   # unwinds through finally blocks and atexit


signal.signal(signal.SIGTERM, _on_term)
signal.signal(signal.SIGHUP, _on_term)


def _start_with_retry(start, attempts=3):
    last = None
    for _ in range(attempts):
        try:
            return start(free_port())
        except StartError as e:
            last = e
    raise last


def wait_stopped(pid, timeout=5.0):
    """Until the kernel shows every thread of pid stopped (SIGSTOP is delivered
    asynchronously, thread by thread: a worker woken by input before its stop reads it)."""
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue        # a thread that ended meanwhile
        if states and all(st in "tT" for st in states):
            return
        time.sleep(0.002)
    raise AssertionError("process %d not stopped after %.0f s" % (pid, timeout))
