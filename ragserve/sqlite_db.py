"""What ragserve's SQLite databases (the embedded store, the key store) share: how a connection
is opened, the transaction around every change, and the online copy used for backups."""

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path


def connect(path: Path) -> sqlite3.Connection:
    """A connection shared by the threads of one process (callers serialise it with a lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    # WAL lets readers in other processes (the CLI, a backup) work while the server writes.
    db.execute("PRAGMA journal_mode = WAL")
    # With WAL, NORMAL still never corrupts the file; a power cut may lose the last commits.
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA busy_timeout = 30000")
    return db


@contextmanager
def transaction(
    db: sqlite3.Connection, lock: AbstractContextManager[object], write: bool
) -> Iterator[sqlite3.Connection]:
    """One transaction under the process's lock; a writer takes SQLite's write lock at once,
    so two writers queue on busy_timeout instead of failing to upgrade a read."""
    with lock:
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def copy_database(source: Path, target: Path) -> None:
    """Copy a database that may be in use, page by page (SQLite's online backup): the copy is
    one consistent snapshot, and writers elsewhere wait only for the short steps."""
    reader, writer = sqlite3.connect(source), sqlite3.connect(target)
    try:
        reader.backup(writer, pages=1024)
    finally:
        reader.close()
        writer.close()


def check_integrity(path: Path) -> None:
    """ValueError unless the file is a readable, uncorrupted SQLite database."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        raise ValueError(f"{path} is not a usable SQLite database: {error}") from None
    if verdict != "ok":
        raise ValueError(f"{path} fails SQLite's integrity check: {verdict}")


def restore_database(backup: Path, live: Path, prepare: Callable[[Path], None]) -> None:
    """Replace the live database's content with a backup's, online: the backup is checked,
    staged next to the live file, brought up to date by `prepare` (given the staged file), and
    copied into the live file in one step, so processes using it see the old content or the
    new, never a mix."""
    check_integrity(backup)
    staged = live.with_name(live.name + ".restoring")
    for leftover in _files_of(staged):
        leftover.unlink(missing_ok=True)
    try:
        copy_database(backup, staged)
        prepare(staged)
        copy_database(staged, live)
    finally:
        for leftover in _files_of(staged):
            leftover.unlink(missing_ok=True)


def _files_of(database: Path) -> list[Path]:
    return [database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm")]
