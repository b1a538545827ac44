"""Sources: the bytes the build reads, pinned. Text and word lists out of PyPI archives
(`archives`), labelled research data out of repository snapshots (`labelled`), and the packaged
deny list made from one of them (`termlist`). Every file is checked against its sha256; nothing
here knows what a line, a split or a model is."""
