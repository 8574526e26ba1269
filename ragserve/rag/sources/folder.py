"""A local folder as a source: its files, recursively, matched by include globs and not by
exclude globs; hidden files and folders (a leading dot) and symbolic links are skipped. A
file's stamp is its modified time and size, so an unchanged file costs a stat."""

from collections.abc import Iterator, Mapping
from fnmatch import fnmatch
from pathlib import Path

from ragserve.rag.sources.connector import SourceItem


class FolderConnector:
    complete = True

    def __init__(
        self, root: Path, include: tuple[str, ...] = ("*",), exclude: tuple[str, ...] = ()
    ) -> None:
        self.root = root
        self.include = include
        self.exclude = exclude

    def items(self, seen: Mapping[str, str] | None = None) -> Iterator[SourceItem]:
        """The source's files in path order. A missing root is an error (a sync must not take
        an unmounted folder for an empty one and delete everything)."""
        if not self.root.is_dir():
            raise FileNotFoundError(f"source folder {self.root} does not exist")
        yield from self._walk(self.root)

    def _walk(self, folder: Path) -> Iterator[SourceItem]:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            if entry.is_dir():
                yield from self._walk(entry)
                continue
            relative = entry.relative_to(self.root).as_posix()
            if not any(fnmatch(relative, g) for g in self.include):
                continue
            if any(fnmatch(relative, g) for g in self.exclude):
                continue
            stat = entry.stat()
            stamp = f"{stat.st_mtime_ns}:{stat.st_size}"
            yield SourceItem(relative, stamp, entry.read_bytes, modified_at=stat.st_mtime)
