"""A local folder as a source: its files, recursively, matched by include globs and not by
exclude globs; hidden files and folders (a leading dot) and symbolic links are skipped."""

from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path


@dataclass(frozen=True)
class SourceFile:
    """One file of a source: its path within the source (POSIX separators), and the stat that
    tells whether it may have changed since the last sync."""

    path: str
    modified_ns: int
    size: int
    location: Path

    def read(self) -> bytes:
        return self.location.read_bytes()


class FolderConnector:
    def __init__(
        self, root: Path, include: tuple[str, ...] = ("*",), exclude: tuple[str, ...] = ()
    ) -> None:
        self.root = root
        self.include = include
        self.exclude = exclude

    def files(self) -> Iterator[SourceFile]:
        """The source's files in path order. A missing root is an error (a sync must not take
        an unmounted folder for an empty one and delete everything)."""
        if not self.root.is_dir():
            raise FileNotFoundError(f"source folder {self.root} does not exist")
        yield from self._walk(self.root)

    def _walk(self, folder: Path) -> Iterator[SourceFile]:
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
            yield SourceFile(relative, stat.st_mtime_ns, stat.st_size, entry)
