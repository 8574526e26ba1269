"""Sources over HTTP: a tenant's administrators add a folder under source_folders_root, sync it
and remove it; readers and other tenants get nothing; what a sync changes is searchable at
once; the server's schedule picks the sources whose interval has passed."""

import time

import httpx
import pytest

from ragserve.access import Role
from tests.web_site import Site, page, serving


@pytest.fixture
def root(server, tmp_path):
    team = tmp_path / "team"
    team.mkdir()
    (team / "otters.md").write_text("# Otters\n\nSea otters hold hands while they sleep.\n")
    (team / "kiwis.md").write_text("# Kiwis\n\nKiwi birds lay very large eggs.\n")
    sources = server.state.sources
    sources.folders_root = tmp_path.resolve()
    yield tmp_path
    sources.folders_root = None
    for config, _ in sources.registry.all():
        sources.registry.remove(config.tenant, config.name)


def call(server, key: str, method: str, path: str, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, server.url + path, headers=headers, timeout=120, **kwargs)


def test_an_administrator_follows_a_folder(server, root):
    admin = server.key("sam", (), role=Role.ADMIN)
    reader = server.key("rita", ("wildlife",))
    body = {"name": "team", "folder": "team", "acl_map": {"default": {"groups": ["wildlife"]}}}
    added = call(server, admin, "POST", "/v1/sources", json=body)
    assert added.status_code == 201, added.text
    assert added.json()["folder"] == str(root / "team") and added.json()["last_report"] is None
    assert call(server, admin, "POST", "/v1/sources", json=body).status_code == 409
    report = call(server, admin, "POST", "/v1/sources/team/sync").json()
    assert (report["added"], report["failed"]) == (2, [])
    hits = call(server, reader, "POST", "/v1/search", json={"query": "otters hold hands"}).json()
    assert hits["data"][0]["source"] == "otters.md"
    (root / "team" / "otters.md").unlink()
    again = call(server, admin, "POST", "/v1/sources/team/sync").json()
    assert (again["deleted"], again["unchanged"]) == (1, 1)
    hits = call(server, reader, "POST", "/v1/search", json={"query": "otters hold hands"}).json()
    assert all(hit["source"] != "otters.md" for hit in hits["data"])
    metrics = httpx.get(server.url + "/metrics").text
    series = 'ragserve:source_last_sync_files{outcome="deleted",source="team",tenant="default"}'
    assert f"{series} 1.0" in metrics
    listed = call(server, admin, "GET", "/v1/sources").json()["data"]
    assert [(s["name"], s["last_report"]["deleted"]) for s in listed] == [("team", 1)]
    assert call(server, admin, "DELETE", "/v1/sources/team").json()["deleted"] is True
    assert call(server, admin, "POST", "/v1/sources/team/sync").status_code == 404


def test_what_others_may_not_do(server, root):
    admin = server.key("sam", (), role=Role.ADMIN)
    other_admin = server.key("sam", (), tenant="globex", role=Role.ADMIN)
    writer = server.key("wes", (), role=Role.WRITER)
    assert (
        call(server, admin, "POST", "/v1/sources", json={"name": "t", "folder": "team"}).status_code
        == 201
    )
    assert call(server, writer, "GET", "/v1/sources").status_code == 403
    assert call(server, other_admin, "GET", "/v1/sources").json()["data"] == []
    assert call(server, other_admin, "POST", "/v1/sources/t/sync").status_code == 404
    outside = call(server, admin, "POST", "/v1/sources", json={"name": "u", "folder": "../.."})
    assert outside.status_code == 400 and outside.json()["error"]["code"] == "folder_outside_root"
    bad_map = {"name": "v", "folder": "team", "acl_map": {"rules": [{"groups": ["x"]}]}}
    assert call(server, admin, "POST", "/v1/sources", json=bad_map).status_code == 400
    server.state.sources.folders_root = None
    closed = call(server, admin, "POST", "/v1/sources", json={"name": "w", "folder": "team"})
    assert closed.status_code == 403 and "ragserve sync add" in closed.json()["error"]["message"]


