"""`ragserve bench sync` at a small size: the re-sync does exactly what changed, every ACL
follows the map, and it costs a small share of the first sync (a wide margin: not a timing
test)."""

from ragserve.bench.sync import run, to_markdown
from ragserve.settings import Settings


def test_a_resync_does_exactly_what_changed(tmp_path):
    report = run(Settings(data_dir=tmp_path / "data"), files=200, seed=3)
    assert report["exact"], (report["expected"], report["resync"])
    assert report["documents_with_a_wrong_acl"] == []
    assert report["resync"]["repermissioned"] > 0 and report["resync"]["embedded_chunks"] > 0
    assert report["resync_share_of_first"] < 0.5
    assert "re-sync" in to_markdown(report)
