"""The web page in a real headless Chromium (Debian's package, driven by Playwright): sign in, ask
with citations, documents and access by role, uploads, inert stored markup, the status view.

With RAGSERVE_SCREENSHOTS=<folder> the tests also save the three views there (the README's)."""

import os
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from ragserve.access import Role
from ragserve.engine.config import EngineConfig
from ragserve.engine.engine import LLMEngine
from ragserve.server.web import PAGE_HEADERS
from ragserve.settings import Settings
from tests.server.conftest import LiveServer, start_server

MEMO = (
    "The board approved the acquisition of Globex Corporation for 120 million euros. "
    "The deal is code-named Bluebird and closes on 30 September."
)
HANDBOOK = (
    "Staff handbook. Every employee gets 28 days of paid leave a year. "
    "Leave requests go to the line manager two weeks ahead."
)
HOSTILE_TITLE = '<img src=x onerror="window.__pwned=1">Quarterly notes'
HOSTILE_TEXT = (
    "Quarterly notes. <script>window.__pwned = 1</script> The canteen opens at 8 am. "
    '<img src=x onerror="window.__pwned=1"> Parking permits renew in January.'
)
SCREENSHOTS = os.environ.get("RAGSERVE_SCREENSHOTS")


def chromium_path() -> str:
    found = os.environ.get("RAGSERVE_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail(
            "no Chromium: `make test` installs Debian's chromium package "
            "(or set RAGSERVE_CHROMIUM to a Chromium binary)"
        )
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("data"),
        dtype="float32",
        max_tokens_cap=24,
        response_cache=False,
    )
    engine = LLMEngine(EngineConfig(dtype="float32", kv_cache_memory_bytes=4096 * 46080))
    yield from start_server(settings, engine, embedder)


@pytest.fixture(scope="module")
def keys(server: LiveServer) -> dict[str, str]:
    keys = {
        "admin": server.key("olivia", ("ops",), role=Role.ADMIN),
        "board": server.key("bob", ("staff", "board")),
        "reader": server.key("alice", ("staff",)),
        "writer": server.key("carol", ("staff",), role=Role.WRITER),
    }
    documents = [
        ("board-memo", "Board memo: acquisition of Globex", MEMO, {"groups": ["board"]}),
        ("handbook", "Staff handbook", HANDBOOK, {"groups": ["staff"]}),
        ("notes", HOSTILE_TITLE, HOSTILE_TEXT, {"groups": ["staff"]}),
    ]
    for doc_id, title, text, acl in documents:
        response = httpx.post(
            f"{server.url}/v1/documents",
            headers={"Authorization": f"Bearer {keys['admin']}"},
            json={"doc_id": doc_id, "title": title, "text": text, "acl": acl},
            timeout=60,
        )
        assert response.status_code == 201, response.text
    return keys


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, errors


def sign_in(page: Page, server: LiveServer, key: str) -> None:
    page.goto(server.url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#identity-text")).to_be_visible()


def screenshot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


def test_the_page_is_served_with_a_strict_content_security_policy(server):
    response = httpx.get(server.url + "/")
    assert response.status_code == 200 and "<title>ragserve</title>" in response.text
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert httpx.get(server.url + "/ui/app.js").status_code == 200


def test_every_file_of_the_page_carries_the_security_headers(server):
    # The same index.html is reachable under /ui too: no path may serve it (or its scripts)
    # without the policy, a 404 included.
    for path in ("/", "/ui/index.html", "/ui/app.js", "/ui/style.css", "/ui/missing.js"):
        response = httpx.get(server.url + path)
        for name, value in PAGE_HEADERS.items():
            assert response.headers.get(name) == value, (path, name)
    assert "frame-ancestors 'none'" in PAGE_HEADERS["Content-Security-Policy"]


def test_a_wrong_key_is_refused_and_a_right_one_shows_who_signed_in(page, server, keys):
    page.goto(server.url + "/")
    page.get_by_label("API key").fill("rs-not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#signin-error")).to_contain_text("invalid or revoked API key")
    sign_in(page, server, keys["board"])
    expect(page.locator("#identity-text")).to_have_text(
        "bob · reader · tenant default · board, staff"
    )
    assert keys["board"] not in page.url
    assert page.evaluate("sessionStorage.getItem('ragserve.key')") == keys["board"]
    expect(page.get_by_role("button", name="Status")).to_be_hidden()


def test_ask_gives_a_cited_answer_whose_citation_opens_the_highlighted_span(page, server, keys):
    sign_in(page, server, keys["board"])
    page.get_by_label("Question").fill("How much does the Globex acquisition cost?")
    page.get_by_role("button", name="Send").click()
    reply = page.locator(".reply").last
    expect(reply.locator(".badge")).to_have_text(re.compile("extractive quote|generated answer"))
    expect(reply).to_contain_text("120 million euros")
    expect(reply.locator(".timings")).to_contain_text("retrieval")
    citation = reply.locator("button.citation").first
    expect(citation).to_contain_text("Board memo: acquisition of Globex")
    citation.click()
    passage = page.locator("#passage")
    expect(passage).to_be_visible()
    expect(passage.locator("mark")).to_contain_text("120 million euros")
    expect(passage.locator("#passage-text")).to_contain_text("code-named Bluebird")
    screenshot(page, "ask")


