"""Documents and search over HTTP: roles, ACLs, 404-not-403, next-query visibility."""

import io

import httpx
import openai
import pytest

from ragserve.server.auth import Role

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def keys(server):
    return {
        "writer": server.key("wendy", ("eng",), role=Role.WRITER),
        "eng": server.key("erin", ("eng",)),
        "sales": server.key("sam", ("sales",)),
        "other_tenant_writer": server.key("wendy", ("eng",), tenant="globex", role=Role.WRITER),
    }


def call(server, method, path, key, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, server.url + path, headers=headers, timeout=60, **kwargs)


@pytest.fixture(scope="module")
def secret_doc(server, keys):
    markdown = (
        b"# Project Falcon\n\nProject Falcon launches the orbital drone on 12 May. "
        b"The budget is 4 million euros.\n"
    )
    response = call(
        server,
        "POST",
        "/v1/documents",
        keys["writer"],
        files={"file": ("falcon.md", io.BytesIO(markdown), "text/markdown")},
        data={"acl": '{"groups": ["eng"]}'},
    )
    assert response.status_code == 201, response.text
    return response.json()


def search_ids(server, key, query):
    response = call(server, "POST", "/v1/search", key, json={"query": query, "top_k": 5})
    assert response.status_code == 200, response.text
    return [hit["doc_id"] for hit in response.json()["data"]]


def test_upload_then_permitted_search(server, keys, secret_doc):
    assert secret_doc["title"] == "Project Falcon"
    assert secret_doc["acl"] == {"users": [], "groups": ["eng"]}
    response = call(
        server,
        "POST",
        "/v1/search",
        keys["eng"],
        json={"query": "When does Project Falcon launch?", "top_k": 3},
    )
    hit = response.json()["data"][0]
    assert hit["doc_id"] == secret_doc["id"] and hit["title"] == "Project Falcon"
    assert "12 May" in hit["text"] and hit["end"] > hit["start"] >= 0
    assert hit["score"] > 0


def test_others_learn_nothing(server, keys, secret_doc):
    doc_id = secret_doc["id"]
    for key in (keys["sales"], keys["other_tenant_writer"]):
        assert doc_id not in search_ids(server, key, "Project Falcon orbital drone launch")
        listed = call(server, "GET", "/v1/documents", key).json()["data"]
        assert doc_id not in [d["id"] for d in listed]
        for method, path, body in [
            ("GET", f"/v1/documents/{doc_id}", None),
            ("DELETE", f"/v1/documents/{doc_id}", None),
            ("PUT", f"/v1/documents/{doc_id}/acl", {"groups": ["sales"]}),
        ]:
            response = call(server, method, path, key, json=body)
            assert response.status_code == 404, (method, response.text)
            assert "Falcon" not in response.text
    missing = call(server, "GET", "/v1/documents/no-such-doc", keys["sales"])
    assert (
        missing.json()["error"]["message"].replace("no-such-doc", doc_id)
        == call(server, "GET", f"/v1/documents/{doc_id}", keys["sales"]).json()["error"]["message"]
    )


def test_readers_may_not_change_documents(server, keys, secret_doc):
    doc_id = secret_doc["id"]
    assert call(server, "DELETE", f"/v1/documents/{doc_id}", keys["eng"]).status_code == 403
    assert (
        call(
            server,
            "PUT",
            f"/v1/documents/{doc_id}/acl",
            keys["eng"],
            json={"groups": ["eng", "sales"]},
        ).status_code
        == 403
    )
    upload = call(server, "POST", "/v1/documents", keys["eng"], json={"text": "hello"})
    assert upload.status_code == 403


def test_acl_change_and_delete_apply_to_the_next_search(server, keys):
    created = call(
        server,
        "POST",
        "/v1/documents",
        keys["writer"],
        json={
            "text": "The cafeteria serves lasagne every Thursday.",
            "title": "Menu",
            "acl": {"groups": ["eng"]},
        },
    ).json()
    doc_id = created["id"]
    query = "What does the cafeteria serve on Thursday?"
    assert doc_id in search_ids(server, keys["eng"], query)
    assert doc_id not in search_ids(server, keys["sales"], query)
    changed = call(
        server, "PUT", f"/v1/documents/{doc_id}/acl", keys["writer"], json={"groups": ["sales"]}
    )
    assert changed.status_code == 200 and changed.json()["acl"]["groups"] == ["sales"]
    assert doc_id in search_ids(server, keys["sales"], query)
    assert doc_id not in search_ids(server, keys["eng"], query)
    assert call(server, "DELETE", f"/v1/documents/{doc_id}", keys["writer"]).status_code == 200
    assert doc_id not in search_ids(server, keys["sales"], query)
    assert call(server, "GET", f"/v1/documents/{doc_id}", keys["writer"]).status_code == 404


def test_unparseable_upload_is_400_and_stores_nothing(server, keys):
    before = len(call(server, "GET", "/v1/documents", keys["writer"]).json()["data"])
    response = call(
        server,
        "POST",
        "/v1/documents",
        keys["writer"],
        files={"file": ("broken.pdf", io.BytesIO(b"%PDF-1.4 junk"), "application/pdf")},
    )
    assert response.status_code == 400
    assert "broken.pdf" in response.json()["error"]["message"]
    bad_acl = call(
        server, "POST", "/v1/documents", keys["writer"], json={"text": "x", "acl": {"roles": ["x"]}}
    )
    assert bad_acl.status_code == 400
    assert len(call(server, "GET", "/v1/documents", keys["writer"]).json()["data"]) == before


def test_document_ids_of_hidden_documents_cannot_be_overwritten(server, keys):
    private = call(
        server,
        "POST",
        "/v1/documents",
        keys["writer"],
        json={"text": "Private notes.", "doc_id": "notes-1"},
    )
    assert private.status_code == 201 and private.json()["acl"] == {"users": [], "groups": []}
    other = server.key("walt", role=Role.WRITER)
    clash = call(
        server,
        "POST",
        "/v1/documents",
        other,
        json={"text": "Overwrite attempt.", "doc_id": "notes-1"},
    )
    assert clash.status_code == 409
    assert "Private" not in clash.text


def test_response_cache_follows_the_index_version(server, keys):
    hits = "ragserve:response_cache_hits_total"
    api = openai.OpenAI(base_url=server.url + "/v1", api_key=keys["eng"], max_retries=0)
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 8,
        "temperature": 0,
    }

    def count() -> float:
        for line in httpx.get(server.url + "/metrics").text.splitlines():
            if line.startswith(hits + " "):
                return float(line.split()[1])
        return 0.0

    api.chat.completions.create(**request)
    before = count()
    api.chat.completions.create(**request)
    assert count() == before + 1
    call(server, "POST", "/v1/documents", keys["writer"], json={"text": "Blue is a colour."})
    api.chat.completions.create(**request)
    assert count() == before + 1, "a write moves the index version: the old entry is gone"