def test_the_schedule_picks_sources_whose_interval_passed(server, root):
    admin = server.key("sam", (), role=Role.ADMIN)
    body = {"name": "hourly", "folder": "team", "every_s": 3600}
    assert call(server, admin, "POST", "/v1/sources", json=body).status_code == 201
    sources = server.state.sources
    assert [c.name for c in sources.due()] == ["hourly"], "never synced: due"
    call(server, admin, "POST", "/v1/sources/hourly/sync")
    assert sources.due() == []
    assert [c.name for c in sources.due(time.time() + 3601)] == ["hourly"]
    # A sync that fails (its folder is missing) waits an interval too, not the next check.
    body = {"name": "broken", "folder": "not-there", "every_s": 3600}
    assert call(server, admin, "POST", "/v1/sources", json=body).status_code == 201
    assert [c.name for c in sources.due()] == ["broken"]
    failed = call(server, admin, "POST", "/v1/sources/broken/sync")
    assert failed.json()["error"]["code"] == "source_folder_missing"
    assert sources.due() == []
    assert [c.name for c in sources.due(time.time() + 3601)] == ["broken", "hourly"]


def test_a_website_on_an_allowed_host(server, root):
    admin = server.key("sam", (), role=Role.ADMIN)
    reader = server.key("rita", ("field",))
    with serving(Site()) as site:
        site.pages["/robots.txt"] = 404
        site.pages["/"] = page(
            "Field guide", "Puffins nest in burrows on grassy cliffs every spring.", ("/owls",)
        )
        site.pages["/owls"] = page("Owls", "Snowy owls hunt lemmings in the open tundra.")
        body = {"name": "guide", "url": site.base + "/", "acl_map": {"default": {"groups": []}}}
        refused = call(server, admin, "POST", "/v1/sources", json=body)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "source_host_not_allowed"
        server.state.sources.url_hosts = frozenset({"127.0.0.1"})
        try:
            added = call(server, admin, "POST", "/v1/sources", json=body)
            assert added.status_code == 201, added.text
            assert added.json()["url"] == site.base + "/"
            first = call(server, admin, "POST", "/v1/sources/guide/sync").json()
            assert (first["added"], first["complete"]) == (2, True)
            query = {"query": "where do puffins nest"}
            assert call(server, reader, "POST", "/v1/search", json=query).json()["data"] == []

            # The map changes over HTTP; the next sync re-permissions without fetching anew.
            grant = {"acl_map": {"default": {"groups": ["field"]}}}
            changed = call(server, admin, "PATCH", "/v1/sources/guide", json=grant)
            assert changed.status_code == 200, changed.text
            assert changed.json()["acl_map"]["default"]["groups"] == {"field": "read"}
            again = call(server, admin, "POST", "/v1/sources/guide/sync").json()
            assert (again["repermissioned"], again["embedded_chunks"]) == (2, 0)
            hits = call(server, reader, "POST", "/v1/search", json=query).json()["data"]
            assert hits[0]["source"] == site.base + "/"

            site.pages["/robots.txt"] = 503
            down = call(server, admin, "POST", "/v1/sources/guide/sync")
            assert down.status_code == 502 and down.json()["error"]["code"] == "source_unavailable"
            site.pages = {"/robots.txt": 404}
            gone = call(server, admin, "POST", "/v1/sources/guide/sync").json()
            assert gone["deleted"] == 2
        finally:
            server.state.sources.url_hosts = frozenset()
    both = {"name": "x", "folder": "team", "url": "https://example.com/"}
    assert call(server, admin, "POST", "/v1/sources", json=both).status_code == 400
    unknown = call(server, admin, "PATCH", "/v1/sources/guide", json={"colour": "red"})
    assert unknown.status_code == 400