def test_a_question_without_evidence_is_refused(page, server, keys):
    sign_in(page, server, keys["reader"])
    page.get_by_label("Question").fill("How much does the Globex acquisition cost?")
    page.keyboard.press("Enter")
    reply = page.locator(".reply").last
    expect(reply.locator(".badge")).to_have_text("refusal")
    # The reason is told: nothing matched, or the closest passages, which do not say it.
    expect(reply.locator(".refusal-reason")).to_be_visible()
    expect(reply).not_to_contain_text("120 million")
    expect(reply).not_to_contain_text("Board memo")


def test_a_follow_up_is_asked_with_the_conversation_and_a_new_one_starts_over(page, server, keys):
    sign_in(page, server, keys["reader"])
    page.get_by_label("Answer style").select_option("quote")
    page.get_by_label("Question").fill("How many days of paid leave does every employee get?")
    with page.expect_request("**/v1/answers") as first:
        page.get_by_role("button", name="Send").click()
    assert first.value.post_data_json["answer_style"] == "quote"
    reply = page.locator(".reply").last
    expect(reply).to_contain_text("28 days")
    page.get_by_label("Question").fill("And where do leave requests go?")
    with page.expect_request("**/v1/answers") as second:
        page.get_by_role("button", name="Send").click()
    messages = second.value.post_data_json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "How many days of paid leave does every employee get?"
    assert "28 days" in messages[1]["content"]
    assert messages[2]["content"] == "And where do leave requests go?"
    reply = page.locator(".reply").nth(1)
    expect(reply.locator(".badge")).to_have_text(re.compile("extractive quote|generated answer"))
    expect(reply.locator("button.citation").first).to_contain_text("Staff handbook")
    expect(page.locator("#conversation .question")).to_have_count(2)
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator("#conversation li")).to_have_count(0)
    page.get_by_label("Question").fill("How many days of paid leave does every employee get?")
    with page.expect_request("**/v1/answers") as fresh:
        page.get_by_role("button", name="Send").click()
    assert len(fresh.value.post_data_json["messages"]) == 1
    expect(page.locator(".reply").last).to_contain_text("28 days")
    # The style applies to answers from documents only.
    page.get_by_label("Chat with the model").check()
    expect(page.get_by_label("Answer style")).to_be_hidden()


def test_plain_chat_with_the_model_streams_a_reply(page, server, keys):
    sign_in(page, server, keys["reader"])
    page.get_by_label("Chat with the model").check()
    page.get_by_label("Question").fill("Say hello.")
    page.get_by_role("button", name="Send").click()
    reply = page.locator(".reply").last
    expect(reply.locator(".badge")).to_have_text("model chat")
    expect(reply.locator(".timings")).to_contain_text("total", timeout=60_000)
    assert reply.locator(".text").inner_text().strip()


def test_a_reader_sees_no_controls_and_cannot_reach_another_groups_document(page, server, keys):
    sign_in(page, server, keys["reader"])
    page.get_by_role("button", name="Documents").click()
    table = page.locator("#doc-table")
    expect(table).to_contain_text("Staff handbook")
    expect(table).not_to_contain_text("Board memo")
    expect(page.locator("#upload")).to_be_hidden()
    table.get_by_role("link", name="Staff handbook").click()
    detail = page.locator("#doc-detail")
    expect(detail).to_contain_text("Every employee gets 28 days")
    expect(page.locator("#acl-form")).to_be_hidden()
    expect(page.get_by_role("button", name="Delete document")).to_be_hidden()
    statuses = page.evaluate(
        """async () => {
            const headers = {Authorization: `Bearer ${sessionStorage.getItem('ragserve.key')}`};
            const get = async (path) => (await fetch(path, {headers})).status;
            return [await get('/v1/documents/board-memo'),
                    await get('/v1/documents/board-memo/chunks'),
                    await get('/v1/status')];
        }"""
    )
    assert statuses == [404, 404, 403]


