"""A local webhook endpoint for tests: answers 500 to its first requests, then 204 (or a redirect),
and keeps them all."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Answers 500 to the first `fail` requests, then 204 (307 to `redirect_to` when given); keeps
    every request. Listens on `host`, any loopback address (127.0.0.2 is another receiver)."""

    def __init__(self, fail: int, *, host: str = "127.0.0.1", port: int = 0, redirect_to: str | None = None) -> None:
        self.fail = fail
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if redirect_to is not None:
                    self.send_response(307)
                    self.send_header("location", redirect_to)
                else:
                    self.send_response(500 if len(receiver.requests) <= receiver.fail else 204)
                self.send_header("content-length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]
        self.url = f"http://{host}:{self.port}/hook"
