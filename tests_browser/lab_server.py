"""The JupyterLab server the browser tests drive: `make lab`'s own command line, plus test-only settings.

The server is started from :func:`attn_lib.course.lab.lab_command` (what ``make lab`` runs), with a fixed
port and token, no browser, and a throwaway config that:

- turns autosave off and refuses every save (a pre-save hook answers 403), so running a
  notebook in the browser can never rewrite the committed ``.ipynb`` files;
- keeps JupyterLab's settings and workspaces in a temporary folder (the tester's own
  ``~/.jupyter`` is neither read for them nor written);
- attaches every notebook cell to the page (``windowingMode: none``), so the checks and the
  screenshot see all cells, not only those in view;
- does not fetch Jupyter news (no network).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from attn_lib.course.lab import lab_command

# Extra lines in the server's own log that mean a notebook save was attempted (and refused).
REFUSED_SAVE_MARK = "BROWSER-TEST REFUSED SAVE"

_SERVER_CONFIG = f'''
from tornado.web import HTTPError


def refuse_save(model, path, contents_manager, **kwargs):
    """The browser test only reads notebooks: never let the page write one."""
    contents_manager.log.error("{REFUSED_SAVE_MARK} %s", path)
    raise HTTPError(403, "the browser test never saves files")


c.ContentsManager.pre_save_hook = refuse_save
'''

# JupyterLab user settings (one file per plugin), written to a temporary user_settings_dir.
_LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False,
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running ``jupyter lab``; use as a context manager so it stops also on failure."""

    def __init__(self, startup_timeout: float = 120.0):
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout = startup_timeout
        self._tmp = Path(tempfile.mkdtemp(prefix="attn-browser-lab-"))
        self.log_path = self._tmp / "server.log"
        self.proc: subprocess.Popen | None = None
        self._shutdowns: list[threading.Thread] = []
        self._log = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def argv(self) -> list[str]:
        settings_dir = self._tmp / "settings"
        for rel, value in _LAB_SETTINGS.items():
            path = settings_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        (self._tmp / "workspaces").mkdir(exist_ok=True)
        config = self._tmp / "browser_test_config.py"
        config.write_text(_SERVER_CONFIG)
        argv = lab_command(port=self.port, token=self.token, open_browser=False)
        if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in argv:
            argv.append("--allow-root")  # CI containers run as root
        return argv + [
            f"--config={config}",
            f"--LabApp.user_settings_dir={settings_dir}",
            f"--LabApp.workspaces_dir={self._tmp / 'workspaces'}",
        ]

    def start(self) -> "LabServer":
        env = dict(os.environ)
        # A learner's `make lab` has no MPLBACKEND; an inherited Agg (tests/conftest.py sets it)
        # would stop kernels from drawing inline figures.
        env.pop("MPLBACKEND", None)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.argv(), stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                with urllib.request.urlopen(self.api_url("status"), timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"jupyter lab did not answer within {self.startup_timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self) -> None:
        for thread in self._shutdowns:
            thread.join(timeout=30)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # jupyter shuts its kernels down on SIGTERM
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def cleanup(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "LabServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------------------------------
    def api_url(self, path: str) -> str:
        return f"{self.base_url}/api/{path}?token={self.token}"

    def lab_url(self, notebook: str) -> str:
        """URL that opens ``notebook`` (a path relative to the course root) in JupyterLab."""
        return f"{self.base_url}/lab/tree/{notebook}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(self.api_url(path), method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self, wait: bool = True) -> None:
        """Shut down every running kernel (wait=False: in the background, while the next test starts)."""
        def shut_down(ids):
            for kernel_id in ids:
                try:
                    self.api(f"kernels/{kernel_id}", method="DELETE")
                except (urllib.error.HTTPError, OSError):
                    pass

        ids = [k["id"] for k in self.api("kernels")]
        if wait:
            shut_down(ids)
        else:
            thread = threading.Thread(target=shut_down, args=(ids,), daemon=True)
            thread.start()
            self._shutdowns.append(thread)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def refused_saves(self) -> list[str]:
        return [line for line in self.log_text().splitlines() if REFUSED_SAVE_MARK in line]
