"""POST /tokenize and POST /detokenize (vLLM's shapes): what a prompt costs in the served
model's tokens, for clients that fill a context budget, and token ids back to text."""

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from pydantic import Field, model_validator

from ragserve.access import Principal
from ragserve.engine.errors import EngineError
from ragserve.server.completions import chat_token_ids, ignored_fields, tell_ignored
from ragserve.server.constraints import Tool
from ragserve.server.dependencies import principal, server_state
from ragserve.server.errors import from_engine
from ragserve.server.lenient import Lenient, refuse_if
from ragserve.server.protocol import ChatMessage, error_responses
from ragserve.server.responses import DetokenizeResponse, TokenizeResponse, json_body
from ragserve.server.state import ServerState
from ragserve.server.tool_calls import ToolUse


class TokenizeRequest(Lenient):
    """vLLM's /tokenize: a text, or a conversation through the model's chat template."""

    model: str
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    # Default: true for a text, false for a conversation (its template adds them).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    tools: list[Tool] | None = None
    return_token_strs: bool = False

    @model_validator(mode="after")
    def prompt_or_messages(self) -> "TokenizeRequest":
        refuse_if(
            (self.prompt is None) == (self.messages is None), "give prompt or messages, not both"
        )
        refuse_if(self.prompt is not None and self.tools is not None, "tools need messages")
        return self


class DetokenizeRequest(Lenient):
    model: str
    tokens: list[int]


router = APIRouter(responses=error_responses(400, 401, 404, 429))


@router.post("/tokenize", responses=json_body(TokenizeResponse))
async def tokenize(
    body: TokenizeRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    ignored = ignored_fields(state, body)
    engine = state.served(body.model).engine
    tokenizer = engine.tokenizer
    if body.messages is not None:
        tools = ToolUse.of(body.tools, "auto")
        tokens = chat_token_ids(tokenizer, body.messages, tools, body.add_generation_prompt)
        if body.add_special_tokens:
            tokens = tokenizer.build_inputs_with_special_tokens(tokens)
    else:
        add_special = body.add_special_tokens is not False
        tokens = tokenizer.encode(body.prompt or "", add_special_tokens=add_special)
    reply = {
        "count": len(tokens),
        "max_model_len": engine.max_model_len,
        "tokens": tokens,
        "token_strs": tokenizer.convert_ids_to_tokens(tokens) if body.return_token_strs else None,
    }
    return tell_ignored(JSONResponse(reply), ignored)


@router.post("/detokenize", responses=json_body(DetokenizeResponse))
async def detokenize(
    body: DetokenizeRequest,
    who: Principal = Depends(principal),
    state: ServerState = Depends(server_state),
) -> Response:
    ignored = ignored_fields(state, body)
    engine = state.served(body.model).engine
    try:
        engine.check_token_ids(body.tokens)
    except EngineError as error:
        raise from_engine(error) from error
    prompt = engine.tokenizer.decode(body.tokens)
    return tell_ignored(JSONResponse({"prompt": prompt}), ignored)
