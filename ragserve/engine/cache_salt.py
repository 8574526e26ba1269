"""The prefix-cache namespace of a prompt, which may narrow along the prompt.

Every block of a prompt is hashed under `base` (the server sets the tenant). A prompt that
carries text not everyone in the tenant may read (retrieved evidence) narrows the namespace at
each such text's first token: a block holding that position, or any later one, is also hashed
under the salts of every narrowing so far. The blocks before the first narrowing (a system prompt
shared by the tenant) stay shared, while the rest can only be matched by prompts that carry the
same text under the same salts, i.e. by callers the server itself gave that evidence.
"""

from dataclasses import dataclass

# (first token position, salt) pairs, in position order.
Narrowing = tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class CacheSalt:
    base: str = ""
    narrowing: Narrowing = ()

    def for_block(self, index: int, block_size: int) -> str:
        """The salts in force for block `index`: those of every narrowing before its end."""
        end = (index + 1) * block_size
        return "\0".join(salt for position, salt in self.narrowing if position < end)
