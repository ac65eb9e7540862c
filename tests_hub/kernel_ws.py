"""Run notebook cells in a kernel of a student's server, over the kernel websocket, as JupyterLab does.

The server's REST API starts the kernel (``POST /user/NAME/api/kernels``); the cells go as
``execute_request`` messages on ``/api/kernels/ID/channels`` (Jupyter's JSON websocket protocol,
messages built by jupyter_client's Session), and the outputs are collected from the iopub
messages that answer each request until the kernel reports idle, in the nbformat output shapes
a saved notebook has (stream, display_data, execute_result, error).

A lost connection is met as JupyterLab meets it: the client reconnects with the same ``session_id``,
and the server, which buffered the kernel's messages for that session meanwhile, replays them. Each
reconnect is recorded (``RemoteKernel.reconnects``), so the load test can report how often it happened.
"""

from __future__ import annotations

import json
import re
import time

import requests
import websocket
from jupyter_client.session import Session


def _output_of(msg: dict) -> dict | None:
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        return {"output_type": "stream", "name": content["name"], "text": content["text"]}
    if kind in ("display_data", "execute_result"):
        return {"output_type": kind, "data": content["data"]}
    if kind == "error":
        return {"output_type": "error", "ename": content["ename"], "evalue": content["evalue"],
                "traceback": content["traceback"]}
    return None


def _merge_streams(outputs: list[dict]) -> list[dict]:
    """Consecutive stream messages of one name are one output in a saved notebook."""
    merged: list[dict] = []
    for out in outputs:
        if (out["output_type"] == "stream" and merged and merged[-1]["output_type"] == "stream"
                and merged[-1]["name"] == out["name"]):
            merged[-1] = dict(merged[-1], text=merged[-1]["text"] + out["text"])
        else:
            merged.append(out)
    return merged


class RemoteKernel:
    """A kernel on a student's server, reached through the hub's proxy with the student's token."""

    def __init__(self, hub_url: str, username: str, token: str, kernel_name: str = "attn-course",
                 timeout_s: float = 120.0):
        self.base = f"{hub_url.rstrip('/')}/user/{username}"
        self.headers = {"Authorization": f"token {token}"}
        self.kernel_name = kernel_name
        self.timeout_s = timeout_s
        self.session = Session(username=username)
        self.kernel_id: str | None = None
        self.ws: websocket.WebSocket | None = None
        self.reconnects: list[tuple[float, str]] = []  # (time.time() of the drop, what was seen)
        self.max_reconnects = 5

    def start(self) -> "RemoteKernel":
        r = requests.post(f"{self.base}/api/kernels", headers=self.headers, json={"name": self.kernel_name},
                          timeout=self.timeout_s)
        r.raise_for_status()
        self.kernel_id = r.json()["id"]
        self._connect()
        # The kernel answers kernel_info once it is up: wait for that before sending cells.
        self._request("kernel_info_request", {}, channel="shell")
        return self

    def _connect(self) -> None:
        # session_id names this client: with it the server buffers the kernel's messages while the
        # connection is down and replays them when the same session reconnects (as JupyterLab does).
        ws_url = (re.sub(r"^http", "ws", self.base) + f"/api/kernels/{self.kernel_id}/channels"
                  + f"?session_id={self.session.session}")
        self.ws = websocket.create_connection(ws_url, header=[f"{k}: {v}" for k, v in self.headers.items()],
                                              timeout=self.timeout_s)

    def _reconnect(self, error: Exception) -> None:
        self.reconnects.append((time.time(), f"{type(error).__name__}: {error}"))
        if len(self.reconnects) > self.max_reconnects:
            raise error
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 (the old socket is gone anyway)
            pass
        time.sleep(1.0)
        self._connect()

    def _recv(self) -> dict:
        while True:
            try:
                return json.loads(self.ws.recv())
            except (websocket.WebSocketConnectionClosedException, ConnectionError) as e:
                self._reconnect(e)

    def _send(self, msg_type: str, content: dict, channel: str) -> str:
        msg = self.session.msg(msg_type, content)
        wire = {"header": msg["header"], "parent_header": {}, "metadata": {}, "content": content,
                "channel": channel, "buffers": []}
        wire["header"]["date"] = wire["header"]["date"].isoformat()
        try:
            self.ws.send(json.dumps(wire))
        except (websocket.WebSocketConnectionClosedException, ConnectionError) as e:
            self._reconnect(e)
            self.ws.send(json.dumps(wire))
        return msg["header"]["msg_id"]

    def _request(self, msg_type: str, content: dict, channel: str) -> tuple[dict, list[dict]]:
        """Send a request; return its shell reply and the outputs published for it (until idle)."""
        return self.collect(self._send(msg_type, content, channel), msg_type)

    def collect(self, msg_id: str, msg_type: str = "execute_request") -> tuple[dict, list[dict]]:
        """The shell reply and the outputs of the request ``msg_id`` (until the kernel is idle)."""
        reply, outputs, idle = None, [], False
        deadline = time.monotonic() + self.timeout_s
        while reply is None or not idle:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{msg_type} got no complete answer within {self.timeout_s:.0f} s")
            self.ws.settimeout(max(1.0, deadline - time.monotonic()))
            msg = self._recv()
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["channel"] == "shell":
                reply = msg["content"]
            elif msg["channel"] == "iopub":
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
                else:
                    out = _output_of(msg)
                    if out is not None:
                        outputs.append(out)
        return reply, _merge_streams(outputs)

    def send_execute(self, code: str) -> str:
        """Send a cell without waiting for it; its msg_id (for :meth:`collect`)."""
        return self._send("execute_request", {"code": code, "silent": False, "store_history": True,
                                              "user_expressions": {}, "allow_stdin": False,
                                              "stop_on_error": True}, channel="shell")

    def execute(self, code: str) -> tuple[dict, list[dict]]:
        """Run a cell: its shell reply and outputs."""
        return self.collect(self.send_execute(code))

    def stop(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close()
            except OSError:
                pass
            self.ws = None
        if self.kernel_id is not None:
            try:
                requests.delete(f"{self.base}/api/kernels/{self.kernel_id}", headers=self.headers, timeout=30)
            except requests.RequestException:
                pass
            self.kernel_id = None

    def __enter__(self) -> "RemoteKernel":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
