"""Words to scores: the analyzer, BM25, and the term counting of a large ingest."""
