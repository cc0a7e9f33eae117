"""test_install.py: `make install` puts the programs, man pages, documentation, the systemd unit (with this install's paths, verified by systemd-analyze) and the example configuration (never over an edited one) where they belong; uninstall takes them back."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import TOP_BUILDDIR, TOP_SRCDIR, Runner, Skip, check, eq, tmpdir  # noqa: E402

R = Runner("test_install", per_test_timeout=120, total_timeout=240)

MANS = ["share/man/man8/ringleader.8", "share/man/man1/ringleader-ring.1",
        "share/man/man5/ringleader.yml.5"]
DOCS = ["README.md", "ChangeLog", "operations.md", "configuration.md", "admin.md",
        "ring-tool.md", "redis.md", "protocol-memcache.md", "cluster.md", "tls.md",
        "testing.md", "status-page.png",
        "ring-balance.svg", "ring-diff.svg", "examples/ringleader.yml",
        "examples/ringleader.logrotate", "examples/twemproxy.yml"]


def make(*args):
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):      # not the outer make check's jobserver
        env.pop(k, None)
    r = subprocess.run(["make", "-s", "-C", TOP_BUILDDIR] + list(args), capture_output=True,
                       timeout=110, env=env)
    return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")


class Env(harness.Env):
    """An install under a fresh prefix (no process started: nothing for the base to stop);
    close() uninstalls it."""

    def __init__(self):
        if not os.path.exists(os.path.join(TOP_BUILDDIR, "Makefile")):
            raise Skip("no configured build tree at %s" % TOP_BUILDDIR)
        self.prefix = os.path.join(tmpdir(), "prefix")
        st, out = make("install", "prefix=" + self.prefix)
        if st != 0:
            raise AssertionError("make install prefix=%s failed:\n%s" % (self.prefix, out[-2000:]))
        self.unit = os.path.join(self.prefix, "lib/systemd/system/ringleader.service")
        self.conf = os.path.join(self.prefix, "etc/ringleader/ringleader.yml")
        self.docdir = os.path.join(self.prefix, "share/doc/ringleader")

    def close(self):
        make("uninstall", "prefix=" + self.prefix)
        super().close()


@R.test(ringleader=True)
def install_puts_every_part_in_place(env):
    for b in ("bin/ringleader", "bin/ringleader-ring"):
        check(os.access(os.path.join(env.prefix, b), os.X_OK), "%s installed" % b)
    for m in MANS:
        check(os.path.isfile(os.path.join(env.prefix, m)), "%s installed" % m)
    for d in DOCS:
        check(os.path.isfile(os.path.join(env.docdir, d)), "doc %s installed" % d)
    with open(env.conf) as f, open(os.path.join(TOP_SRCDIR, "conf", "ringleader.yml")) as g:
        eq(f.read(), g.read(), "the example configuration")
    # The installed program checks the installed example.
    r = subprocess.run([os.path.join(env.prefix, "bin/ringleader"), "-t", "-c", env.conf],
                       capture_output=True, timeout=10)
    eq(r.returncode, 0, "ringleader -t on the installed example (%s)" % r.stderr[-300:])
    mandoc = shutil.which("mandoc")
    if mandoc:
        for m in MANS:
            r = subprocess.run([mandoc, "-Tlint", "-Wwarning", os.path.join(env.prefix, m)],
                               capture_output=True, timeout=10)
            eq(r.returncode, 0, "mandoc -Tlint %s: %s" % (m, r.stdout + r.stderr))
    else:
        print("note: mandoc not installed, man pages not linted")


@R.test(ringleader=True)
def the_unit_names_this_installs_paths_and_verifies(env):
    text = open(env.unit).read()
    exe = os.path.join(env.prefix, "bin/ringleader")
    # the upgrade socket in RuntimeDirectory= (/run/ringleader), docs/upgrade.md
    check("ExecStart=%s -c %s --upgrade-socket /run/ringleader/upgrade.sock\n" % (exe, env.conf)
          in text, "ExecStart with the prefix:\n%s" % text)
    check("ExecStartPre=%s -t -c %s\n" % (exe, env.conf) in text, "ExecStartPre")
    check("file:%s/operations.md" % env.docdir in text, "Documentation= names the installed page")
    check(not re.search(r"@[A-Za-z_]+@", text), "every @placeholder@ replaced")
    notify = "#define HAVE_LIBSYSTEMD 1" in open(os.path.join(TOP_BUILDDIR, "config.h")).read()
    check(("Type=notify\n" if notify else "Type=simple\n") in text, "Type= follows the build")
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        raise Skip("systemd-analyze not installed: the unit was not verified")
    env_vars = dict(os.environ, MANPATH=os.path.join(env.prefix, "share/man"))
    man = "yes" if shutil.which("man") else "no"
    r = subprocess.run([analyze, "verify", "--man=" + man, env.unit], capture_output=True,
                       timeout=60, env=env_vars)
    eq(r.returncode, 0, "systemd-analyze verify: %s" % (r.stdout + r.stderr).decode())


@R.test(ringleader=True)
def an_edited_configuration_survives_install_and_uninstall(env):
    with open(env.conf, "a") as f:
        f.write("# edited by the operator\n")
    st, out = make("install", "prefix=" + env.prefix)
    eq(st, 0, "second make install: %s" % out[-500:])
    check("keeping" in out, "install says it keeps the file: %r" % out[-500:])
    check(open(env.conf).read().endswith("# edited by the operator\n"), "the edit is kept")
    st, out = make("uninstall", "prefix=" + env.prefix)
    eq(st, 0, "make uninstall: %s" % out[-500:])
    check(os.path.exists(env.conf), "an edited configuration is not uninstalled")
    check(not os.path.exists(env.unit), "the unit is uninstalled")
    check(not os.path.exists(os.path.join(env.prefix, "bin/ringleader")), "the program too")
    os.unlink(env.conf)
    # install again, then uninstall the untouched example: nothing is left
    eq(make("install", "prefix=" + env.prefix)[0], 0, "third install")
    eq(make("uninstall", "prefix=" + env.prefix)[0], 0, "uninstall")
    left = [os.path.join(d, f) for d, _, fs in os.walk(env.prefix) for f in fs]
    eq(left, [], "files left after uninstall")
    eq(make("install", "prefix=" + env.prefix)[0], 0, "installed again for the other tests")


def md_links(text):
    """The link targets of a Markdown page: [t](target), [ref]: target, src= / href=, outside
    code (fenced blocks and `spans`)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    out = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    out += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, re.M)
    out += re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", text)
    return out


