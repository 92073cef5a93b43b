"""Keeps `pollux tune`'s Ray processes from outliving it, even after `kill -9`.

Ray fate-shares its GCS and raylet with the process that started them, but not everything below them: killed with
-9, a Ray driver leaves its raylet's agents (DashboardAgent, RuntimeEnvAgent) hanging, orphaned, for good. So
`pollux tune` does not run Ray itself: it starts this guard, which runs the Tune driver (the same command, marked by
`DRIVER_ENV`) as its child while being a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so that every process
below it that loses its parent becomes its child. When the driver ends, or when `pollux tune` dies (its end of the
guard's stdin pipe closes, whatever killed it), the guard kills the driver and every process still below it, then
exits with the driver's code. The Pollux jobs of the trials run in the service, not below the guard, and go on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

DRIVER_ENV = "POLLUX_TUNE_DRIVER"  # set in the driver's environment: run Tune here, not another guard
_PR_SET_CHILD_SUBREAPER = 36
_SWEEP_S = 10.0  # how long the guard goes on killing what appears below it


def guarded(command: list[str]) -> int:
    """Run `command` (the Tune driver) under a guard process; its exit code. Called by `pollux tune`."""
    read_end, write_end = os.pipe()
    guard = subprocess.Popen([sys.executable, "-m", "pollux.runtime.tune_guard", *command], stdin=read_end)
    os.close(read_end)  # `write_end` stays open until this process exits, however it exits
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the driver, which stops Tune cleanly
    try:
        return guard.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(write_end)


def _children() -> list[int]:
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rfind(")") + 2 :].split()[1]) == me:
                    found.append(int(entry.name))
    return found


def _kill_everything_below() -> None:
    """SIGKILL every child, reap it, and again for the orphans that become children meanwhile, until none is left."""
    deadline = time.monotonic() + _SWEEP_S
    while (children := _children()) and time.monotonic() < deadline:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def main(command: list[str]) -> int:
    """The guard itself: subreaper, driver, and the sweep when either side ends."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = subprocess.Popen(command, env={**os.environ, DRIVER_ENV: "1"}, stdin=subprocess.DEVNULL)

    def watch_parent() -> None:
        while os.read(0, 4096):  # b"" once `pollux tune` has exited: its end of the pipe is closed (raw reads: no
            pass  # buffered stdin whose lock a daemon thread would hold at the interpreter's exit)
        if driver.poll() is None:
            driver.kill()

    threading.Thread(target=watch_parent, daemon=True).start()
    code = driver.wait()
    _kill_everything_below()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
