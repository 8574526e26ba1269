"""Documents and search over HTTP: roles, ACLs, 404-not-403, next-query visibility."""

import http.client
import io
import json

import httpx
import openai
import pytest

from ragserve.access import Role

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
    assert secret_doc["acl"] == {"users": {}, "groups": {"eng": "read"}}
    assert secret_doc["owner"] == "wendy" and secret_doc["permission"] == "manage"
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
            ("GET", f"/v1/documents/{doc_id}/chunks", None),
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


def test_a_readers_chunks_carry_their_spans_in_the_documents_text(server, keys, secret_doc):
    response = call(server, "GET", f"/v1/documents/{secret_doc['id']}/chunks", keys["eng"])
    assert response.status_code == 200, response.text
    chunks = response.json()["data"]
    assert len(chunks) == secret_doc["num_chunks"] >= 1
    assert all(c["doc_id"] == secret_doc["id"] for c in chunks)
    assert "4 million euros" in " ".join(c["text"] for c in chunks)
    assert [c["start"] for c in chunks] == sorted(c["start"] for c in chunks)
    assert all(c["end"] - c["start"] >= len(c["text"].strip()) > 0 for c in chunks)


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
    assert changed.status_code == 200 and changed.json()["acl"]["groups"] == {"sales": "read"}
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


