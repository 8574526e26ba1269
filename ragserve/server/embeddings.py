"""POST /v1/embeddings: texts (or token ids in the embedding model's vocabulary) to vectors."""

import base64

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ragserve.access import Principal
from ragserve.rag.embeddings import Embedder
from ragserve.server.completions import ignored_fields, tell_ignored
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import APIError, invalid
from ragserve.server.protocol import EmbeddingRequest, error_responses
from ragserve.server.responses import EmbeddingResponse, json_body
from ragserve.server.state import ServerState

router = APIRouter(responses=error_responses(400, 401, 404, 429))


@router.post("/v1/embeddings", responses=json_body(EmbeddingResponse))
async def embeddings(
    body: EmbeddingRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    embedder = state.rag.embedder
    ignored = ignored_fields(state, body)
    if body.model != state.settings.embedding_model_id:
        raise APIError(
            404,
            f"model {body.model!r} is not served; embeddings use "
            f"{state.settings.embedding_model_id!r}",
            "invalid_request_error",
            "model_not_found",
        )
    if body.dimensions is not None and body.dimensions != embedder.dimension:
        name = state.settings.embedding_model_id
        raise invalid(
            f"{name} gives {embedder.dimension}-dimensional vectors and was not trained to "
            "be shortened: leave dimensions out",
            "invalid_parameter",
            param="dimensions",
        )
    try:
        texts = embedding_texts(body.input, embedder)
    except ValueError as error:
        raise invalid(str(error), "invalid_parameter", param="input") from error
    vectors = await run_in_threadpool(embedder.embed, texts)
    tokens = await run_in_threadpool(embedder.count_tokens, texts)
    response = JSONResponse(
        {
            "object": "list",
            "model": body.model,
            "data": [
                {
                    "object": "embedding",
                    "index": i,
                    # base64 carries the little-endian float32 bytes, as OpenAI sends them.
                    "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()
                    if body.encoding_format == "base64"
                    else v.tolist(),
                }
                for i, v in enumerate(vectors)
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
    return tell_ignored(response, ignored)


def embedding_texts(
    given: str | list[str] | list[int] | list[list[int]], embedder: Embedder
) -> list[str]:
    """The texts to embed. Token ids are read in the embedding model's own vocabulary (as vLLM
    reads them), decoded, and embedded as text."""
    if isinstance(given, str):
        return [given]
    if all(isinstance(item, str) for item in given):
        return list(given)  # type: ignore[arg-type]
    if all(isinstance(item, int) for item in given):
        return [embedder.decode(given)]  # type: ignore[arg-type]
    return [embedder.decode(ids) for ids in given]  # type: ignore[arg-type]