@R.test(ringleader=True)
def every_page_is_installed_and_every_relative_link_resolves_there(env):
    # cluster.md and tls.md, which installed pages refer to, were left out; the installed
    # README's links named docs/X.md, a folder the installed tree does not have.
    src_pages = sorted(f for f in os.listdir(os.path.join(TOP_SRCDIR, "docs"))
                       if f.endswith(".md"))
    missing = [f for f in src_pages if not os.path.isfile(os.path.join(env.docdir, f))]
    eq(missing, [], "pages of docs/ not installed")
    broken, named, npages, nlinks = [], [], 0, 0
    for d, _, files in os.walk(env.docdir):
        for f in sorted(files):
            if not f.endswith(".md"):
                continue
            page = os.path.join(d, f)
            npages += 1
            text = open(page).read()
            for target in md_links(text):
                if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("#"):
                    continue        # a URL, or an anchor of the page itself
                nlinks += 1
                path = os.path.normpath(os.path.join(d, target.split("#", 1)[0]))
                if not os.path.exists(path):
                    broken.append("%s: %s" % (os.path.relpath(page, env.docdir), target))
            # a page named in the text ("see docs/cluster.md") is one of the installed pages
            for name in sorted(set(re.findall(r"(?<![\w/.-])(?:docs/)?([a-z0-9-]+\.md)\b", text))):
                if name in src_pages and not os.path.isfile(os.path.join(env.docdir, name)):
                    named.append("%s names %s" % (f, name))
    eq(broken, [], "relative links that do not resolve in the installed tree")
    eq(named, [], "pages named by installed pages but not installed")
    check(npages >= len(src_pages) and nlinks > 20,
          "the check read the pages (%d pages, %d links)" % (npages, nlinks))


