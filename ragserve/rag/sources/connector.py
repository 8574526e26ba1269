"""What a sync reads from a source, whatever the source is: a connector lists the source's
items (a folder's files, a website's pages), each with a stamp that tells the next sync whether
it may have changed."""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SourceItem:
    """One item of a source. path: where it is within the source (a file's path relative to
    the folder with POSIX separators, or a page's URL), and with the source's name its stable
    document id. stamp: what the connector compares at the next sync (a file's modified time
    and size; a page's validators). read: the bytes, read when the sync needs them."""

    path: str
    stamp: str
    read: Callable[[], bytes]
    # The parser to use (parsers.SUPPORTED_SUFFIXES' kinds: text, markdown, ...); None: by the
    # path's suffix.
    kind: str | None = None
    # The source itself says the item has not changed since `stamp` (an HTTP 304).
    unchanged: bool = False
    # The item exists but could not be fetched; its indexed version stays.
    error: str | None = None
    # When the source says the item last changed (seconds since the epoch), if it says.
    modified_at: float | None = None


class Connector(Protocol):
    def items(self, seen: Mapping[str, str]) -> Iterator[SourceItem]:
        """The source's items now. seen: each path's stamp at the last sync, which a
        connector may use to ask the source for changes only. Raises OSError when the source
        cannot be listed at all (an unmounted folder, a site that does not answer), so that
        nothing is deleted for it."""
        ...

    @property
    def complete(self) -> bool:
        """After items(): whether they were the whole source. A listing cut short (a page cap)
        is not, and a sync then deletes nothing it did not see."""
        ...