def test_an_upload_over_the_limit_is_413_and_stores_nothing(server, keys):
    before = len(call(server, "GET", "/v1/documents", keys["writer"]).json()["data"])
    limit = server.state.settings.max_upload_bytes
    big = io.BytesIO(b"a " * (limit // 2 + 1))
    response = call(
        server, "POST", "/v1/documents", keys["writer"], files={"file": ("big.txt", big)}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "file_too_large"
    assert len(call(server, "GET", "/v1/documents", keys["writer"]).json()["data"]) == before


def test_an_upload_declared_over_the_limit_is_413_before_its_body_is_read(server, keys):
    limit = server.state.settings.max_upload_bytes
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=20)
    connection.putrequest("POST", "/v1/documents")
    connection.putheader("Authorization", f"Bearer {keys['writer']}")
    connection.putheader("Content-Type", "multipart/form-data; boundary=xyz")
    connection.putheader("Content-Length", str(limit * 3))
    connection.endheaders(b"--xyz\r\n")  # and nothing more: the server must not wait for it
    response = connection.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["error"]["code"] == "file_too_large"
    connection.close()


def test_a_json_text_over_the_limit_is_413_and_stores_nothing(server, keys):
    # The file limit, in the file's unit: the text's bytes as UTF-8 ("é" is two), while the
    # body (UTF-8 JSON) stays within its cap, so the route's own count refuses it.
    before = len(call(server, "GET", "/v1/documents", keys["writer"]).json()["data"])
    limit = server.state.settings.max_upload_bytes
    body = json.dumps({"text": "é" * (limit // 2 + 1)}, ensure_ascii=False).encode()
    headers = {"Authorization": f"Bearer {keys['writer']}", "Content-Type": "application/json"}
    response = httpx.post(server.url + "/v1/documents", content=body, headers=headers, timeout=120)
    assert response.status_code == 413, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "file_too_large" and "UTF-8" in error["message"]
    assert len(call(server, "GET", "/v1/documents", keys["writer"]).json()["data"]) == before


def test_a_json_text_declared_over_the_cap_is_413_before_its_body_is_read(server, keys):
    # {"text": <23 M characters>}: refused on its declared length, never read nor parsed.
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=20)
    connection.putrequest("POST", "/v1/documents")
    connection.putheader("Authorization", f"Bearer {keys['writer']}")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(23_000_000 + len('{"text": ""}')))
    connection.endheaders(b'{"text": "')
    response = connection.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["error"]["code"] == "file_too_large"
    connection.close()


def test_a_hidden_document_id_gets_the_answer_a_free_id_gets(server, keys):
    hidden = call(
        server,
        "POST",
        "/v1/documents",
        keys["writer"],
        json={"text": "Private notes on the merger.", "doc_id": "board-notes"},
    )
    assert hidden.status_code == 201, hidden.text
    assert hidden.json()["id"] == "wendy~board-notes"
    assert hidden.json()["acl"] == {"users": {}, "groups": {}}
    other = server.key("walt", ("eng",), role=Role.WRITER)

    def post(doc_id: str) -> httpx.Response:
        body = {"text": "Walt's notes.", "doc_id": doc_id, "title": "Notes"}
        return call(server, "POST", "/v1/documents", other, json=body)

    def shape(response: httpx.Response) -> tuple:
        body = response.json()
        varying = ("id", "ingested_at", "source")
        return response.status_code, {k: v for k, v in body.items() if k not in varying}

    taken, free = post("board-notes"), post("free-notes")
    assert taken.status_code == 201 and taken.json()["id"] == "walt~board-notes"
    assert free.json()["id"] == "walt~free-notes"
    assert shape(taken) == shape(free)
    # Naming the full hidden id, or a free id in the same namespace: both 404, worded alike.
    hidden_full, free_full = post("wendy~board-notes"), post("wendy~free-notes")
    assert hidden_full.status_code == free_full.status_code == 404
    assert (
        hidden_full.json()["error"]["message"].replace("board", "free")
        == (free_full.json()["error"]["message"])
    )
    stored = call(server, "GET", "/v1/documents/wendy~board-notes", keys["writer"]).json()
    assert stored["version"] == 1 and stored["content_hash"] == hidden.json()["content_hash"]
    assert "merger" not in hidden_full.text + free_full.text


def _post_text(server, key, text: str, **body) -> dict:
    response = call(server, "POST", "/v1/documents", key, json={"text": text, **body})
    assert response.status_code == 201, response.text
    return response.json()


def test_reading_a_document_does_not_make_a_writer_its_owner(server):
    admin = server.key("root", role=Role.ADMIN)
    dave = server.key("dave", ("staff",), role=Role.WRITER)
    doc = _post_text(server, admin, "Staff handbook: holidays.", acl={"groups": ["staff"]})
    path = f"/v1/documents/{doc['id']}"
    seen = call(server, "GET", path, dave).json()
    assert seen["permission"] == "read" and seen["owner"] == "root"
    for method, suffix, body, needed in [
        ("PUT", "/acl", {"users": ["dave"]}, "manage"),
        ("DELETE", "", None, "write"),
        ("POST", None, {"text": "Overwritten.", "doc_id": doc["id"]}, "write"),
    ]:
        target = "/v1/documents" if suffix is None else path + suffix
        response = call(server, method, target, dave, json=body)
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert f"'{needed}' permission" in error["message"]
        assert error["code"] == f"missing_{needed}_permission"
    after = call(server, "GET", path, admin).json()
    assert after["acl"] == {"users": {}, "groups": {"staff": "read"}} and after["version"] == 1


def test_write_and_manage_grants(server):
    owner = server.key("olga", ("ops",), role=Role.WRITER)
    editor = server.key("ed", ("ops",), role=Role.WRITER)
    steward = server.key("stew", role=Role.WRITER)
    doc = _post_text(
        server,
        owner,
        "Runbook: restart the queue.",
        doc_id="runbook",
        acl={"groups": {"ops": "write"}, "users": {"stew": "manage"}},
    )
    path = f"/v1/documents/{doc['id']}"
    assert call(server, "GET", path, editor).json()["permission"] == "write"
    # write: re-ingest (owner and ACL kept) ...
    again = _post_text(
        server, editor, "Runbook: restart the queue, then the workers.", doc_id=doc["id"]
    )
    assert again["version"] == 2 and again["owner"] == "olga" and again["acl"] == doc["acl"]
    # ... but not a new ACL, with the re-ingest or alone.
    body = {"text": "Runbook v3.", "doc_id": doc["id"], "acl": {"groups": ["ops"]}}
    assert call(server, "POST", "/v1/documents", editor, json=body).status_code == 403
    acl = {"users": ["ed"]}
    assert call(server, "PUT", path + "/acl", editor, json=acl).status_code == 403
    # manage: the ACL.
    changed = call(server, "PUT", path + "/acl", steward, json={"groups": {"ops": "read"}})
    assert changed.status_code == 200
    assert changed.json()["acl"] == {"users": {}, "groups": {"ops": "read"}}
    assert call(server, "DELETE", path, editor).status_code == 403
    # The owner keeps everything.
    restored = call(server, "PUT", path + "/acl", owner, json={"groups": {"ops": "write"}})
    assert restored.status_code == 200
    assert call(server, "DELETE", path, editor).status_code == 200
    assert call(server, "GET", path, owner).status_code == 404


def test_response_cache_forgets_only_what_a_write_may_change(server, keys):
    """Answers are keyed on what their reader may read: a write elsewhere (another tenant,
    another group) leaves them, one the reader sees drops them. Plain completions read no
    document, and no write drops them."""
    hits = "ragserve:response_cache_hits_total"
    reader = server.key("rhea", ("eng",))
    elsewhere = server.key("otto", ("eng",), tenant="elsewhere", role=Role.WRITER)
    api = openai.OpenAI(base_url=server.url + "/v1", api_key=reader, max_retries=0)
    chat = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    question = {"question": "Which colour is the harbour crane painted?"}

    def count() -> float:
        for line in httpx.get(server.url + "/metrics").text.splitlines():
            if line.startswith(hits + " "):
                return float(line.split()[1])
        return 0.0

    def ask() -> dict:
        answered = call(server, "POST", "/v1/answers", reader, json=question)
        assert answered.status_code == 200, answered.text
        return answered.json()

    def write(key: str, text: str, group: str) -> None:
        body = {"text": text, "acl": {"groups": [group]}}
        written = call(server, "POST", "/v1/documents", key, json=body)
        assert written.status_code == 201, written.text

    write(keys["writer"], "The harbour crane is painted orange.", "eng")
    api.chat.completions.create(**chat)
    first = ask()
    before = count()
    replayed = ask()
    assert count() == before + 1
    assert replayed["answer"] == first["answer"] and replayed["timings"] != first["timings"]
    # Writes the reader cannot see: another tenant's, and a group the reader is not in.
    write(elsewhere, "The harbour crane is painted green.", "eng")
    write(keys["writer"], "The harbour crane was red in 1990.", "board")
    ask()
    api.chat.completions.create(**chat)
    assert count() == before + 3, "a write the reader cannot see drops nothing"
    write(keys["writer"], "The harbour crane's lamp is blue.", "eng")
    api.chat.completions.create(**chat)
    assert count() == before + 4, "a chat completion reads no document"
    ask()
    assert count() == before + 4, "a write the reader sees drops its answers"


def test_the_audit_trail_is_for_the_tenants_administrators(server, keys):
    upload = call(
        server,
        "POST",
        "/v1/documents",
        keys["writer"],
        json={"text": "Audit me, please.", "source": "audited.txt", "acl": {"groups": ["eng"]}},
    )
    assert upload.status_code == 201, upload.text
    doc_id = upload.json()["id"]
    call(server, "PUT", f"/v1/documents/{doc_id}/acl", keys["writer"], json={"groups": ["ops"]})
    assert call(server, "DELETE", f"/v1/documents/{doc_id}", keys["writer"]).status_code == 200
    admin = server.key("ada", role=Role.ADMIN)
    response = call(server, "GET", "/v1/audit", admin, params={"limit": 1000})
    assert response.status_code == 200, response.text
    mine = [e for e in response.json()["data"] if e["target"] == doc_id]
    assert [(e["action"], e["actor"], e["version"]) for e in mine] == [
        ("document.delete", "wendy", 1),
        ("document.acl", "wendy", 1),
        ("document.write", "wendy", 1),
    ]
    assert mine[1]["detail"]["acl"]["groups"] == {"ops": "read"}
    kinds = {e["action"] for e in response.json()["data"]}
    assert "key.create" in kinds, "key changes are merged in"
    assert {e["tenant"] for e in response.json()["data"]} == {"default"}
    other_admin = server.key("oz", tenant="globex", role=Role.ADMIN)
    theirs = call(server, "GET", "/v1/audit", other_admin).json()["data"]
    assert doc_id not in {e["target"] for e in theirs}
    for role in ("writer", "eng"):
        refused = call(server, "GET", "/v1/audit", keys[role])
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert call(server, "GET", "/v1/audit", admin, params={"limit": 0}).status_code == 400


def test_a_delete_during_a_reingest_wins(server, keys, monkeypatch):
    """The upload is checked, embedded (slow), then written; a delete in between must stand
    and the upload get a 409, not resurrect the document or fail with a 500."""
    import threading

    body = {"text": "Version one of the race.", "source": "race.txt", "acl": {"groups": ["eng"]}}
    first = call(server, "POST", "/v1/documents", keys["writer"], json=body)
    assert first.status_code == 201, first.text
    embedding, deleted = threading.Event(), threading.Event()
    embed = server.state.rag.ingestor._embed_missing

    def slow_embed(prepared):
        embedding.set()
        deleted.wait(30)
        return embed(prepared)

    monkeypatch.setattr(server.state.rag.ingestor, "_embed_missing", slow_embed)
    replies = []
    upload = threading.Thread(
        target=lambda: replies.append(
            call(server, "POST", "/v1/documents", keys["writer"], json=body | {"text": "Two."})
        )
    )
    upload.start()
    assert embedding.wait(30)
    monkeypatch.undo()
    assert call(server, "DELETE", f"/v1/documents/{first.json()['id']}", keys["writer"]).is_success
    deleted.set()
    upload.join(60)
    assert replies[0].status_code == 409, replies[0].text
    assert replies[0].json()["error"]["code"] == "write_conflict"
    assert (
        call(server, "GET", f"/v1/documents/{first.json()['id']}", keys["writer"]).status_code
        == 404
    )


def test_the_list_comes_in_pages_of_what_the_caller_may_read(server, keys):
    for n in range(5):
        body = {"text": f"Page test note {n}.", "doc_id": f"page-note-{n}", "acl": {}}
        if n % 2:
            body["acl"] = {"groups": ["eng"]}
        assert call(server, "POST", "/v1/documents", keys["writer"], json=body).status_code == 201
    whole = call(server, "GET", "/v1/documents?limit=1000", keys["eng"]).json()
    assert set(whole) == {"object", "data", "first_id", "last_id", "has_more"}
    assert whole["has_more"] is False
    ids = [d["id"] for d in whole["data"]]
    paged, after = [], None
    while True:
        query = "?limit=2" + (f"&after={after}" if after else "")
        page = call(server, "GET", "/v1/documents" + query, keys["eng"]).json()
        paged += [d["id"] for d in page["data"]]
        assert page["last_id"] == (page["data"][-1]["id"] if page["data"] else None)
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert paged == ids and ids == sorted(ids)
    assert "wendy~page-note-1" in ids and "wendy~page-note-0" not in ids
    for limit in (0, 1001, "x"):
        response = call(server, "GET", f"/v1/documents?limit={limit}", keys["eng"])
        assert response.status_code == 400 and "limit" in response.text


def test_versions_restore_and_what_a_later_reader_never_sees(server):
    """An update keeps the earlier version; a reader granted access at version 2 lists and
    reads version 2 only, never version 1, by id, search or answer; a restore needs manage,
    brings version 1 back under the grants both ACLs make, and answers cite the version."""
    owner = server.key("hilde", ("hr",), role=Role.WRITER)
    hr = server.key("hana", ("hr",))
    eng = server.key("egon", ("eng",), role=Role.WRITER)  # may write, yet holds only read here
    first = "Bonus pool: the zanzibar bonus pool is 7 percent of salary this year."
    second = "Bonus pool: the bonus pool figure is announced in March each year."
    doc = _post_text(server, owner, first, doc_id="bonus", acl={"groups": ["hr"]})
    update = {"doc_id": doc["id"], "acl": {"groups": ["hr", "eng"]}}
    assert _post_text(server, owner, second, **update)["version"] == 2
    path = f"/v1/documents/{doc['id']}/versions"

    listed = call(server, "GET", path, eng).json()
    assert [(v["version"], v["current"], v["acl"]) for v in listed["data"]] == [(2, True, None)]
    assert call(server, "GET", path + "/1", eng).status_code == 404
    query = {"query": "zanzibar bonus pool percent", "top_k": 10}
    hits = call(server, "POST", "/v1/search", eng, json=query).json()["data"]
    assert all("zanzibar" not in hit["text"] for hit in hits)
    assert [h["version"] for h in hits if h["doc_id"] == doc["id"]] == [2]
    assert [v["version"] for v in call(server, "GET", path, hr).json()["data"]] == [2, 1]
    old = call(server, "GET", path + "/1", hr).json()["data"]
    assert "zanzibar" in old[0]["text"] and old[0]["version"] == 1
    assert call(server, "GET", path, server.key("sam", ("sales",))).status_code == 404

    refused = call(server, "POST", path + "/1/restore", eng)
    assert refused.json()["error"]["code"] == "missing_manage_permission"
    assert call(server, "POST", path + "/9/restore", owner).status_code == 404
    restored = call(server, "POST", path + "/1/restore", owner)
    assert restored.status_code == 200, restored.text
    assert restored.json()["version"] == 3 and restored.json()["acl"]["groups"] == {"hr": "read"}
    assert call(server, "GET", f"/v1/documents/{doc['id']}", eng).status_code == 404
    answer = call(
        server, "POST", "/v1/answers", hr, json={"question": "How big is the zanzibar bonus pool?"}
    ).json()
    cited = [c for c in answer["citations"] if c["doc_id"] == doc["id"]]
    assert cited and all(c["version"] == 3 for c in cited), answer
