"""A website as a source: the pages its sitemap lists, or, without one, the pages a crawl from
the start URL reaches on the same host within max_depth links; at most max_pages either way.

- robots.txt is obeyed (for the agent "ragserve"); its Sitemap lines are where sitemaps are
  looked for first, then /sitemap.xml, or the start URL itself when it is one. A robots.txt
  that does not answer (a server error, a timeout) stops the sync: a site that is down must not
  look empty and have its pages deleted.
- Pages are fetched with the validators of the last sync (If-None-Match, If-Modified-Since): a
  304 costs a request and nothing else. A page's stamp holds its validators, a digest of its
  body (for servers that send no validators) and, for a crawl, the links it had, so that a
  crawl goes on through pages that answered 304.
- Redirects are followed on the same host, five at most; a loop, a redirect elsewhere, a server
  error or a body over max_bytes is a failure reported with its reason (the indexed version
  stays). A 404 or 410 means the page is gone.
- include and exclude globs match the URL's path (with its query).
"""

import email.utils
import hashlib
import json
import logging
import urllib.robotparser
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatch
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx

from ragserve.rag.sources.connector import SourceItem

logger = logging.getLogger(__name__)

AGENT = "ragserve"
MAX_REDIRECTS = 5
# Sitemap indexes read, nested or not; a sitemap index that names more is cut there.
MAX_SITEMAPS = 50
_KINDS = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/plain": "text",
    "text/markdown": "markdown",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/csv": "csv",
    "text/tab-separated-values": "tsv",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}
_REDIRECTS = (301, 302, 303, 307, 308)
# Links not worth a request: they never hold a document the parsers read.
_SKIPPED_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".ico", ".css", ".js")


class SiteUnavailable(OSError):
    pass


@dataclass(frozen=True)
class _Fetched:
    url: str  # after redirects
    status: int
    body: bytes = b""
    kind: str | None = None
    validators: tuple[str | None, str | None] = (None, None)  # ETag, Last-Modified
    error: str | None = None


class WebConnector:
    def __init__(
        self,
        url: str,
        include: tuple[str, ...] = ("*",),
        exclude: tuple[str, ...] = (),
        max_pages: int = 1000,
        max_depth: int = 5,
        max_bytes: int = 20 << 20,
        client: httpx.Client | None = None,
    ) -> None:
        parts = urlsplit(url)
        self.start = urldefrag(url).url
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.include = include
        self.exclude = exclude
        self.max_pages = max_pages
        self.max_depth = max_depth
        self.max_bytes = max_bytes
        self.client = client or httpx.Client(
            timeout=10, headers={"User-Agent": f"{AGENT}/1"}, follow_redirects=False
        )
        self.complete = True

    def items(self, seen: Mapping[str, str]) -> Iterator[SourceItem]:
        self.complete = True
        robots = self._robots()
        listed = self._sitemap_urls(robots)
        if listed is not None:
            yield from self._listed(listed, seen, robots)
        else:
            yield from self._crawl(seen, robots)

    def _listed(
        self, urls: list[str], seen: Mapping[str, str], robots: urllib.robotparser.RobotFileParser
    ) -> Iterator[SourceItem]:
        wanted = [u for u in dict.fromkeys(urls) if self._wanted(u, robots)]
        if len(wanted) > self.max_pages:
            self.complete = False
        done: set[str] = set()
        for url in wanted[: self.max_pages]:
            item = self._page(url, seen, done)
            if item is not None:
                yield item[0]

    def _crawl(
        self, seen: Mapping[str, str], robots: urllib.robotparser.RobotFileParser
    ) -> Iterator[SourceItem]:
        frontier = deque([(self.start, 0)])
        queued, done = {self.start}, set[str]()
        fetched = 0
        while frontier:
            url, depth = frontier.popleft()
            if not self._wanted(url, robots):
                continue
            if fetched == self.max_pages:
                self.complete = False
                return
            fetched += 1
            page = self._page(url, seen, done)
            if page is None:
                continue
            item, links = page
            yield item
            if depth == self.max_depth:
                continue
            for link in links:
                if link not in queued and self._same_site(link):
                    queued.add(link)
                    frontier.append((link, depth + 1))

    def _page(
        self, url: str, seen: Mapping[str, str], done: set[str]
    ) -> tuple[SourceItem, list[str]] | None:
        """The page at url as an item with its links; None when it is gone, not a document,
        or already yielded under another URL (redirected to it)."""
        before = _Stamp.read(seen.get(url))
        fetched = self._get(url, before)
        if fetched.url in done or fetched.status in (404, 410):
            return None
        # A page is known by where it was found in the end, so two URLs redirected to one
        # page index it once.
        done.add(fetched.url)
        if fetched.error is not None:
            return SourceItem(fetched.url, "", _nothing, error=fetched.error), []
        if fetched.status == 304 and before is not None:
            return SourceItem(url, seen[url], _nothing, unchanged=True), list(before.links)
        if fetched.kind is None:
            return None
        links = _links(fetched.body, fetched.url) if fetched.kind == "html" else []
        stamp = _Stamp(*fetched.validators, hashlib.sha256(fetched.body).hexdigest(), links)
        body = fetched.body
        item = SourceItem(
            fetched.url,
            stamp.write(),
            lambda: body,
            kind=fetched.kind,
            modified_at=_epoch(fetched.validators[1]),
        )
        return item, links

    def _get(self, url: str, before: "_Stamp | None") -> _Fetched:
        # The validators are the URL's own: a redirect's target is asked for whole.
        headers = {}
        if before is not None and before.etag:
            headers["If-None-Match"] = before.etag
        if before is not None and before.last_modified:
            headers["If-Modified-Since"] = before.last_modified
        chain = [url]
        try:
            for _ in range(MAX_REDIRECTS + 1):
                asked = headers if len(chain) == 1 else {}
                with self.client.stream("GET", chain[-1], headers=asked) as response:
                    if response.status_code in _REDIRECTS and "location" in response.headers:
                        target = urldefrag(urljoin(chain[-1], response.headers["location"])).url
                        if target in chain:
                            return _Fetched(url, 0, error=f"{url}: redirect loop")
                        if not self._same_site(target):
                            return _Fetched(url, 0, error=f"{url}: redirects off the site")
                        chain.append(target)
                        continue
                    return self._read(chain[-1], response)
        except httpx.HTTPError as error:
            return _Fetched(url, 0, error=f"{url}: {type(error).__name__}: {error}")
        return _Fetched(url, 0, error=f"{url}: more than {MAX_REDIRECTS} redirects")

    def _read(self, url: str, response: httpx.Response) -> _Fetched:
        if response.status_code in (304, 404, 410):
            return _Fetched(url, response.status_code)
        if response.status_code != 200:
            return _Fetched(url, response.status_code, error=f"{url}: HTTP {response.status_code}")
        body = bytearray()
        for piece in response.iter_bytes():
            body += piece
            if len(body) > self.max_bytes:
                return _Fetched(url, 200, error=f"{url}: larger than {self.max_bytes} bytes")
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        kind = _KINDS.get(media)
        validators = (response.headers.get("etag"), response.headers.get("last-modified"))
        return _Fetched(url, 200, bytes(body), kind, validators)

    def _robots(self) -> urllib.robotparser.RobotFileParser:
        robots = urllib.robotparser.RobotFileParser(f"{self.origin}/robots.txt")
        fetched = self._get(f"{self.origin}/robots.txt", None)
        if fetched.error is not None or fetched.status not in (200, 404, 410):
            raise SiteUnavailable(
                f"{self.origin}/robots.txt did not answer ({fetched.error or fetched.status}); "
                "nothing was changed"
            )
        robots.parse(fetched.body.decode("utf-8", "replace").splitlines())
        return robots

    def _sitemap_urls(self, robots: urllib.robotparser.RobotFileParser) -> list[str] | None:
        """The pages the site's sitemaps list; None when it has none."""
        if self.start.endswith(".xml"):
            candidates = [self.start]
        else:
            candidates = robots.site_maps() or [f"{self.origin}/sitemap.xml"]
        pages: list[str] = []
        found = False
        queue, read = deque(candidates), 0
        while queue and read < MAX_SITEMAPS:
            fetched = self._get(queue.popleft(), None)
            read += 1
            if fetched.status != 200 or fetched.error is not None:
                continue
            parsed = _sitemap(fetched.body)
            if parsed is None:
                continue
            found = True
            nested, listed = parsed
            queue.extend(u for u in nested if self._same_site(u))
            pages += [u for u in listed if self._same_site(u)]
        return pages if found else None

    def _wanted(self, url: str, robots: urllib.robotparser.RobotFileParser) -> bool:
        parts = urlsplit(url)
        where = parts.path + (f"?{parts.query}" if parts.query else "")
        return (
            self._same_site(url)
            and not parts.path.lower().endswith(_SKIPPED_SUFFIXES)
            and robots.can_fetch(AGENT, url)
            and any(fnmatch(where, g) for g in self.include)
            and not any(fnmatch(where, g) for g in self.exclude)
        )

    def _same_site(self, url: str) -> bool:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}" == self.origin