def test_a_writer_uploads_a_file_and_finds_it(page, server, keys, tmp_path):
    upload = tmp_path / "canteen-menu.md"
    upload.write_text("# Canteen menu\n\nOn Fridays the canteen serves saffron risotto.\n")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 this is not really a PDF")
    sign_in(page, server, keys["writer"])
    page.get_by_role("button", name="Documents").click()
    expect(page.locator("#upload")).to_be_visible()
    page.locator("#file-input").set_input_files([str(upload), str(broken)])
    uploads = page.locator("#upload-list li")
    expect(uploads.nth(0).locator(".done")).to_contain_text("stored as")
    expect(uploads.nth(1).locator(".failed")).to_contain_text("refused")
    # Dropping a file on the zone uploads it the same way.
    page.locator("#dropzone").evaluate(
        """zone => {
            const files = new DataTransfer();
            files.items.add(new File(['Dropped notes: the lift is serviced on Tuesdays.'],
                                     'lift.txt', {type: 'text/plain'}));
            zone.dispatchEvent(new DragEvent('drop', {dataTransfer: files, bubbles: true}));
        }"""
    )
    expect(uploads.nth(2).locator(".done")).to_contain_text("stored as")
    page.get_by_label("Search documents").fill("canteen menu")
    expect(page.locator("#doc-table tbody tr")).to_have_count(1)
    page.locator("#doc-table").get_by_role("link", name="Canteen menu").click()
    expect(page.locator("#chunk-list")).to_contain_text("saffron risotto")
    expect(page.locator("#acl-form")).to_be_visible()
    screenshot(page, "documents")


def test_an_owner_shares_a_document_and_deletes_it(page, server, keys, tmp_path):
    note = tmp_path / "offsite.txt"
    note.write_text("The offsite takes place in Lisbon in May.")
    sign_in(page, server, keys["writer"])
    page.get_by_role("button", name="Documents").click()
    page.locator("#file-input").set_input_files(str(note))
    expect(page.locator("#upload-list .done")).to_contain_text("stored as")
    page.get_by_label("Search documents").fill("offsite")
    page.locator("#doc-table").get_by_role("link").first.click()
    page.get_by_role("button", name="Add a user or group").click()
    row = page.locator("#acl-table tbody tr").last
    row.get_by_label("Kind").select_option("user")
    row.get_by_label("Name").fill("alice")
    page.get_by_role("button", name="Save access").click()
    expect(page.locator("#acl-message")).to_have_text("Access saved.")
    doc_id = page.locator("#doc-table tbody tr td").nth(1).inner_text()
    reader = {"Authorization": f"Bearer {keys['reader']}"}
    assert httpx.get(f"{server.url}/v1/documents/{doc_id}", headers=reader).status_code == 200
    page.get_by_role("button", name="Delete document").click()
    page.get_by_role("button", name="Cancel").click()
    assert httpx.get(f"{server.url}/v1/documents/{doc_id}", headers=reader).status_code == 200
    page.get_by_role("button", name="Delete document").click()
    page.locator("#confirm-ok").click()
    expect(page.locator("#doc-message")).to_have_text(f"Deleted {doc_id}.")
    assert httpx.get(f"{server.url}/v1/documents/{doc_id}", headers=reader).status_code == 404


def test_stored_markup_renders_as_inert_text(page, server, keys):
    sign_in(page, server, keys["reader"])
    page.get_by_role("button", name="Documents").click()
    page.locator("#doc-table").get_by_role("link", name=HOSTILE_TITLE).click()
    expect(page.locator("#detail-title")).to_have_text(HOSTILE_TITLE)
    expect(page.locator("#chunk-list")).to_contain_text("<script>window.__pwned = 1</script>")
    page.get_by_role("button", name="Ask").click()
    page.get_by_label("Question").fill("When does the canteen open?")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".reply").last.locator(".timings")).to_be_visible()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img").count() == 0


def test_the_status_view_shows_the_servers_own_counters_live(page, server, keys):
    sign_in(page, server, keys["admin"])
    page.get_by_role("button", name="Status").click()
    figures = page.locator("#status-figures")
    expect(figures).to_contain_text("KV cache used")
    expect(figures).to_contain_text("Prefix cache hits")
    before = int(page.locator("#latency-note").inner_text().split()[0])

    def complete(n: int) -> None:
        httpx.post(
            f"{server.url}/v1/completions",
            headers={"Authorization": f"Bearer {keys['admin']}"},
            json={"model": "smollm2-135m-instruct", "prompt": f"Count to {n}:", "max_tokens": 16},
            timeout=120,
        ).raise_for_status()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(complete, range(6)))
    # The view refreshes itself: the six requests show up without a reload.
    expect(page.locator("#latency-note")).to_contain_text(
        re.compile(rf"^{before + 6} requests finished"), timeout=10_000
    )
    ttft_p50 = page.locator("#latency-table tbody tr").first.locator("td").first
    expect(ttft_p50).to_have_text(re.compile(r"^\d+(\.\d)?$"))
    page.wait_for_timeout(4500)  # a few more samples for the chart
    screenshot(page, "status")


def test_the_page_works_at_phone_width_and_by_keyboard(browser, server, keys):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_function("document.activeElement.id === 'api-key'")
    page.keyboard.type(keys["board"])
    page.keyboard.press("Enter")
    expect(page.locator("#identity-text")).to_be_visible()
    for _ in range(12):  # the question box is a few Tabs away
        if page.evaluate("document.activeElement.id") == "question":
            break
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.type("How much does the Globex acquisition cost?")
    page.keyboard.press("Enter")
    expect(page.locator(".reply").last).to_contain_text("120 million euros")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at phone width ({width} px)"
    context.close()
