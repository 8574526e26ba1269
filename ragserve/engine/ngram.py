"""Draft tokens for speculative decoding by prompt lookup, as vLLM's `ngram` speculator does.

The last n tokens of a sequence are looked for earlier in its own tokens (prompt and output),
longest n first; the tokens that followed their latest earlier occurrence are the draft. A RAG
answer that quotes its evidence continues exactly like that, so its drafts are often right.
"""

import numpy as np

# Shorter patterns match too often by chance: a wrong draft costs a wider verify step.
MIN_NGRAM = 2
MAX_NGRAM = 4


def propose(token_ids: list[int], max_draft: int) -> list[int]:
    """Up to max_draft tokens that followed the latest earlier occurrence of the sequence's
    last MAX_NGRAM..MIN_NGRAM tokens; empty when there is none."""
    if max_draft < 1 or len(token_ids) <= MIN_NGRAM:
        return []
    tokens = np.asarray(token_ids, dtype=np.int64)
    for n in range(min(MAX_NGRAM, len(tokens) - 1), MIN_NGRAM - 1, -1):
        pattern = tokens[-n:]
        # Windows that end before the last token, so a match has at least one follower.
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
        starts = np.flatnonzero((windows == pattern).all(axis=1))
        if len(starts):
            follow = int(starts[-1]) + n
            return tokens[follow : follow + max_draft].tolist()
    return []
