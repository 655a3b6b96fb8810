"""A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (standard library only).

Chromium reads commands from file descriptor 3 and writes replies and events to descriptor 4, each
message JSON followed by a NUL byte.
"""
import json
import os
import select
import subprocess
import tempfile
import time


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, chromium, width=1400, height=1000):
        self._profile = tempfile.TemporaryDirectory(prefix="gb-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child must see the pipe ends as descriptors 3 and 4 (kept open by pass_fds, which
        # closes every other descriptor after preexec_fn ran).
        def arrange():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)
        args = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--remote-debugging-pipe", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
                "--mute-audio", "--force-color-profile=srgb", "--font-render-hinting=none",
                f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}",
                "about:blank"]
        self._proc = subprocess.Popen(args, preexec_fn=arrange, pass_fds=(3, 4),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events = []
        self.session = None

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._profile.cleanup()

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("timed out waiting for the browser")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                err = self._proc.stderr.read().decode(errors="replace")[-2000:] if self._proc.poll() is not None else ""
                raise BrowserError("the browser closed its pipe" + (": " + err if err else ""))
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, params=None, session=True, timeout=30):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        for i, e in enumerate(self.events):
            if e["method"] == method:
                return self.events.pop(i)
        while True:
            e = self._read_message(deadline)
            if e.get("method") == method:
                return e
            if "method" in e:
                self.events.append(e)

    def pump(self, seconds):
        """Collects events for a while (rendering after a resize or a theme change)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                e = self._read_message(deadline)
                if "method" in e:
                    self.events.append(e)
        except BrowserError as e:
            if "timed out" not in str(e):
                raise

    def open_page(self):
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError("page script failed: " + json.dumps(result["exceptionDetails"])[:800])
        return result["result"].get("value")
