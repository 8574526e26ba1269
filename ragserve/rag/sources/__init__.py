"""Sources the index follows: a connector (connector.py) lists a source's items, a folder's
files or a website's pages, each with a stamp and its bytes on demand; a sync (sync.py) brings
the index in line with the listing."""
