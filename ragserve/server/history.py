"""Feedback and the query history over HTTP: POST /v1/answers/{id}/feedback (the asker rates
their own answer), GET /v1/history (the tenant's answers with their feedback, for its
administrators), GET /v1/history/export (the labelled ones as a QA dataset, JSONL or CSV, for
`ragserve eval answers`)."""

import csv
import io
import json
import time
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ragserve.access import Principal
from ragserve.history import MAX_PAGE, HistoryEntry, Rating
from ragserve.rag.answer_result import AnswerResult
from ragserve.server.dependencies import principal, require_admin, server_state
from ragserve.server.errors import APIError
from ragserve.server.protocol import error_responses
from ragserve.server.responses import Body, json_body
from ragserve.server.state import ServerState

EXPORT_COLUMNS = ("qid", "question", "answers", "gold_doc", "kind", "type", "history")


class Feedback(Body):
    id: str
    object: Literal["answer.feedback"]
    rating: Literal["up", "down"]
    reason: str | None
    expected: str | None


class HistoryEntryBody(Body):
    id: str
    tenant: str
    # The asker, or its keyed hash (setting history_identities).
    user: str
    at: float
    question: str
    history: list[str]
    answer: str
    mode: str
    refused: bool
    citations: list[dict[str, str]]
    latency_ms: float
    rating: Literal["up", "down"] | None
    reason: str | None
    expected: str | None
    feedback_at: float | None


class HistoryPage(Body):
    """Newest first; the next page at ?before=<last_id> while has_more."""

    object: Literal["list"]
    data: list[HistoryEntryBody]
    last_id: str | None
    has_more: bool


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rating: Rating
    reason: str | None = Field(None, max_length=2000)
    # What the answer should have been.
    expected: str | None = Field(None, min_length=1, max_length=2000)


def remember(
    state: ServerState,
    who: Principal,
    answer_id: str,
    question: str,
    history: Sequence[str],
    result: AnswerResult,
    arrived: float,
) -> None:
    """Put an answer just given into the query history (when the history is kept)."""
    if state.history is None or not state.history.enabled:
        return
    entry = HistoryEntry(
        id=answer_id,
        tenant=who.tenant,
        user="",
        at=time.time(),
        question=question,
        history=list(history),
        answer=result.answer,
        mode=result.mode,
        refused=result.refused,
        citations=[
            {"doc_id": c.doc_id, "title": c.title, "quote": c.quote} for c in result.citations
        ],
        latency_ms=round((time.perf_counter() - arrived) * 1000, 1),
    )
    state.history.record(entry, who.account)


router = APIRouter()


@router.post(
    "/v1/answers/{answer_id}/feedback",
    response_model=None,
    responses=json_body(Feedback) | error_responses(400, 401, 404, 429),
)
async def feedback(
    answer_id: str,
    body: FeedbackRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> dict[str, Any]:
    """Rate an answer you were given (again: the new rating replaces the old)."""
    entry = None
    if state.history is not None:
        entry = await run_in_threadpool(
            state.history.rate,
            who.tenant,
            who.account,
            answer_id,
            body.rating,
            body.reason,
            body.expected,
        )
    if entry is None:
        raise APIError(
            404,
            f"no answer {answer_id!r} of yours in the query history (answers are kept "
            f"{state.settings.history_retention_days:g} days)",
            "invalid_request_error",
            "answer_not_found",
        )
    return {"id": answer_id, "object": "answer.feedback"} | body.model_dump()


@router.get(
    "/v1/history",
    response_model=None,
    responses=json_body(HistoryPage) | error_responses(401, 403, 429),
)
async def history(
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    before: Annotated[str | None, Query(description="The last id of the previous page.")] = None,
) -> dict[str, Any]:
    """The tenant's answers newest first, with their feedback; administrators only."""
    require_admin(who, "the query history")
    entries = []
    if state.history is not None:
        entries = await run_in_threadpool(state.history.page, who.tenant, limit + 1, before)
    page = entries[:limit]
    return {
        "object": "list",
        "data": [entry.as_json() for entry in page],
        "last_id": page[-1].id if page else None,
        "has_more": len(entries) > limit,
    }


@router.get(
    "/v1/history/export",
    response_model=None,
    responses={200: {"content": {"application/jsonl": {}, "text/csv": {}}}}
    | error_responses(401, 403, 429),
)
async def export(
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
    format: Literal["jsonl", "csv"] = "jsonl",
) -> Response:
    """The tenant's answers whose feedback labels them, as a QA dataset (qid, question,
    answers, gold_doc, kind; type and history for follow-ups): `ragserve eval answers
    --dataset` reads the JSONL; administrators only."""
    require_admin(who, "the query history")
    entries = await run_in_threadpool(state.history.all, who.tenant) if state.history else []
    records = [r for r in (entry.as_qa() for entry in entries) if r is not None]
    if format == "jsonl":
        text = "".join(json.dumps(record) + "\n" for record in records)
        return Response(text, media_type="application/jsonl")
    out = io.StringIO()
    writer = csv.DictWriter(out, EXPORT_COLUMNS)
    writer.writeheader()
    for record in records:
        lists = {k: json.dumps(record[k]) for k in ("answers", "history") if k in record}
        writer.writerow(record | lists)
    return Response(out.getvalue(), media_type="text/csv")
