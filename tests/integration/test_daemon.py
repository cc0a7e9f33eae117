"""test_daemon.py: -d detaches with umask 022 and returns once the proxy serves; the pid file is 0644, never written through a link, stale ones replaced; sd_notify READY/RELOADING/STOPPING."""

import os
import signal
import socket
import stat
import subprocess
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (TOP_BUILDDIR, Memcached, Proc, Raw, Runner, Skip, binary, check, eq,  # noqa: E402
                     free_port, tmpdir, yaml_dump)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_daemon", per_test_timeout=30, total_timeout=120)

_daemons = []     # pids of detached proxies (not our children): stopped by pid at the end


def stop_pid(pid, timeout=5.0):
    """SIGTERM, wait until the process is gone (bounded), then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def proc_field(pid, name):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None


def wait_gone(path, timeout=5.0):
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline and os.path.lexists(path):
        time.sleep(0.02)
    return not os.path.lexists(path)


class Env(harness.Env):
    def __init__(self):
        self.mc = Memcached.start()
        self.backends = [self.mc]
        self.n = 0
        self.dirs = []      # directories of unix sockets, outside tmpdir(): removed at close

    def conf(self, port=None, bad=False):
        """A fresh config file (and the port its pool listens on)."""
        self.n += 1
        port = port or free_port()
        path = os.path.join(tmpdir(), "daemon-%d.yml" % self.n)
        pool = {"listen": "127.0.0.1:%d" % port, "servers": [self.mc.hostport() + ":1"]}
        if bad:
            pool["timeout"] = "soon"
            pool["hahs"] = "md5"
        with open(path, "w") as f:
            f.write(yaml_dump({"cache": pool}))
        return path, port

    def paths(self, what):
        d = tmpdir()
        return os.path.join(d, "%s-%d.pid" % (what, self.n)), os.path.join(d, "%s-%d.log" % (what, self.n))

    def run(self, *args, umask=0o077, env=None):
        """Run ringleader in the foreground of a child with that umask; (status, stderr)."""
        r = subprocess.run([binary("ringleader")] + list(args), capture_output=True,
                           timeout=patience(15), preexec_fn=lambda: os.umask(umask), env=env)
        return r.returncode, r.stderr.decode("utf-8", "replace")

    def daemon(self, conf, pidfile, log, stats=None):
        st, err = self.run("-d", "-c", conf, "-p", pidfile, "-o", log,
                           "-s", str(stats or free_port()), "--workers", "1")
        if st == 0:
            pid = int(open(pidfile).read())
            _daemons.append(pid)
            return pid, err
        return None, err

    def close(self):
        for pid in _daemons:
            stop_pid(pid)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        super().close()


@R.test(ringleader=True)
def d_returns_once_serving_with_umask_022_and_a_0644_pid_file(env):
    conf, port = env.conf()
    pidfile, log = env.paths("good")
    pid, err = env.daemon(conf, pidfile, log)
    check(pid is not None, "ringleader -d failed: %s" % err)
    # It serves as soon as -d returned: the parent waited for the daemon's word.
    with Raw(("127.0.0.1", port), 3) as c:
        eq(c.mc(b"set k 0 0 1\r\nv")[:6], b"STORED", "set through the daemon")
    eq(stat.S_IMODE(os.stat(pidfile).st_mode), 0o644, "pid file mode (caller's umask 077)")
    eq(proc_field(pid, "Umask"), "0022", "the daemon's umask")
    check(os.getsid(pid) != os.getsid(0), "the daemon has its own session")
    check(os.getsid(pid) != pid, "and is not its leader (no controlling terminal ever)")
    eq(os.readlink("/proc/%d/cwd" % pid), os.getcwd(), "the working directory is kept")
    eq(os.readlink("/proc/%d/fd/0" % pid), "/dev/null", "stdin on /dev/null")
    # The log was opened before detaching with the caller's umask; new files after it
    # get 022: the log reopened by SIGUSR1 after a rotation.
    os.rename(log, log + ".1")
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + patience(5)
    while time.monotonic() < deadline and not os.path.exists(log):
        time.sleep(0.02)
    eq(stat.S_IMODE(os.stat(log).st_mode), 0o644, "a log file the daemon creates")
    stop_pid(pid)
    check(wait_gone(pidfile), "the pid file is removed at exit")


@R.test(ringleader=True)
def d_with_a_bad_file_fails_on_the_terminal_with_every_error(env):
    conf, _ = env.conf(bad=True)
    pidfile, log = env.paths("bad")
    pid, err = env.daemon(conf, pidfile, log)
    check(pid is None, "a bad file must not detach")
    check("'timeout'" in err and "'hahs'" in err, "both errors on stderr: %r" % err)
    check("did you mean 'hash'" in err, "a suggestion for the typo: %r" % err)
    check(not os.path.exists(pidfile), "no pid file")


@R.test(ringleader=True)
def d_that_cannot_listen_exits_1_after_the_daemon_gave_up(env):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        conf, _ = env.conf(port=blocker.getsockname()[1])
        pidfile, log = env.paths("busy")
        pid, err = env.daemon(conf, pidfile, log)
        check(pid is None, "exit 0 although nothing listens")
        check("exited during start-up" in err, "the parent says why: %r" % err)
        check(wait_gone(pidfile), "the daemon removed its pid file")
    finally:
        blocker.close()


@R.test(ringleader=True)
def pid_file_symlink_is_refused_and_its_target_untouched(env):
    conf, _ = env.conf()
    pidfile, log = env.paths("link")
    target = pidfile + ".target"
    with open(target, "w") as f:
        f.write("precious\n")
    os.symlink(target, pidfile)
    st, err = env.run("-c", conf, "-p", pidfile, "-o", log, "-s", str(free_port()))
    eq(st, 1, "exit status")
    check("symbolic link" in err, "reason: %r" % err)
    eq(open(target).read(), "precious\n", "the link's target")
    # A dangling link is refused the same way (O_EXCL does not follow it).
    os.unlink(target)
    st, err = env.run("-c", conf, "-p", pidfile, "-o", log, "-s", str(free_port()))
    eq(st, 1, "exit status with a dangling link")
    check(not os.path.exists(target), "nothing created through the dangling link")


@R.test(ringleader=True)
def stale_pid_file_is_replaced_and_a_live_one_refused(env):
    conf, port = env.conf()
    pidfile, log = env.paths("stale")
    dead = subprocess.Popen(["true"])
    dead.wait()
    with open(pidfile, "w") as f:
        f.write("%d\n" % dead.pid)
    pid, err = env.daemon(conf, pidfile, log)
    check(pid is not None and pid != dead.pid, "a stale pid file is replaced: %s" % err)
    # A second proxy on the same pid file: refused, the first one's file kept.
    conf2, _ = env.conf()
    st, err = env.run("-c", conf2, "-p", pidfile, "-o", log + ".2", "-s", str(free_port()))
    eq(st, 1, "exit status of the second")
    check("names process %d, which is running" % pid in err, "reason: %r" % err)
    eq(int(open(pidfile).read()), pid, "the first one's pid file")
    # At exit only our own file is removed: one put in its place stays.
    os.unlink(pidfile)
    with open(pidfile, "w") as f:
        f.write("12345\n")
    stop_pid(pid)
    time.sleep(0.3)
    eq(open(pidfile).read(), "12345\n", "someone else's pid file left alone")
    os.unlink(pidfile)


def unix_daemon(env, what, listens):
    """A daemon (-d: umask 022, as a service runs) whose pools listen on unix sockets in a
    fresh directory anyone may traverse; (pid, paths). listens: {pool: "" or " MODE"}."""
    d = tempfile.mkdtemp(prefix="rl-unix-", dir="/tmp")
    env.dirs.append(d)
    os.chmod(d, 0o755)
    paths, pools = {}, {}
    for name, mode in listens.items():
        paths[name] = os.path.join(d, name + ".sock")
        pools[name] = {"listen": paths[name] + mode, "servers": [env.mc.hostport() + ":1"]}
    env.n += 1
    conf = os.path.join(tmpdir(), "unix-%d.yml" % env.n)
    with open(conf, "w") as f:
        f.write(yaml_dump(pools))
    pidfile, log = env.paths(what)
    pid, err = env.daemon(conf, pidfile, log)
    check(pid is not None, "ringleader -d on unix listeners failed: %s" % err)
    return pid, paths


@R.test(ringleader=True)
def unix_listeners_are_0777_unless_the_listen_line_gives_a_mode(env):
    # nutcracker's daemon (umask 0) leaves its sockets 0777; bind() under ours (022) made
    # 0755, and a client user that could connect to nutcracker got "Permission denied".
    pid, paths = unix_daemon(env, "unixmode", {"plain": "", "mode": " 0660"})
    for name, want in (("plain", 0o777), ("mode", 0o660)):
        st = os.stat(paths[name])
        check(stat.S_ISSOCK(st.st_mode), "%s is a socket" % paths[name])
        eq(oct(stat.S_IMODE(st.st_mode)), oct(want), "mode of the %s listener" % name)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(patience(5))
        try:
            s.connect(paths[name])
            s.sendall(b"set unixk 0 0 1\r\nv\r\n")
            eq(s.recv(64), b"STORED\r\n", "a set through the %s listener" % name)
        finally:
            s.close()
    stop_pid(pid)


@R.test(ringleader=True)
def another_user_connects_to_a_default_unix_listener(env):
    if os.geteuid() != 0:
        raise Skip("not root: cannot run a client as another user (runuser)")
    runuser = shutil.which("runuser")
    if runuser is None:
        raise Skip("runuser (util-linux) not installed")
    py = "/usr/bin/python3"         # not sys.executable: it may live under root's home
    if not os.access(py, os.X_OK):
        raise Skip("no /usr/bin/python3 for the other user's client")
    pid, paths = unix_daemon(env, "unixuser", {"plain": ""})
    client = ("import socket,sys\n"
              "s=socket.socket(socket.AF_UNIX)\ns.settimeout(%r)\n"
              "s.connect(sys.argv[1])\ns.sendall(b'set otheru 0 0 2\\r\\nok\\r\\n')\n"
              "sys.stdout.write(s.recv(64).decode())\n" % patience(5))
    r = subprocess.run([runuser, "-u", "nobody", "--", py, "-c", client,
                        paths["plain"]], capture_output=True, timeout=patience(15))
    eq(r.returncode, 0, "user nobody's client: %s" % r.stderr.decode()[-300:])
    eq(r.stdout, b"STORED\r\n", "user nobody's set through the proxy")
    eq(list(env.mc.get_many([b"otheru"]).values()), [b"ok"], "the value reached memcached")
    stop_pid(pid)


@R.test(ringleader=True)
def sd_notify_ready_reloading_stopping(env):
    cfg = os.path.join(TOP_BUILDDIR, "config.h")
    if not os.path.exists(cfg) or "#define HAVE_LIBSYSTEMD 1" not in open(cfg).read():
        raise Skip("built without libsystemd (configure --without-systemd or no libsystemd-dev)")
    sock_path = os.path.join(tmpdir(), "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(5)
    conf, port = env.conf()
    _, log = env.paths("notify")
    e = dict(os.environ, NOTIFY_SOCKET=sock_path)
    p = Proc("notify", [binary("ringleader"), "-c", conf, "-o", log, "-s", str(free_port()),
                        "--workers", "1"], env=e)
    try:
        got = s.recv(4096).decode()
        check("READY=1" in got, "first message %r" % got)
        socket.create_connection(("127.0.0.1", port), 2).close()   # READY means listening
        os.kill(p.pid, signal.SIGHUP)
        eq(s.recv(4096).decode(), "RELOADING=1", "at the start of a reload")
        eq(s.recv(4096).decode(), "READY=1", "once every worker runs it")
        os.kill(p.pid, signal.SIGTERM)
        eq(s.recv(4096).decode(), "STOPPING=1", "on SIGTERM")
        eq(p.popen.wait(10), 0, "exit status")
    finally:
        p.stop()
        s.close()


R.main(Env)