@dataclass(frozen=True)
class _Stamp:
    etag: str | None
    last_modified: str | None
    digest: str
    links: list[str]

    def write(self) -> str:
        # The digest decides equality for servers without validators; links ride along.
        return json.dumps([self.etag, self.last_modified, self.digest, self.links])

    @classmethod
    def read(cls, stamp: str | None) -> "_Stamp | None":
        if not stamp:
            return None
        try:
            etag, last_modified, digest, links = json.loads(stamp)
        except (ValueError, TypeError):
            return None
        return cls(etag, last_modified, digest, links)


def _epoch(http_date: str | None) -> float | None:
    """A Last-Modified header in seconds since the epoch; None when absent or unreadable."""
    if not http_date:
        return None
    try:
        return email.utils.parsedate_to_datetime(http_date).timestamp()
    except (TypeError, ValueError):
        return None


def _nothing() -> bytes:
    raise OSError("nothing to read: the page is unchanged or failed")


def _links(body: bytes, base: str) -> list[str]:
    """The page's links as absolute URLs without fragments, in order, once each."""
    import lxml.etree
    import lxml.html

    try:
        document = lxml.html.fromstring(body, base_url=base)
    except (ValueError, lxml.etree.ParserError):
        return []
    links = []
    for element in document.iter("a"):
        href = element.get("href")
        if href and not href.startswith(("mailto:", "javascript:", "tel:")):
            links.append(urldefrag(urljoin(base, href.strip())).url)
    return list(dict.fromkeys(links))


def _sitemap(body: bytes) -> tuple[list[str], list[str]] | None:
    """(nested sitemaps, pages) of a sitemap or sitemap index; None when it is not one."""
    import lxml.etree

    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        root = lxml.etree.fromstring(body, parser)
    except lxml.etree.XMLSyntaxError:
        return None
    kind = lxml.etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        return None
    locations = [
        (element.text or "").strip()
        for element in root.iter()
        if isinstance(element.tag, str) and lxml.etree.QName(element).localname == "loc"
    ]
    locations = [urldefrag(u).url for u in locations if u]
    return (locations, []) if kind == "sitemapindex" else ([], locations)