def documented_paths(env, flag, suffix):
    """The paths the installed README, operations.md and ringleader(8) give to `flag` (-p or
    -o) in their command lines: {path: [the pages that give it]}."""
    found = {}
    pages = [os.path.join(env.docdir, "README.md"), os.path.join(env.docdir, "operations.md"),
             os.path.join(env.prefix, "share/man/man8/ringleader.8")]
    for page in pages:
        text = open(page).read().replace("\\e\n", " ")
        for m in re.finditer(r"(?:^|\s)%s\s+(/\S+%s)" % (re.escape(flag), re.escape(suffix)),
                             text):
            found.setdefault(m.group(1), []).append(os.path.basename(page))
    return found


def wait_for(pred, timeout):
    deadline = time.monotonic() + harness.patience(timeout)
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


@R.test(ringleader=True)
def logrotate_on_the_installed_snippet_makes_a_proxy_started_as_documented_reopen(env):
    # The docs started the proxy with -p /run/ringleader.pid while the snippet signalled
    # the pid in /run/ringleader/ringleader.pid: after `logrotate -f` nothing was signalled
    # and the proxy kept writing to the rotated file.
    logrotate = shutil.which("logrotate") or ("/usr/sbin/logrotate"
                                              if os.access("/usr/sbin/logrotate", os.X_OK)
                                              else None)
    if logrotate is None:
        raise Skip("logrotate not installed (scripts/deps installs it)")
    snippet = open(os.path.join(env.docdir, "examples/ringleader.logrotate")).read()
    rotated = re.findall(r"^(/\S+)\s*\{", snippet, re.M)
    eq(len(rotated), 1, "one log file rotated by the snippet: %r" % rotated)
    pids = documented_paths(env, "-p", ".pid")
    eq(len(pids), 1, "one pid file path in the docs: %r" % pids)
    doc_pid = next(iter(pids))
    # The snippet adapted to temporary paths: the documented pid file and the snippet's
    # log, each replaced wherever it appears; systemctl left out (no unit to signal here).
    d = os.path.join(tmpdir(), "logrotate")
    os.makedirs(d, mode=0o700, exist_ok=True)
    log, pidfile = os.path.join(d, "ringleader.log"), os.path.join(d, "ringleader.pid")
    conf_lr = os.path.join(d, "ringleader.logrotate")
    adapted = snippet.replace(rotated[0], log).replace(doc_pid, pidfile)
    adapted = re.sub(r"\bsystemctl\b", "false", adapted)
    with open(conf_lr, "w") as f:
        f.write(adapted)
    os.chmod(conf_lr, 0o644)
    conf = os.path.join(d, "proxy.yml")
    with open(conf, "w") as f:
        f.write(harness.yaml_dump({"cache": {"listen": "127.0.0.1:%d" % harness.free_port(),
                                             "servers": ["127.0.0.1:%d:1" % harness.free_port()]}}))
    r = subprocess.run([os.path.join(env.prefix, "bin/ringleader"), "-d", "-c", conf, "-p",
                        pidfile, "-o", log, "-v", "5", "-s", str(harness.free_port()),
                        "--workers", "1"], capture_output=True, timeout=harness.patience(15))
    eq(r.returncode, 0, "ringleader -d: %s" % r.stderr.decode()[-300:])
    pid = int(open(pidfile).read())
    try:
        check(read(log) != b"", "the proxy logged at start")
        r = subprocess.run([logrotate, "-f", "-s", os.path.join(d, "state"), conf_lr],
                           capture_output=True, timeout=harness.patience(30))
        eq(r.returncode, 0, "logrotate -f: %s" % (r.stdout + r.stderr).decode()[-500:])
        check(os.path.exists(log + ".1"), "logrotate rotated %s: %s" % (log, os.listdir(d)))
        reopened = wait_for(lambda: b"log file reopened" in read(log), 10)
        os.kill(pid, signal.SIGUSR2)         # lines written after the rotation
        check(wait_for(lambda: b"state:" in read(log) or b"state:" in read(log + ".1"), 10),
              "the state dump was logged")
        check(reopened, "the proxy reopened its log after logrotate's postrotate")
        check(b"state:" in read(log) and b"state:" not in read(log + ".1"),
              "new lines land in the new file, none in the rotated one")
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10)
        if os.path.exists("/proc/%d" % pid):
            os.kill(pid, signal.SIGKILL)
    # ...and the documentation writes its log where the snippet rotates it.
    logs = documented_paths(env, "-o", ".log")
    eq(list(logs), rotated, "the docs' -o paths against the snippet's log: %r" % logs)


R.main(Env)
