"""A local OpenAI-compatible chat-completions server that replays a script, for tests.

`StubOpenAIServer` is a stdlib `ThreadingHTTPServer` on 127.0.0.1 (OS-chosen port) that answers
`POST /v1/chat/completions` (plain JSON, or SSE when the request says `"stream": true`) and
`GET /v1/models`. Each chat request consumes the next item of the script:

- `Text("...")`: an assistant message, `finish_reason="stop"`;
- `ToolCall("name", {...})`, or a list/tuple of them: an assistant message with `tool_calls`,
  `finish_reason="tool_calls"`;
- `HTTPError(429, headers={"Retry-After": "1"})`: an error status with an OpenAI-style error body;
- a callable `(request_json) -> item`: decides the answer from the request (it may itself return
  any of the above, but not another callable).

Every chat request body is recorded in `.requests` (headers in `.request_headers`) so a test can
assert on the tools offered, the tool results sent back, and the messages. A request that arrives
after the script is exhausted, or whose callable raises, gets a 500 and is listed in `.failures`.

    with StubOpenAIServer([Text("hi")]) as stub:
        provider = OpenAIProvider(base_url=stub.base_url, api_key="stub")
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "HTTPError",
    "Reply",
    "ScriptItem",
    "StubOpenAIServer",
    "Text",
    "ToolCall",
    "find_tool",
    "tool_messages",
]

JSON = dict[str, Any]


@dataclass(frozen=True)
class Text:
    """A plain assistant text answer."""

    content: str
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str = "stop"


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the assistant (`args` is sent as a JSON string)."""

    name: str
    args: JSON = field(default_factory=dict)
    id: str | None = None
    """The tool call id; None: `call_<request number>_<index>`."""
    prompt_tokens: int = 10
    completion_tokens: int = 5
    """Usage of the response; with several calls in one response, the first call's counts apply."""


@dataclass(frozen=True)
class HTTPError:
    """An HTTP error answer, e.g. `HTTPError(429, headers={"Retry-After": "1"})`."""

    status: int
    body: JSON | str | None = None
    """None: an OpenAI-style `{"error": {...}}` body matching the status."""
    headers: dict[str, str] = field(default_factory=dict)


Reply = Text | ToolCall | Sequence[ToolCall] | HTTPError
"""What one chat request is answered with."""

ScriptItem = Reply | Callable[[JSON], Reply]
"""A script entry: a canned reply, or a function of the request body returning one."""

_ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def _error_body(status: int, message: str | None = None) -> JSON:
    """An OpenAI-style error body for `status`."""
    kind, code = _ERROR_KINDS.get(status, ("server_error", "server_error"))
    return {
        "error": {
            "message": message or f"stub error {status}",
            "type": kind,
            "param": None,
            "code": code,
        }
    }


def find_tool(request: JSON, prefix: str = "") -> JSON | None:
    """The first tool offered in `request` whose function name starts with `prefix`, or None."""
    for tool in request.get("tools") or []:
        if tool.get("function", {}).get("name", "").startswith(prefix):
            return tool
    return None


def tool_messages(request: JSON) -> list[JSON]:
    """The `role: "tool"` messages (tool results) in `request`."""
    return [m for m in request.get("messages", []) if m.get("role") == "tool"]


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to the owning `StubOpenAIServer`."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silence the default stderr access log."""

    def _send_json(
        self, status: int, body: JSON | str, headers: dict[str, str] | None = None
    ) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        """`GET /v1/models`."""
        if self.path.rstrip("/") != "/v1/models":
            self._send_json(404, _error_body(404, f"no route GET {self.path}"))
            return
        models = [
            {"id": m, "object": "model", "created": 0, "owned_by": "stub"}
            for m in self.server.stub.models
        ]
        self._send_json(200, {"object": "list", "data": models})

    def do_POST(self) -> None:  # noqa: N802
        """`POST /v1/chat/completions`."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, _error_body(404, f"no route POST {self.path}"))
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            self._send_json(400, _error_body(400, f"invalid JSON: {e}"))
            return
        stub = self.server.stub
        index, reply = stub._next_reply(body, {k.lower(): v for k, v in self.headers.items()})
        if isinstance(reply, HTTPError):
            payload = reply.body if reply.body is not None else _error_body(reply.status)
            self._send_json(reply.status, payload, reply.headers)
        elif body.get("stream"):
            self._send_stream(body, index, reply)
        else:
            self._send_json(200, _completion(body, index, reply))

    def _send_stream(self, request: JSON, index: int, reply: Text | Sequence[ToolCall]) -> None:
        """Answer as server-sent events, then close the connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        for chunk in _stream_chunks(request, index, reply, include_usage):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    """A `ThreadingHTTPServer` that knows its `StubOpenAIServer`."""

    daemon_threads = True

    def __init__(self, stub: StubOpenAIServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stub = stub


def _calls(reply: ToolCall | Sequence[ToolCall]) -> list[ToolCall]:
    return [reply] if isinstance(reply, ToolCall) else list(reply)


def _usage(reply: Text | Sequence[ToolCall] | ToolCall) -> JSON:
    first = reply if isinstance(reply, Text | ToolCall) else reply[0]
    p, c = first.prompt_tokens, first.completion_tokens
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _tool_call_json(index: int, i: int, call: ToolCall) -> JSON:
    return {
        "id": call.id or f"call_{index}_{i}",
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.args)},
    }


