"""Reports: the generated documents of models/ (REPORT.md `report`, DATA.md `datasheet`,
CEILING.md `ceiling`, TRADEOFF.md `tradeoff`, TERMS.md `termcheck`) and `publish`, which writes
one evaluation into the manifest, REPORT.md and DATA.md together. The top of the builder below
the command line: it may read every layer, and none reads it."""
