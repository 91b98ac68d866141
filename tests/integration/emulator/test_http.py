"""The emulator's HTTP/1.1 layer as any client may use it: keep-alive, pipelining, chunked bodies,
Connection: close, malformed requests. Raw sockets, because this is what kubernetes-asyncio's transport
(aiohttp) and other clients (curl, Go's net/http) rely on underneath the API."""

from __future__ import annotations

import asyncio
import random

import msgspec

from corral_sandbox.emulator import Emulator

VOLUMES = "/apis/longhorn.io/v1beta2/namespaces/longhorn-system/volumes"


async def _open(emulator: Emulator) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", emulator.port)


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return status, headers, body
            body += chunk[:-2]
    return status, headers, await reader.readexactly(int(headers["content-length"]))


def _request(method: str, path: str, body: bytes = b"", headers: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: sandbox\r\n{headers}"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def _volume(name: str) -> bytes:
    return msgspec.json.encode(
        {"apiVersion": "longhorn.io/v1beta2", "kind": "Volume", "metadata": {"name": name}}
    )


async def test_pipelined_requests_are_answered_in_order(emulator: Emulator) -> None:
    """HTTP/1.1 pipelining: requests sent back to back on one connection get their answers in order."""
    reader, writer = await _open(emulator)
    writer.write(
        _request("POST", VOLUMES, _volume("a")) + _request("GET", f"{VOLUMES}/a") + _request("GET", "/x")
    )
    statuses = [(await _response(reader))[0] for _ in range(3)]
    assert statuses == [201, 200, 404]
    writer.close()


async def test_chunked_request_body(emulator: Emulator) -> None:
    """A request body sent with Transfer-Encoding: chunked is reassembled."""
    reader, writer = await _open(emulator)
    body = _volume("chunky")
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (body[:10], body[10:])) + b"0\r\n\r\n"
    writer.write(
        f"POST {VOLUMES} HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunks[:15]
    )
    await writer.drain()
    writer.write(chunks[15:])
    status, _, _ = await _response(reader)
    assert status == 201 and emulator.get("longhorn.io", "volumes", "longhorn-system", "chunky") is not None
    writer.close()


async def test_connection_close_is_honoured(emulator: Emulator) -> None:
    """`Connection: close` gets the answer and then the end of the connection."""
    reader, writer = await _open(emulator)
    writer.write(_request("GET", "/version", headers="Connection: close\r\n"))
    status, headers, _ = await _response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""


async def test_malformed_request_is_400_and_closed(emulator: Emulator) -> None:
    """Garbage instead of a request line is refused and the connection closed; the server lives on."""
    reader, writer = await _open(emulator)
    writer.write(b"NONSENSE\r\n\r\n")
    status, _, _ = await _response(reader)
    assert status == 400
    assert await asyncio.wait_for(reader.read(), 5) == b""
    reader, writer = await _open(emulator)
    writer.write(_request("GET", "/healthz"))
    assert (await _response(reader))[0] == 200
    writer.close()


async def test_connection_is_reused_after_a_watch_ends(emulator: Emulator) -> None:
    """A watch is a chunked response; once it ends (timeoutSeconds) the same connection serves more."""
    reader, writer = await _open(emulator)
    writer.write(_request("POST", VOLUMES, _volume("a")))
    await _response(reader)
    writer.write(
        _request("GET", f"{VOLUMES}?watch=true&resourceVersion=0&timeoutSeconds=0.2")
        + _request("GET", VOLUMES)
    )
    status, headers, body = await _response(reader)
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    assert [msgspec.json.decode(line)["type"] for line in body.splitlines()] == ["ADDED"]
    status, _, listed = await _response(reader)
    assert status == 200 and len(msgspec.json.decode(listed)["items"]) == 1
    writer.close()


async def test_expect_100_continue(emulator: Emulator) -> None:
    """A client that sends `Expect: 100-continue` (curl does for bodies over 1 KB) is told to go on
    before it sends the body."""
    reader, writer = await _open(emulator)
    body = _volume("big")
    head = (
        f"POST {VOLUMES} HTTP/1.1\r\nHost: s\r\nExpect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode())
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    writer.write(body)
    assert (await _response(reader))[0] == 201
    writer.close()


async def test_garbage_never_takes_the_server_down(emulator: Emulator) -> None:
    """Random bytes, truncated heads, bad lengths and bad chunk sizes: each connection gets an error or
    is closed, and the server goes on answering real requests."""
    rng = random.Random(5)
    samples = [
        b"GET / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: zz\r\n\r\n",
        b"POST /api/v1/namespaces/x/pods HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
        b"PATCH /api/v1/namespaces/x/pods/p HTTP/1.1\r\nContent-Length: 3\r\n\r\n{{{",
        *(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) + b"\r\n\r\n" for _ in range(20)),
    ]
    for sample in samples:
        reader, writer = await _open(emulator)
        writer.write(sample)
        await writer.drain()
        writer.write_eof()
        await asyncio.wait_for(reader.read(), 5)  # an answer or a close, never a hang
        writer.close()
    reader, writer = await _open(emulator)
    writer.write(_request("GET", "/healthz"))
    assert (await _response(reader))[0] == 200
    writer.close()
