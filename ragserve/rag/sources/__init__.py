"""Sources the index follows: a connector lists a source's files (path, modified time, size,
bytes on demand), and a sync (sync.py) brings the index in line with the listing."""
