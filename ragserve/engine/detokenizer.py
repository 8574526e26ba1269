"""Incremental detokenization for streaming, and stop-string matching.

Text is decoded over a short window of recent tokens, and a piece is only released when it no
longer ends in an incomplete UTF-8 sequence. When stop strings are set, the tail that could be
the start of a stop string is held back until it is known not to be one.
"""

from transformers import PreTrainedTokenizerBase

# Prompt tokens decoded with the first output tokens so word-initial spaces come out right.
CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt_token_ids: list[int],
        stop_strings: tuple[str, ...],
        skip_special_tokens: bool,
        include_stop_string: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop_strings = stop_strings
        self.include_stop_string = include_stop_string
        self.window = list(prompt_token_ids[-CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.window)
        self.text = ""
        self.stopped_by: str | None = None

    def _decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=self.skip_special_tokens)

    def add(self, token_id: int, look_for_stops: bool = True) -> None:
        """Add one output token; sets stopped_by when the text now contains a stop string
        (only looked for in text added while look_for_stops is true)."""
        self.window.append(token_id)
        before = self._decode(self.window[self.prefix_offset : self.read_offset])
        after = self._decode(self.window[self.prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return
        piece = after[len(before) :]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.window)
        # Keep the window short: only tokens from prefix_offset on are ever decoded again.
        del self.window[: self.prefix_offset]
        self.read_offset -= self.prefix_offset
        self.prefix_offset = 0
        # A new match must end in the new piece, so it starts at most len(stop) - 1 chars back.
        longest = max((len(s) for s in self.stop_strings), default=1)
        search_from = max(0, len(self.text) - (longest - 1))
        self.text += piece
        if not look_for_stops:
            return
        for stop in self.stop_strings:
            found = self.text.find(stop, search_from)
            if found != -1:
                self.text = self.text[: found + (len(stop) if self.include_stop_string else 0)]
                self.stopped_by = stop
                return

    def visible_text(self, finished: bool) -> str:
        """Text safe to show: while running, withhold a tail that may begin a stop string."""
        if finished or not self.stop_strings:
            return self.text
        hold = 0
        for stop in self.stop_strings:
            for size in range(min(len(stop) - 1, len(self.text)), 0, -1):
                if self.text.endswith(stop[:size]):
                    hold = max(hold, size)
                    break
        return self.text[: len(self.text) - hold]
