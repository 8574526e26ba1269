"""A website as a source (rag/sources/web.py), against a real HTTP server in the test: a crawl
obeys robots.txt, indexes a redirected page once, reports a redirect loop, skips a 404; a
re-sync asks with the pages' validators and gets 304s; a changed page is re-read, a removed one
deleted; a sitemap decides the pages when there is one; a cap or a site that is down deletes
nothing."""

import pytest

from ragserve.rag.documents import AccessFilter
from ragserve.rag.ingest import Ingestor
from ragserve.rag.sources.registry import SourceConfig, SourceError, SourceRegistry
from ragserve.rag.sources.sync import SourceSync
from ragserve.rag.sources.web import SiteUnavailable
from ragserve.rag.stores.sqlite import SqliteStore
from tests.web_site import Site, page, serving

TENANT = "acme"
EVERYTHING = AccessFilter(TENANT, "operator", (), everything=True)


@pytest.fixture
def site():
    with serving(Site()) as site:
        yield site


@pytest.fixture
def syncing(embedder, tmp_path):
    store = SqliteStore(tmp_path / "index.sqlite", embedder.dimension)
    registry = SourceRegistry(tmp_path / "sources.sqlite")
    yield SourceSync(store, Ingestor(store, embedder), registry), registry, store
    registry.close()
    store.close()


def indexed(store) -> set[str]:
    return {d.source for d in store.list_documents(EVERYTHING)}


def intranet(site: Site) -> None:
    site.pages.update(
        {
            "/robots.txt": ("text/plain", "User-agent: *\nDisallow: /private/\n"),
            "/": page(
                "Intranet",
                "Welcome to the Acme intranet, where the handbook and the policies live.",
                (
                    "/handbook",
                    "/policy",
                    "/notes.txt",
                    "/private/salaries",
                    "/missing",
                    "/loop-a",
                    "/old-handbook",
                    "/logo.png",
                    "mailto:it@acme.example",
                    "https://elsewhere.example/",
                ),
            ),
            "/handbook": page(
                "Handbook",
                "The daily meal allowance for domestic travel is 450 NOK per day of travel.",
                ("/policy", "/"),
            ),
            "/policy": page(
                "IT policy",
                "Laptops must be encrypted and passwords are at least fourteen characters.",
            ),
            "/notes.txt": ("text/plain", "Steering meeting notes: the budget was approved."),
            "/private/salaries": page("Salaries", "Everyone's salary, which no crawler reads."),
            "/loop-a": "/loop-b",
            "/loop-b": "/loop-a",
            "/old-handbook": "/handbook",
        }
    )


def test_a_crawl_follows_the_site_and_a_resync_costs_a_304_per_page(site, syncing):
    sync, registry, store = syncing
    intranet(site)
    config = SourceConfig("intranet", url=site.base + "/", tenant=TENANT, acl_map={})
    registry.add(config)

    first = sync.run(config)
    pages = {site.base + p for p in ("/", "/handbook", "/policy", "/notes.txt")}
    assert indexed(store) == pages, "the redirected URL is the handbook, indexed once"
    stored = store.list_documents(EVERYTHING)
    assert {d.source_modified_at for d in stored} == {1796205600.0}, "its Last-Modified"
    assert (first.added, first.changed, first.deleted) == (4, 0, 0)
    assert [f["path"] for f in first.failed] == [site.base + "/loop-a"]
    assert "redirect loop" in first.failed[0]["reason"]
    requested = [path for path, _ in site.requests]
    assert "/private/salaries" not in requested and "/logo.png" not in requested

    site.requests.clear()
    again = sync.run(config)
    assert (again.unchanged, again.added, again.changed, again.embedded_chunks) == (4, 0, 0, 0)
    conditional = {path for path, etag in site.requests if etag}
    assert {"/", "/handbook", "/policy", "/notes.txt"} <= conditional
    assert indexed(store) == pages

    site.pages["/policy"] = page(
        "IT policy", "Laptops must be encrypted and passwords are at least sixteen characters."
    )
    del site.pages["/notes.txt"]  # a 404 now; the home page still links to it
    third = sync.run(config)
    assert (third.changed, third.deleted, third.added, third.unchanged) == (1, 1, 0, 2)
    assert indexed(store) == pages - {site.base + "/notes.txt"}
    assert third.complete


def test_a_sitemap_lists_the_pages(site, syncing):
    sync, registry, store = syncing
    names = ("alpha", "beta", "gamma")
    for name in names:
        site.pages[f"/docs/{name}"] = page(
            name.title(), f"The {name} service runs in region {name} with three replicas."
        )

    def sitemap(listed: tuple[str, ...]) -> tuple[str, str]:
        urls = "".join(f"<url><loc>{site.base}/docs/{n}</loc></url>" for n in listed)
        return (
            "application/xml",
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"{urls}</urlset>",
        )

    site.pages["/robots.txt"] = ("text/plain", f"Sitemap: {site.base}/maps/site.xml\n")
    site.pages["/maps/site.xml"] = sitemap(names)
    config = SourceConfig("docs", url=site.base + "/docs/alpha", tenant=TENANT, acl_map={})
    registry.add(config)
    assert sync.run(config).added == 3

    site.pages["/maps/site.xml"] = sitemap(names[:2])
    report = sync.run(config)
    assert (report.deleted, report.unchanged) == (1, 2)
    assert indexed(store) == {f"{site.base}/docs/{n}" for n in names[:2]}

    # Listed pages past the cap are not read, and none that was not seen is deleted.
    site.pages["/maps/site.xml"] = sitemap(("beta", "gamma", "alpha"))
    config.max_pages = 2
    capped = sync.run(config)
    assert not capped.complete and capped.deleted == 0
    assert (capped.added, capped.unchanged) == (1, 1)
    assert len(indexed(store)) == 3


def test_a_site_that_is_down_deletes_nothing(site, syncing):
    sync, registry, store = syncing
    intranet(site)
    config = SourceConfig("intranet", url=site.base + "/", tenant=TENANT, acl_map={})
    registry.add(config)
    sync.run(config)
    site.pages["/robots.txt"] = 503
    with pytest.raises(SiteUnavailable, match="nothing was changed"):
        sync.run(config)
    assert len(indexed(store)) == 4


def test_a_crawl_stops_at_its_depth(site, syncing):
    sync, registry, store = syncing
    site.pages["/robots.txt"] = 404
    for depth in range(4):
        site.pages[f"/d{depth}"] = page(
            f"Level {depth}",
            f"Level {depth} of the archive holds the minutes of year {depth}.",
            (f"/d{depth + 1}",),
        )
    config = SourceConfig("archive", url=site.base + "/d0", tenant=TENANT, acl_map={})
    config.max_depth = 2
    registry.add(config)
    report = sync.run(config)
    assert indexed(store) == {f"{site.base}/d{n}" for n in range(3)} and report.complete


def test_a_source_is_one_folder_or_one_http_url():
    for url in ("file:///etc/passwd", "ftp://example.com/", "http://"):
        with pytest.raises(SourceError, match="http"):
            SourceConfig("bad", url=url)
    with pytest.raises(SourceError, match="one of the two"):
        SourceConfig("both", folder="/srv/share", url="https://example.com/")
    with pytest.raises(SourceError, match="one of the two"):
        SourceConfig("neither")
