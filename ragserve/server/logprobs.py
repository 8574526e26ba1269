"""Log-probabilities on the wire: chat's `logprobs.content` entries and the text completion's
`tokens` / `token_logprobs` / `top_logprobs` / `text_offset` lists (OpenAI's shapes), from the
engine's per-position log-probabilities."""

from typing import Any

from transformers import PreTrainedTokenizerBase

from ragserve.engine.outputs import PositionLogprobs


def finite(value: float) -> float:
    """JSON has no -inf: a token ruled out is reported at the lowest float instead (as vLLM)."""
    return max(value, -9999.0)


class LogprobFormat:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, top: int) -> None:
        self.tokenizer = tokenizer
        # How many alternatives each position lists (top_logprobs, or completions' logprobs).
        self.top = top

    def token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def chat(self, tokens: list[int], positions: list[PositionLogprobs]) -> list[dict[str, Any]]:
        """logprobs.content of a chat choice: one entry per token, its top alternatives."""
        entries = []
        for token_id, position in zip(tokens, positions, strict=True):
            alternatives = sorted(
                (entry.rank, other) for other, entry in position.items() if entry.rank <= self.top
            )
            entries.append(
                self._entry(token_id, position)
                | {"top_logprobs": [self._entry(other, position) for _, other in alternatives]}
            )
        return entries

    def _entry(self, token_id: int, position: PositionLogprobs) -> dict[str, Any]:
        text = self.token(token_id)
        return {
            "token": text,
            "logprob": finite(position[token_id].logprob),
            "bytes": list(text.encode()),
        }

    def completion(
        self,
        tokens: list[int],
        positions: list[PositionLogprobs | None],
        text_offset: int,
    ) -> dict[str, Any]:
        """A text completion's logprobs object for these tokens, whose text starts at
        text_offset of the choice's text. A position without log-probabilities (the prompt's
        first token) is null in both lists."""
        texts = [self.token(t) for t in tokens]
        offsets = []
        for text in texts:
            offsets.append(text_offset)
            text_offset += len(text)
        token_logprobs: list[float | None] = []
        top_logprobs: list[dict[str, float] | None] = []
        for token_id, position in zip(tokens, positions, strict=True):
            if position is None:
                token_logprobs.append(None)
                top_logprobs.append(None)
                continue
            token_logprobs.append(finite(position[token_id].logprob))
            ranked = sorted(position.items(), key=lambda item: item[1].rank)
            top_logprobs.append({self.token(t): finite(e.logprob) for t, e in ranked})
        return {
            "tokens": texts,
            "token_logprobs": token_logprobs,
            "top_logprobs": top_logprobs,
            "text_offset": offsets,
        }


def merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two text completion logprobs objects as one (the echoed prompt's, then the output's)."""
    return {key: first[key] + second[key] for key in first}
