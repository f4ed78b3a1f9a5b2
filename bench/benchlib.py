"""Shared pieces of the bench scripts: running a command, and a server child
process started with a Unix socket and stopped by PID."""

import os
import signal
import socket
import subprocess
import time


def sh(*args, **kw):
    """Run a command; its stdout, or RuntimeError with its stderr."""
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def wait_socket(path, proc, timeout=120):
    """Wait until `path` accepts connections (RuntimeError if `proc` exits first)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early: {proc.args}")
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{path} never accepted connections")


class Proc:
    """A server child process, stopped by PID with SIGTERM."""

    def __init__(self, args, sock, log):
        if os.path.exists(sock):
            os.unlink(sock)
        self.p = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.sock = sock
        wait_socket(sock, self.p)

    @property
    def uri(self):
        return f"nbd+unix:///?socket={self.sock}"

    @property
    def pid(self):
        return self.p.pid

    def cpu_seconds(self):
        """utime + stime of the process so far (/proc/PID/stat fields 14 and 15)."""
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
