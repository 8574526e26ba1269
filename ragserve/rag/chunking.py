"""Token-based chunking with overlap that follows the document's structure.

Tokens are counted with the embedding model's tokenizer, so a chunk fits what the embedder
reads. A chunk never straddles a heading: each heading starts a new section. Inside a section a
chunk ends at a paragraph boundary when one lies in its second half, else at the token limit;
the next chunk starts `overlap` tokens earlier. Every chunk keeps its span [start, end) in the
parsed text, so text[start:end] is exactly its content.
"""

import itertools
from dataclasses import dataclass

from tokenizers import Tokenizer

from ragserve.rag.parsers import ParsedDocument


@dataclass(frozen=True)
class ChunkSpan:
    index: int
    start: int
    end: int
    text: str


class Chunker:
    def __init__(self, tokenizer: Tokenizer, size: int, overlap: int) -> None:
        if size < 8:
            raise ValueError(f"chunk size must be at least 8 tokens, got {size}")
        if not 0 <= overlap < size // 2:
            raise ValueError(f"chunk overlap must be in [0, {size // 2}), got {overlap}")
        # A private copy without the truncation and padding the embedder configures on its own.
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.size = size
        self.overlap = overlap

    def split(self, document: ParsedDocument) -> list[ChunkSpan]:
        text = document.text
        offsets = [
            o for o in self.tokenizer.encode(text, add_special_tokens=False).offsets if o[1] > o[0]
        ]
        if not offsets:
            return []
        starts = [s for s, _ in offsets]
        section_starts = sorted({0} | {b.start for b in document.blocks if b.heading})
        paragraph_starts = {b.start for b in document.blocks}
        token_at = {}  # char offset of a block start -> first token at or after it
        cursor = 0
        for char in sorted(paragraph_starts | set(section_starts)):
            while cursor < len(starts) and starts[cursor] < char:
                cursor += 1
            token_at[char] = cursor
        sections = [token_at[c] for c in section_starts] + [len(offsets)]
        boundaries = sorted({token_at[c] for c in paragraph_starts})
        spans: list[ChunkSpan] = []
        for first, last in itertools.pairwise(sections):
            for begin, end in self._windows(first, last, boundaries):
                start, stop = offsets[begin][0], offsets[end - 1][1]
                spans.append(ChunkSpan(len(spans), start, stop, text[start:stop]))
        return spans

    def _windows(self, first: int, last: int, boundaries: list[int]) -> list[tuple[int, int]]:
        windows = []
        begin = first
        while begin < last:
            end = min(begin + self.size, last)
            if end < last:
                snap = [b for b in boundaries if begin + self.size // 2 < b <= end]
                if snap:
                    end = snap[-1]
            windows.append((begin, end))
            if end >= last:
                break
            begin = max(end - self.overlap, begin + 1)
        return windows
