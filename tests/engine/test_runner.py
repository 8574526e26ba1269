"""The runner's attention metadata, without a model: where each new token's KV goes and what
each sequence attends to."""

from types import SimpleNamespace

from ragserve.engine.logits_processor import LogitsProcessor
from ragserve.engine.runner import ModelRunner
from ragserve.engine.sampler import Sampler
from ragserve.engine.scheduler import ScheduledBatch
from tests.engine.helpers import make_seq

BLOCK = 4


def runner() -> ModelRunner:
    model = SimpleNamespace(spec=SimpleNamespace(num_layers=1))
    kv_cache = SimpleNamespace(block_size=BLOCK, layer=lambda i: (None, None))
    return ModelRunner(model, kv_cache, Sampler(0), LogitsProcessor(set()))  # type: ignore[arg-type]


def test_decodes_write_at_their_last_position_and_prefills_at_theirs():
    decode = make_seq("d", list(range(6)))
    decode.block_table = [7, 3]
    decode.num_computed_tokens = 5  # its 6th token is the one to compute
    fresh = make_seq("p", list(range(5)))
    fresh.block_table = [2, 9]
    chunked = make_seq("c", list(range(10)))
    chunked.block_table = [4, 5, 6]
    chunked.num_computed_tokens = 4  # a second chunk: positions 4..7
    batch = ScheduledBatch()
    batch.add(decode, 1)
    batch.add(fresh, 5)
    batch.add(chunked, 4)
    batch.num_decodes = 1
    meta = runner().build_metadata(batch)
    slots = (meta.slot_blocks * BLOCK + meta.slot_offsets).tolist()
    assert slots[0] == 3 * BLOCK + 1  # position 5 = block 1 (id 3), offset 1
    assert slots[1:6] == [8, 9, 10, 11, 36]  # positions 0..4 of blocks 2 and 9
    assert slots[6:] == [20, 21, 22, 23]  # positions 4..7 = block 1 of the third (id 5)
    # One table row per sequence, as many blocks as the furthest token needs; each token
    # attends up to itself.
    assert meta.block_tables.tolist() == [[7, 3], [2, 9], [4, 5]]
    assert meta.token_seqs.tolist() == [0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    assert meta.token_lens.tolist() == [6, 1, 2, 3, 4, 5, 5, 6, 7, 8]