def _envelope(request: JSON, index: int, obj: str) -> JSON:
    return {
        "id": f"chatcmpl-stub-{index}",
        "object": obj,
        "created": int(time.time()),
        "model": request.get("model", "stub-model"),
        "system_fingerprint": "stub",
    }


def _completion(request: JSON, index: int, reply: Text | Sequence[ToolCall]) -> JSON:
    """A non-streaming `chat.completion` body."""
    if isinstance(reply, Text):
        message: JSON = {"role": "assistant", "content": reply.content}
        finish = reply.finish_reason
    else:
        calls = [_tool_call_json(index, i, c) for i, c in enumerate(_calls(reply))]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {
        **_envelope(request, index, "chat.completion"),
        "choices": [choice],
        "usage": _usage(reply),
    }


def _stream_chunks(
    request: JSON, index: int, reply: Text | Sequence[ToolCall], include_usage: bool
) -> Iterator[JSON]:
    """The `chat.completion.chunk` objects of a streamed answer."""
    env = _envelope(request, index, "chat.completion.chunk")

    def chunk(delta: JSON, finish: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**env, "choices": [choice]}

    yield chunk({"role": "assistant", "content": ""})
    if isinstance(reply, Text):
        text = reply.content
        for start in range(0, len(text), 16):  # a few deltas, like a real server
            yield chunk({"content": text[start : start + 16]})
        finish = reply.finish_reason
    else:
        for i, call in enumerate(_calls(reply)):
            full = _tool_call_json(index, i, call)
            args = full["function"]["arguments"]
            head = {**full, "function": {"name": call.name, "arguments": ""}}
            yield chunk({"tool_calls": [{"index": i, **head}]})
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": args}}]})
        finish = "tool_calls"
    yield chunk({}, finish)
    if include_usage:
        yield {**env, "choices": [], "usage": _usage(reply)}


class StubOpenAIServer:
    """An OpenAI-compatible chat-completions server replaying `script`, one item per request.

    Use as a context manager (or call `start()` / `close()`); `base_url` is the `/v1` URL to hand
    to `OpenAIProvider(base_url=...)` or `AsyncOpenAI(base_url=...)`.
    """

    def __init__(
        self, script: Iterable[ScriptItem] = (), *, models: Sequence[str] = ("stub-model",)
    ) -> None:
        """Args:
        script: replies, consumed in order, one per chat request (see the module docstring).
        models: the model ids `GET /v1/models` lists.
        """
        self._script: deque[ScriptItem] = deque(script)
        self.models = list(models)
        self.requests: list[JSON] = []
        """Every chat request body received, in order (including those answered with an error)."""
        self.request_headers: list[dict[str, str]] = []
        """The headers of each request in `requests`, names lowercased."""
        self.failures: list[str] = []
        """Why a request got an unscripted 500: script exhausted, or a callable raised."""
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread."""
        if self._server is None:
            self._server = _Server(self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="stub-openai",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- addresses and script ------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on (it must be started)."""
        if self._server is None:
            raise RuntimeError("StubOpenAIServer is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, without the `/v1` suffix."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the OpenAI client's `base_url`."""
        return f"{self.url}/v1"

    def add(self, *items: ScriptItem) -> None:
        """Append replies to the script (thread-safe; fine while serving)."""
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        """Script items not consumed yet."""
        with self._lock:
            return len(self._script)

    def _next_reply(self, body: JSON, headers: dict[str, str]) -> tuple[int, Reply]:
        """Record the request and pick its reply; the index is the request's position."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.request_headers.append(headers)
            item = self._script.popleft() if self._script else None
        if item is None:
            return index, self._fail(f"request {index}: script exhausted")
        if callable(item):
            try:
                item = item(body)
            except Exception:
                return index, self._fail(
                    f"request {index}: script callable raised\n" + traceback.format_exc()
                )
        if not isinstance(item, Text | ToolCall | HTTPError | list | tuple):
            return index, self._fail(f"request {index}: not a reply: {item!r}")
        return index, item

    def _fail(self, why: str) -> HTTPError:
        with self._lock:
            self.failures.append(why)
        body = _error_body(500, f"StubOpenAIServer: {why}")
        return HTTPError(500, body, headers={"x-should-retry": "false"})
