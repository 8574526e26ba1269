"""The web page at /: static files shipped in the package (server/web/), no build step. The page
talks to the same API as every other client, with the key the person signs in with."""

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

WEB_DIR = Path(__file__).parent / "web"

# The page runs only its own script and talks only to this server: were a document's text ever
# to reach the page as markup, the browser would still refuse to run or load anything from it.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


UI_PREFIX = "/ui"


def is_page_path(path: str) -> bool:
    """The page at / and every file of it under /ui (the same index.html is reachable there)."""
    return path == "/" or path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


class PageHeaders:
    """ASGI middleware: every response for the page's paths carries PAGE_HEADERS, whatever
    answers it (the page route, the static files, a 304 or a 404), so no path to the same
    files serves them without the policy."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_page_path(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in PAGE_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def mount_web(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    app.mount(UI_PREFIX, StaticFiles(directory=WEB_DIR), name="ui")
    app.add_middleware(PageHeaders)
