"""Scale-out behind a real load balancer: Debian's nginx with deploy/nginx/realtime-tts.conf on loopback in front
of two servers (CPU voice). WebSocket streams run through it, then one replica goes mid-stream:
- killed (SIGKILL): clients on the survivor finish untouched, new connections (HTTP and WebSocket) all land on
  the survivor, and the killed replica's clients get an immediate error, not a hang;
- stopped (SIGTERM, a rolling restart): its own clients finish too (it drains), new connections go to the other.

nginx: .ci/run installs it with apt-get when missing; this test skips only when there is no nginx binary."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from live_server import REPO, Server, children, free_port, start_server, stop_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from realtime_tts.lifecycle import alive

CONF = REPO / "deploy" / "nginx" / "realtime-tts.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
SENTENCES = [f"Sentence number {i} of this turn is spoken while the next one is still being typed. " for i in range(8)]

pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed and could not be (.ci/run installs "
                                                      "Debian's nginx with apt-get)")


class Nginx:
    def __init__(self, tmp: Path, upstreams: list[int]):
        self.dir, self.port = tmp, free_port()
        site = CONF.read_text()
        servers = iter(upstreams)
        site = re.sub(r"server 127\.0\.0\.1:800\d", lambda _: f"server 127.0.0.1:{next(servers)}", site)
        site = site.replace("listen 8080;", f"listen 127.0.0.1:{self.port};")
        site = site.replace("/var/log/nginx/realtime-tts.access.log", str(tmp / "access.log"))
        (tmp / "site.conf").write_text(site)
        temp = "".join(f"{kind}_temp_path {tmp / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                       "scgi"))
        (tmp / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"pid {tmp / 'nginx.pid'};\nerror_log {tmp / 'error.log'} info;\ndaemon off;\nworker_processes 1;\n"
            + "events { worker_connections 1024; }\n"
            + f"http {{\n{temp}include {tmp / 'site.conf'};\n}}\n")
        check = subprocess.run([NGINX, "-t", "-p", str(tmp), "-c", str(tmp / "nginx.conf")], capture_output=True,
                               text=True, check=False)
        assert check.returncode == 0, check.stderr  # the shipped config is valid nginx
        self.proc = subprocess.Popen([NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp / "error.log").read_text()
                time.sleep(0.1)

    def access(self) -> str:
        return (self.dir / "access.log").read_text()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGQUIT)  # graceful nginx stop, by its own pid
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class TurnClient(threading.Thread):
    """An agent's turn over WS /v1/stream/text: one sentence every 0.5 s while reading audio, then end."""

    def __init__(self, url: str, name: str):
        super().__init__(daemon=True, name=name)
        self.url, self.rid = url, name
        self.frames: list[bytes] = []
        self.texts: list[dict[str, object]] = []
        self.close_code: int | None = None
        self.error: str | None = None
        self.started = threading.Event()
        self.closed_at = 0.0

    def run(self) -> None:
        try:
            with connect(self.url, additional_headers={"X-Request-Id": self.rid}, open_timeout=10,
                         max_size=None) as ws:
                ws.send(json.dumps({"seed": 7}))
                for s in SENTENCES:
                    ws.send(json.dumps({"text": s}))
                    self._read(ws, 0.5)
                ws.send(json.dumps({"end": True}))
                self._read(ws, 60)
        except ConnectionClosed as e:
            self.close_code = e.rcvd.code if e.rcvd is not None else None
            self.error = None if self.close_code == 1000 else f"{type(e).__name__}: {e}"
        except OSError as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.closed_at = time.monotonic()
            self.started.set()

    def _read(self, ws: object, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = ws.recv(timeout=left)  # type: ignore[attr-defined]
            except TimeoutError:
                return
            if isinstance(msg, bytes):
                self.frames.append(msg)
                self.started.set()
            else:
                self.texts.append(json.loads(msg))


def replica_of(rid: str, replicas: dict[str, Server]) -> str:
    hits = [name for name, srv in replicas.items() if f'request_id="{rid}"' in srv.log()]
    assert len(hits) == 1, (rid, hits)
    return hits[0]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_two_replicas_behind_nginx_one_goes(tmp_path: Path, how: str) -> None:
    a = start_server(tmp_path, "--cpu-workers", "1", "--log-level", "info")
    b = start_server(tmp_path, "--cpu-workers", "1", "--log-level", "info")
    replicas = {"A": a, "B": b}
    a_workers = children(a.proc.pid)
    lb = Nginx(tmp_path, [a.port, b.port])
    try:
        clients = [TurnClient(f"ws://127.0.0.1:{lb.port}/v1/stream/text", f"turn-{i}") for i in range(6)]
        for c in clients:
            c.start()
            time.sleep(0.05)
        assert all(c.started.wait(30) for c in clients)
        where = {c.rid: replica_of(c.rid, replicas) for c in clients}
        on_a = [c for c in clients if where[c.rid] == "A"]
        on_b = [c for c in clients if where[c.rid] == "B"]
        assert on_a and on_b, where  # least_conn spread the streams over both
        time.sleep(0.5)
        t_kill = time.monotonic()
        a.proc.send_signal(getattr(signal, how))
        if how == "SIGKILL":
            a.proc.wait(10)
        else:
            # "new connections go to the survivor" holds once A has seen the signal and closed its listener;
            # a request that reaches A in the instant before that is served by A, as any replica would be
            listener_closed = False
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", a.port), timeout=0.5).close()
                except OSError:
                    listener_closed = True
                    break
                time.sleep(0.05)
            assert listener_closed, "the draining replica still accepts connections 5 s after SIGTERM"

        # new connections after the kill: plain HTTP and WebSocket, all served, all by B
        after = []
        for i in range(6):
            rid = f"after-{i}"
            r = httpx.post(f"http://127.0.0.1:{lb.port}/v1/audio/speech", headers={"X-Request-Id": rid}, timeout=60,
                           json={"input": "A new request after the crash.", "response_format": "wav", "stream": False})
            assert r.status_code == 200 and len(r.content) > 24_000, (r.status_code, r.text[:200])
            after.append(rid)
        ws_after = TurnClient(f"ws://127.0.0.1:{lb.port}/v1/stream/text", "after-ws")
        ws_after.run()  # in this thread: a whole turn
        assert ws_after.error is None and ws_after.close_code == 1000, ws_after.error

        for c in clients:
            c.join(90)
            assert not c.is_alive(), f"{c.rid} hangs"
        if how == "SIGTERM":
            assert a.proc.wait(30) == 0 and "drain time over" not in a.log()
        # the survivor's clients (and with SIGTERM the draining replica's too): every sentence, normal end
        for c in on_b + (on_a if how == "SIGTERM" else []):
            assert c.error is None and c.close_code == 1000, (c.rid, c.error)
            done = c.texts[-1]
            # every sentence spoken (the first may be cut early at a clause: one unit more)
            assert done["done"] is True and done["reason"] == "end" and done["sentences"] >= len(SENTENCES)  # type: ignore[operator]
            audio_ms = done["stats"]["audio_duration_ms"]  # type: ignore[index]
            assert abs(sum(len(f) for f in c.frames) / 48 - audio_ms) < 50
            # unaffected: the same audio as the same turn run alone after the crash (same text, same seed)
            assert b"".join(c.frames) == b"".join(ws_after.frames), c.rid
        # the killed replica's clients: an error at once, not a hang
        for c in on_a if how == "SIGKILL" else []:
            assert c.close_code != 1000 and c.error is not None, c.rid
            assert c.closed_at - t_kill < 3, f"{c.rid} learned of the crash after {c.closed_at - t_kill:.1f} s"
        for rid in [*after, "after-ws"]:
            assert f'request_id="{rid}"' in b.log() and f'request_id="{rid}"' not in a.log(), rid
        lines = {m[1]: m[2] for m in re.finditer(r"rid=(\S+) upstream=(.+?) upstream_status=", lb.access())}
        for rid in after:
            assert lines[rid].split(", ")[-1] == f"127.0.0.1:{b.port}", lines[rid]
        print(f"\n{how}: replicas A=:{a.port} (gets {how}) B=:{b.port}; streams on A: {[c.rid for c in on_a]}, on B: "
              f"{[c.rid for c in on_b]}")
        for c in clients:
            print(f"  {c.rid} on {where[c.rid]}: close={c.close_code} error={c.error!r} "
                  f"audio={sum(len(f) for f in c.frames) / 48e3:.2f} s ended {c.closed_at - t_kill:+.2f} s after {how}")
        print(f"  after {how}: {len(after)} HTTP + 1 WS turn, all 200/1000 on B; nginx upstreams: "
              f"{[lines[r] for r in after]}")
        time.sleep(1)
        assert a_workers and not any(alive(p) for p in a_workers), "A's worker outlived it"
    finally:
        lb.stop()
        stop_server(b)
        a.proc.kill()
