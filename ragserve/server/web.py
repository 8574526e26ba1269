"""The web page at /: static files shipped in the package (server/web/), no build step. The page
talks to the same API as every other client, with the key the person signs in with."""

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

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


def mount_web(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers=PAGE_HEADERS)

    app.mount("/ui", StaticFiles(directory=WEB_DIR), name="ui")
