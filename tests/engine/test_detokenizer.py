from ragserve.engine.detokenizer import IncrementalDetokenizer


def test_incremental_text_equals_full_decode(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    text = "Héllo wörld — naïve café 東京 🎉 done."
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [1, 2, 3], (), skip_special_tokens=True)
    seen = []
    for token in ids:
        detok.add(token)
        seen.append(detok.visible_text(finished=False))
        assert "\ufffd" not in seen[-1]
    assert seen[-1] == tokenizer.decode(ids)


def test_stop_string_split_across_tokens_is_held_back_then_cut(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    ids = tokenizer.encode("alpha beta STOPWORD gamma", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [], ("STOPWORD",), skip_special_tokens=True)
    shown = []
    for token in ids:
        detok.add(token)
        shown.append(detok.visible_text(finished=False))
        if detok.stopped_by:
            break
    assert detok.stopped_by == "STOPWORD"
    assert detok.visible_text(finished=True) == "alpha beta "
    assert all("STOP" not in s for s in shown)


def test_stop_strings_are_looked_for_only_after_min_tokens(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    ids = tokenizer.encode("one. two. three.", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [], (".",), skip_special_tokens=True)
    for position, token in enumerate(ids):
        detok.add(token, look_for_stops=position >= 2)
        if detok.stopped_by:
            break
    # The first "." came before the third token and does not count; the next one stops.
    assert detok.visible_text(finished=True) == "one. two"


def test_the_stop_string_can_be_kept(llm_fp32):
    tokenizer = llm_fp32.get_tokenizer()
    ids = tokenizer.encode("alpha beta STOPWORD gamma", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [], ("STOPWORD",), True, include_stop_string=True)
    for token in ids:
        detok.add(token)
        if detok.stopped_by:
            break
    assert detok.visible_text(finished=True) == "alpha beta STOPWORD"
