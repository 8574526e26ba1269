"""POST /v1/rerank (also /v2/rerank) and POST /v1/score, in the Cohere/Jina shapes vLLM
serves: a client's own documents ordered, or text pairs scored, by a reranker: the served model
judging each passage (the LLM reranker of the answer path), or a CrossEncoder folder when the
reranker setting names one. The texts are the caller's, so the prompts carrying them share
prefix-cache blocks only with prompts of the caller's own permission set."""

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from pydantic import Field, model_validator

from ragserve.access import Principal
from ragserve.rag.rerank import Reranker
from ragserve.server.answers import engine_generate
from ragserve.server.cache_and_limits import acquire, release
from ragserve.server.completions import ignored_fields, tell_ignored
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import APIError, invalid
from ragserve.server.lenient import Lenient, refuse_if
from ragserve.server.protocol import error_responses, new_id, now
from ragserve.server.responses import RerankResponse, ScoreResponse, json_body
from ragserve.server.state import ServerState


class RerankDocument(Lenient):
    text: str


class RerankRequest(Lenient):
    model: str
    query: str = Field(min_length=1)
    documents: list[str | RerankDocument] = Field(min_length=1)
    # The best top_n documents (all when not given).
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = True

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


class ScoreRequest(Lenient):
    """text_1 against each text_2 (one text_1), or pairwise (lists of the same length)."""

    model: str
    text_1: str | list[str] = Field(min_length=1)
    text_2: str | list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def pairs_match(self) -> "ScoreRequest":
        firsts, seconds = self.lists()
        refuse_if(
            len(firsts) not in (1, len(seconds)),
            "text_1 must be one text, or as many texts as text_2",
        )
        return self

    def lists(self) -> tuple[list[str], list[str]]:
        first = [self.text_1] if isinstance(self.text_1, str) else self.text_1
        second = [self.text_2] if isinstance(self.text_2, str) else self.text_2
        return first, second

    def pairs(self) -> list[tuple[str, str]]:
        firsts, seconds = self.lists()
        return list(
            zip(firsts * len(seconds) if len(firsts) == 1 else firsts, seconds, strict=True)
        )


router = APIRouter(responses=error_responses(400, 401, 404, 429, 503))


@router.post("/v1/rerank", responses=json_body(RerankResponse))
@router.post("/v2/rerank", responses=json_body(RerankResponse))
async def rerank_documents(
    body: RerankRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    ignored = ignored_fields(state, body)
    texts = body.texts()
    scores, tokens = await score_pairs(state, who, body.model, [(body.query, t) for t in texts])
    # Best first; equal scores keep the order they were sent in.
    order = sorted(range(len(texts)), key=lambda i: -scores[i])[: body.top_n]
    results = []
    for index in order:
        result = {"index": index, "relevance_score": scores[index]}
        if body.return_documents:
            result["document"] = {"text": texts[index]}
        results.append(result)
    reply = {
        "id": new_id("rerank"),
        "model": body.model,
        "usage": {"total_tokens": tokens},
        "results": results,
    }
    return tell_ignored(JSONResponse(reply), ignored)


@router.post("/v1/score", responses=json_body(ScoreResponse))
async def score(
    body: ScoreRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    ignored = ignored_fields(state, body)
    scores, tokens = await score_pairs(state, who, body.model, body.pairs())
    reply = {
        "id": new_id("score"),
        "object": "list",
        "created": now(),
        "model": body.model,
        "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return tell_ignored(JSONResponse(reply), ignored)


def reranker_for(state: ServerState, model: str) -> Reranker:
    if model not in state.rerankers:
        names = ", ".join(repr(name) for name in state.rerankers)
        raise APIError(
            404,
            f"model {model!r} does not rerank here; try {names}",
            "invalid_request_error",
            "model_not_found",
        )
    return state.rerankers[model]


async def score_pairs(
    state: ServerState, who: Principal, model: str, pairs: list[tuple[str, str]]
) -> tuple[list[float], int]:
    """Each (query, text) pair's score, under the caller's limits, and the texts' tokens in the
    served model's tokenizer."""
    reranker = reranker_for(state, model)
    limit = state.settings.max_rerank_documents
    if len(pairs) > limit:
        raise invalid(
            f"{len(pairs)} documents; this server scores at most {limit} per request "
            "(max_rerank_documents)",
            "too_many_documents",
            param="documents",
        )
    tokenizer = state.engine.tokenizer
    tokens = sum(len(tokenizer.encode(q + "\n" + t, add_special_tokens=False)) for q, t in pairs)
    await acquire(state, who, tokens)
    try:
        generate = engine_generate(state, who, new_id("rerank"))
        salt = f"caller:{who.permission_key}"
        scores = [0.0] * len(pairs)
        by_query: dict[str, list[int]] = {}
        for index, (query, _) in enumerate(pairs):
            by_query.setdefault(query, []).append(index)
        for query, indices in by_query.items():
            texts = [pairs[i][1] for i in indices]
            found = await reranker.scores(query, texts, [salt] * len(texts), generate)
            for index, value in zip(indices, found, strict=True):
                scores[index] = value
    finally:
        release(state, who, 0)
    return scores, tokens
