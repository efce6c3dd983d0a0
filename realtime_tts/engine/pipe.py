"""PipeWriter: messages to a worker process's pipe, written from the event loop without a thread.

A write goes straight to the non-blocking pipe (a Submit is a few hundred bytes: the pipe takes it at once); what the
pipe cannot take now waits in a buffer that loop.add_writer flushes. A writer thread per worker cost the loop a GIL
hand-off per message instead (bench/load.py --profile-web: ~2 ms of the loop's wall time per Submit on a busy
2-core host). Frames as multiprocessing.connection.Connection.send_bytes does, so the worker reads them with
recv_bytes. Imports only the stdlib.
"""

from __future__ import annotations

import asyncio
import os
import struct
from multiprocessing.connection import Connection

_MAX_SHORT_FRAME = 0x7FFFFFFF  # longer frames: a -1 marker and an 8-byte length (Connection's format)


class PipeWriter:
    """Owns the web process's write end of one worker's pipe (closes it). Use on the loop thread only."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop):
        self._conn = conn
        self._fd = conn.fileno()
        os.set_blocking(self._fd, False)
        self._loop = loop
        self._pending = bytearray()
        self._watching = False
        self._closing = False
        self.closed = False

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def send(self, data: bytes) -> None:
        """Queue one message (dropped once closed: the worker is gone and its reader reports that)."""
        if self.closed or self._closing:
            return
        n = len(data)
        header = struct.pack("!i", n) if n <= _MAX_SHORT_FRAME else struct.pack("!i", -1) + struct.pack("!Q", n)
        if self._pending:
            self._pending += header
            self._pending += data
            return
        frame = header + data
        try:
            written = os.write(self._fd, frame)
        except BlockingIOError:
            written = 0
        except OSError:
            self.close()
            return
        if written < len(frame):
            self._pending += memoryview(frame)[written:]
            self._watch()

    def _watch(self) -> None:
        if not self._watching:
            self._loop.add_writer(self._fd, self._flush)
            self._watching = True

    def _flush(self) -> None:
        try:
            written = os.write(self._fd, self._pending)
        except BlockingIOError:
            return
        except OSError:
            self.close()
            return
        del self._pending[:written]
        if not self._pending:
            self._loop.remove_writer(self._fd)
            self._watching = False
            if self._closing:
                self.close()

    def close_when_flushed(self) -> None:
        """Close once everything queued is written (shutdown: the Shutdown message goes first)."""
        if self._pending:
            self._closing = True
        else:
            self.close()

    def close(self) -> None:
        """Close now, dropping what is queued."""
        if self.closed:
            return
        self.closed = True
        if self._watching:
            self._loop.remove_writer(self._fd)
            self._watching = False
        self._pending.clear()
        self._conn.close()
