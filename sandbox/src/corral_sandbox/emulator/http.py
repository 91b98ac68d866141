"""A lean HTTP/1.1 server for the emulator: keep-alive, Content-Length and chunked bodies, streaming.

Why not aiohttp's server: measured on this machine it spends about four times as much CPU per request
as the emulator's own request handling (request/response objects, header multidicts, a task per
request). Kubernetes clients only need plain HTTP/1.1, so requests are parsed here with bytes
operations and a request whose answer is ready at once (every get, list, create, update, patch,
delete without injected latency) is answered inside `data_received`, without creating a task.
Watches and delayed answers run as a task that owns the connection until it finishes; requests
pipelined behind it wait in the buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import parse_qs, unquote

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
MAX_BODY = 512 * 1024 * 1024  # bulk loads through /_sandbox carry many objects in one body
_REASONS = {s.value: s.phrase for s in HTTPStatus}


class HttpError(Exception):
    """A request that cannot be parsed; answered with `status` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Query(dict[str, list[str]]):
    """Query parameters; `get` gives the first value like a multidict, `getall` every value."""

    def get(self, name: str, default: Any = None) -> Any:
        values = dict.get(self, name)
        return values[0] if values else default

    def getall(self, name: str, default: list[str] | None = None) -> list[str]:
        return dict.get(self, name) or (default if default is not None else [])


class Request:
    __slots__ = ("body", "conn", "headers", "method", "path", "query")

    def __init__(
        self, method: str, path: str, query: Query, headers: dict[str, str], body: bytes, conn: Connection
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.conn = conn


class Reply:
    """A complete answer; `headers` beyond Content-Type/Content-Length are optional."""

    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        body: bytes,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.body = body
        self.status = status
        self.headers = headers
        self.content_type = content_type


# What a handler gives back: a Reply now, or a coroutine that answers later (a Reply to send, or None
# when it wrote a streamed response itself).
Handled = Reply | Coroutine[Any, Any, Reply | None]
Handler = Callable[[Request], Handled]


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def encode_reply(reply: Reply, keep_alive: bool) -> bytes:
    headers = [("Content-Type", reply.content_type), ("Content-Length", str(len(reply.body)))]
    if reply.headers:
        headers.extend(reply.headers.items())
    if not keep_alive:
        headers.append(("Connection", "close"))
    return _head(reply.status, headers) + reply.body


def _parse_head(head: bytes) -> tuple[str, str, Query, dict[str, str], bool]:
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"malformed header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    path, _, raw_query = target.partition("?")
    query = Query(parse_qs(raw_query, keep_blank_values=True)) if raw_query else Query()
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return method, unquote(path), query, headers, keep_alive


class Connection(asyncio.Protocol):
    """One client connection: parses requests in order and writes their answers in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._busy: asyncio.Task[None] | None = None
        self._paused = False
        self._drain: asyncio.Future[None] | None = None
        self._keep_alive = True
        self._continued = False  # "100 Continue" already sent for the request being received

    # --- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have the same methods.
        self.transport = cast("asyncio.Transport", transport)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._wake_drain()
        if self._busy is not None and not self._busy.done():
            self._busy.cancel()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._busy is None:
            self._process()
        elif len(self._buffer) > MAX_HEAD and self.transport is not None:
            self.transport.pause_reading()  # a client pipelining behind a long request waits

    # --- requests -------------------------------------------------------------------------------------

    def _process(self) -> None:
        buffer = self._buffer
        while self._busy is None and not self.closed:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._fail(431, "request header too large")
                return
            try:
                method, path, query, headers, keep_alive = _parse_head(bytes(buffer[:end]))
                body_start = end + 4
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    parsed = _dechunk(buffer, body_start)
                    if parsed is None:
                        self._continue(headers)
                        return
                    body, consumed = parsed
                else:
                    length = int(headers.get("content-length") or 0)
                    if length < 0 or length > MAX_BODY:
                        raise HttpError(413, "request body too large")
                    if len(buffer) < body_start + length:
                        self._continue(headers)
                        return
                    body = bytes(buffer[body_start : body_start + length])
                    consumed = body_start + length
            except HttpError as e:
                self._fail(e.status, str(e))
                return
            except ValueError:
                self._fail(400, "malformed request")
                return
            del buffer[:consumed]
            self._continued = False
            self._keep_alive = keep_alive
            request = Request(method, path, query, headers, body, self)
            try:
                handled = self.server.handler(request)
            except Exception:
                log.exception("handler failed for %s %s", method, path)
                handled = Reply(b'{"kind":"Status","status":"Failure","code":500}', 500)
            if isinstance(handled, Reply):
                self._send(handled)
            else:
                self._busy = asyncio.get_running_loop().create_task(self._finish(handled))
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def _continue(self, headers: dict[str, str]) -> None:
        """Answer `Expect: 100-continue` (curl sends it for bodies over 1 KB and waits otherwise)."""
        if not self._continued and headers.get("expect", "").lower() == "100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._continued = True

    async def _finish(self, pending: Coroutine[Any, Any, Reply | None]) -> None:
        try:
            reply = await pending
            if reply is not None:
                self._send(reply)
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("handler failed")
            self._send(Reply(b'{"kind":"Status","status":"Failure","code":500}', 500))
        finally:
            self._busy = None
        if not self.closed:
            self._process()

    def _send(self, reply: Reply) -> None:
        if self.transport is None or self.closed:
            return
        self.transport.write(encode_reply(reply, self._keep_alive))
        if not self._keep_alive:
            self.transport.close()
            self.closed = True

    def _fail(self, status: int, message: str) -> None:
        self._keep_alive = False
        self._send(Reply(message.encode(), status, content_type="text/plain"))

    # --- streaming (watches) --------------------------------------------------------------------------

    def start_stream(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        """Send the head of a chunked response; then `write`, then `end_stream`."""
        pairs = [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")]
        if headers:
            pairs.extend(headers.items())
        if self.transport is not None and not self.closed:
            self.transport.write(_head(status, pairs))

    async def write(self, data: bytes) -> None:
        """One chunk; waits while the client is not reading (transport buffer above its high mark)."""
        if self.closed or self.transport is None:
            raise ConnectionResetError("watch client went away")
        if data:
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        if self._paused:
            self._drain = asyncio.get_running_loop().create_future()
            await self._drain
            if self.closed:
                raise ConnectionResetError("watch client went away")

    def end_stream(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(b"0\r\n\r\n")
            if not self._keep_alive:
                self.transport.close()
                self.closed = True

    def _wake_drain(self) -> None:
        waiter, self._drain = self._drain, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _dechunk(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked request body: (body, bytes consumed from the buffer), or None when incomplete."""
    parts: list[bytes] = []
    pos = start
    total = 0
    while True:
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(bytes(buffer[pos:line_end]).split(b";")[0].strip() or b"0", 16)
        pos = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n", pos)
            if trailer_end < 0:
                return None
            return b"".join(parts), trailer_end + 2
        if len(buffer) < pos + size + 2:
            return None
        total += size
        if total > MAX_BODY:
            raise HttpError(413, "request body too large")
        parts.append(bytes(buffer[pos : pos + size]))
        pos += size + 2


class HttpServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), host, port, backlog=1024)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.connections):
            conn.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)
        self._server = None
