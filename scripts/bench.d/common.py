"""scripts/bench.d: what the bench's modules share (stdlib only; no module reaches into another's privates).

Paths and the errors every module raises; the process helpers (network namespace entry, posix_spawn, the
bench-spawn launcher that times one fresh process, /proc readings, stopping an agent); the local HTTP probe;
the statistics and number formatting of the reports; the entry guard of the two drivers (bench.py, scale.py).
"""

import ctypes
import http.client
import math
import os
import signal
import socket
import sys
import time

PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CNI_DIR = "/usr/lib/cni"
CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


def run(main):
    """A driver's entry: a BenchError ends it with its message and exit status 1."""
    try:
        main()
    except BenchError as e:
        log(f"ERROR: {e}")
        sys.exit(1)


def sigterm_interrupts():
    """From now on SIGTERM raises KeyboardInterrupt: a driver's finally clauses clean up as on ^C."""

    def on_signal(sig, _frm):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)


# --- processes ------------------------------------------------------------------------------------------


def setns(fd):
    if LIBC.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: " + os.strerror(e))


def spawn(argv, env, stdin=None, stdout=os.devnull, stderr=os.devnull, exe=None):
    fa = [
        (os.POSIX_SPAWN_OPEN, 0, stdin or os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
    ]
    return os.posix_spawn(exe or argv[0], argv, env, file_actions=fa)


class Sample:
    __slots__ = ("ns", "rc", "rss_kb", "cpu_s")

    def __init__(self, ns, rc, rss_kb, cpu_s):
        self.ns, self.rc, self.rss_kb, self.cpu_s = ns, rc, rss_kb, cpu_s


def read_result(path, what):
    try:
        f = open(path).read().split()
        return Sample(int(f[0]), int(f[1]), int(f[2]), int(f[3]) / 1e6)
    except (OSError, ValueError, IndexError) as e:
        raise BenchError(f"{what}: no result from bench-spawn ({e})")


class Launcher:
    """The bench-spawn launcher (scripts/bench.d/spawn.c): it runs one fresh process and writes its wall ns,
    exit code, peak RSS and CPU into a result file; `result` is the file timed() uses."""

    def __init__(self, exe, result):
        self.exe, self.result = exe, result

    def start(self, result, argv, env, stdin=None, stdout=os.devnull, stderr=os.devnull, exe=None):
        """Spawns `argv` under the launcher, its figures going to `result`; returns the launcher's pid."""
        return spawn([self.exe, result, exe or argv[0]] + list(argv), env, stdin, stdout, stderr, exe=self.exe)

    def timed(self, argv, env, stdin=None, stdout=os.devnull, stderr=os.devnull, exe=None, result=None):
        """One fresh process, measured by the tiny static launcher (wall ns, exit code, peak RSS, CPU)."""
        res = result or self.result
        try:
            os.unlink(res)
        except FileNotFoundError:
            pass
        pid = self.start(res, argv, env, stdin, stdout, stderr, exe=exe)
        _, status, _ = os.wait4(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"bench-spawn failed for {argv[0]} (status {status})")
        return read_result(res, argv[0])


def tail(path, n=15):
    try:
        return "".join(open(path).readlines()[-n:])
    except OSError:
        return ""


def status_kb(pid, key):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_s(pid):
    """utime + stime of a live process, seconds."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def stop(pid):
    """SIGTERM, up to 5 s for the process to exit, then SIGKILL; a process already reaped is left alone."""
    try:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def atomic_write(path, text):
    tmp = f"{path}.bench-tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


# --- local HTTP -----------------------------------------------------------------------------------------


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_get(port, path, timeout=0.5):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body.decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return None, ""


# --- statistics and formatting --------------------------------------------------------------------------


def ms(ns):
    return ns / 1e6


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = max(0, math.ceil(p / 100.0 * len(sorted_vals)) - 1)
    return sorted_vals[k]


def median(vals):
    s = sorted(vals)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def median_ci(sorted_vals, level=0.95):
    """A distribution-free confidence interval of the median (order statistics, binomial): (low, high), or
    None when there are too few values for one."""
    n, tail_p = len(sorted_vals), (1 - level) / 2
    cdf, k = 0.0, 0
    while k < n and cdf + math.comb(n, k) / 2**n <= tail_p:
        cdf += math.comb(n, k) / 2**n
        k += 1
    return (sorted_vals[k - 1], sorted_vals[n - k]) if k else None


def paired(a, b):
    """Runs paired by index (a[i] and b[i] taken in turn, so load hits both alike): the median of the ratios
    a[i] / b[i] and its 95 % interval; None without pairs."""
    r = sorted(x / y for x, y in zip(a, b) if y)
    if not r:
        return None
    return {"n": len(r), "median": median(r), "ci95": median_ci(r)}


def fmt(v, d=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{d}f}"
    return str(v)


def machine():
    cpu = "unknown"
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": os.uname().release, "loadavg_at_end": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
