"""A website served by a test: pages by path, with ETags and conditional requests, redirects and
status codes, and a log of what was asked (for the website source's tests)."""

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LAST_MODIFIED = "Wed, 02 Dec 2026 10:00:00 GMT"


def page(title: str, body: str, links: tuple[str, ...] = ()) -> tuple[str, str]:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    html = (
        f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
        f"<p>{body}</p><ul>{anchors}</ul></body></html>"
    )
    return "text/html; charset=utf-8", html


class Site:
    """Pages by path: (content type, body), a redirect ("->target") or a status code."""

    def __init__(self) -> None:
        self.pages: dict[str, object] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, If-None-Match)
        self.base = ""

    def serve(self) -> ThreadingHTTPServer:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.requests.append((self.path, self.headers.get("If-None-Match")))
                entry = site.pages.get(self.path, 404)
                if isinstance(entry, int):
                    self.send_response(entry)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif isinstance(entry, str):
                    self.send_response(302)
                    self.send_header("Location", entry)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    kind, text = entry
                    body = text.encode()
                    etag = '"' + hashlib.sha1(body).hexdigest() + '"'
                    if self.headers.get("If-None-Match") == etag:
                        self.send_response(304)
                        self.send_header("ETag", etag)
                        self.end_headers()
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", kind)
                    self.send_header("ETag", etag)
                    self.send_header("Last-Modified", LAST_MODIFIED)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@contextmanager
def serving(site: Site) -> Iterator[Site]:
    """The site on a free local port (site.base) for the duration."""
    server = site.serve()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
