from ragserve.rag.corpus import load_wiki, wiki_doc_id, wiki_sources


def test_wiki_corpus_loads_one_document_per_article():
    articles = load_wiki()
    assert len(articles) == 10_033
    assert len({a.doc_id for a in articles}) == len(articles)
    assert wiki_doc_id("Song dynasty") in {a.doc_id for a in articles}
    source = next(wiki_sources(articles[:1]))
    assert source.parsed.title == articles[0].title
    assert source.parsed.text == articles[0].text and source.doc_id == articles[0].doc_id
