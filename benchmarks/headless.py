"""A real browser for the dashboard's tests and benchmark: headless Chromium driven over the DevTools protocol on a
pipe (`--remote-debugging-pipe`: JSON messages ended by NUL, commands on fd 3, replies on fd 4), standard library
only, so no driver or browser download is needed beyond Debian's `chromium` package.

    with Browser() as browser:
        browser.open(link)
        browser.wait_for("document.body.dataset.ready === '1'")
        browser.screenshot(path)
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

INSTALL_HINT = "headless Chromium is missing: install Debian's package (`apt-get install -y chromium`)"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    """The browser binary: $POLLUX_CHROMIUM, else the first of `CHROMIUM_NAMES` on PATH."""
    given = os.environ.get("POLLUX_CHROMIUM")
    if given:
        return given
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


def chromium_flags(profile: str, width: int, height: int) -> list[str]:
    """Flags for a quiet, throw-away headless browser (as root in CI, hence no sandbox)."""
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--mute-audio",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ]


class BrowserError(RuntimeError):
    """The browser answered a command with an error, died, or a condition never came true."""


class Browser:
    """One headless Chromium with one page; every call waits for its reply (at most `timeout_s`)."""

    def __init__(self, width: int = 1400, height: int = 1000, timeout_s: float = 30.0) -> None:
        binary = chromium_path()
        if binary is None:
            raise BrowserError(INSTALL_HINT)
        self.timeout_s = timeout_s
        self._profile = tempfile.TemporaryDirectory(prefix="pollux-chromium-")
        commands_r, self._commands_w = os.pipe()
        self._replies_r, replies_w = os.pipe()
        # above fd 4, so wiring one cannot overwrite the other; non-inheritable, so only the dup2'ed copies survive exec
        high_r, high_w = (
            fcntl.fcntl(commands_r, fcntl.F_DUPFD_CLOEXEC, 10),
            fcntl.fcntl(replies_w, fcntl.F_DUPFD_CLOEXEC, 10),
        )
        os.close(commands_r)
        os.close(replies_w)
        commands_r, replies_w = high_r, high_w

        def wire_pipes() -> None:  # in the child: the protocol's fds 3 (commands in) and 4 (replies out)
            os.dup2(commands_r, 3)
            os.dup2(replies_w, 4)

        self.process = subprocess.Popen(
            [binary, *chromium_flags(self._profile.name, width, height), "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_pipes,
            close_fds=False,  # closing happens after preexec_fn and would take fds 3 and 4 too
        )
        os.close(commands_r)
        os.close(replies_w)
        self._buffer = b""
        self._next_id = 0
        self._session = ""
        try:
            targets = self.send("Target.getTargets")["targetInfos"]
            page = next(t["targetId"] for t in targets if t["type"] == "page")
            self._session = self.send("Target.attachToTarget", targetId=page, flatten=True)["sessionId"]
            self.send("Page.enable")
            self.send(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        except BaseException:
            self.close()
            raise

    # -- protocol -------------------------------------------------------------------------------------------------
    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        os.write(self._commands_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return dict(reply.get("result", {}))

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no reply from the browser within {self.timeout_s:.0f} s")
            ready, _, _ = select.select([self._replies_r], [], [], left)
            if ready:
                chunk = os.read(self._replies_r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"the browser exited (code {self.process.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(raw))

    # -- what tests do --------------------------------------------------------------------------------------------
    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0, what: str = "") -> Any:
        """Poll `expression` until it is truthy (bounded; the page may still be loading, so errors retry)."""
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except BrowserError as error:
                value, last_error = None, str(error)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(f"timed out after {timeout_s:.0f} s waiting for {what or expression} {last_error}".strip())

    def screenshot(self, path: Path) -> Path:
        """The page as a PNG, all of it (not just the window)."""
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                with contextlib.suppress(BrowserError):
                    self.send("Browser.close")
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(10)
        finally:
            for fd in (self._commands_w, self._replies_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def dump_dom(url: str, budget_ms: int = 5000) -> str:
    """The page's DOM after its scripts ran (`chromium --dump-dom`, virtual time budget `budget_ms`)."""
    binary = chromium_path()
    if binary is None:
        raise BrowserError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="pollux-chromium-") as profile:
        result = subprocess.run(
            [*[binary, *chromium_flags(profile, 1400, 1000)], f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    if result.returncode != 0:
        raise BrowserError(f"chromium --dump-dom exited {result.returncode}: {result.stderr[-500:]}")
    return result.stdout
