"""The classifier: normalised text → token ids → label scores. Pure and synchronous.

No Kafka, no Redis, no asyncio: the service, `moderator score`, the evaluation and the benchmarks
all call this same code. ONNX Runtime releases the GIL while it runs, so the service runs
`score_ids` on a worker thread and the event loop keeps going.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from moderator.errors import ModelError
from moderator.normalize import name_emoji, normalize_text

log = logging.getLogger(__name__)

TokenIds = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float32]

ACTIVATIONS = ("sigmoid", "softmax", "none")
# How a model reads emoji (manifest `emoji`): "" as the tokenizer does (most become `[UNK]`;
# the models built before emoji were named), "names" as their names in words
# (`normalize.name_emoji`), the form the build trained on.
EMOJI_FORMS = ("", "names")


class ModelInfo(NamedTuple):
    """What `manifest.json` says about a model directory."""

    name: str
    version: str
    labels: tuple[str, ...]
    activation: str
    activation_in_graph: bool
    max_length: int
    sha256: str
    inputs: tuple[str, ...]
    speed_only: bool
    emoji: str = ""
    languages: tuple[str, ...] = ("en",)  # what the model was validated on: the gate's supported

    @property
    def ident(self) -> str:
        """`name@version`, as written into every decision."""
        return f"{self.name}@{self.version}"

    @classmethod
    def load(cls, model_dir: Path) -> ModelInfo:
        path = model_dir / "manifest.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelError(
                f"{model_dir}: no manifest.json (build it with `make model`)"
            ) from None
        except json.JSONDecodeError as exc:
            raise ModelError(f"{path}: not valid JSON: {exc}") from None
        try:
            info = cls(
                name=str(raw["name"]),
                version=str(raw["version"]),
                labels=tuple(str(label) for label in raw["labels"]),
                activation=str(raw["activation"]),
                activation_in_graph=bool(raw.get("activation_in_graph", False)),
                max_length=int(raw["max_length"]),
                sha256=str(raw["sha256"]),
                inputs=tuple(raw.get("inputs", ("input_ids", "attention_mask"))),
                speed_only=bool(raw.get("speed_only", False)),
                emoji=str(raw.get("emoji", "")),
                languages=tuple(str(code) for code in raw.get("languages", ("en",))),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{path}: missing or invalid field {exc}") from None
        if not info.labels or len(set(info.labels)) != len(info.labels):
            raise ModelError(f"{path}: 'labels' must be a non-empty list of distinct names")
        if info.activation not in ACTIVATIONS:
            raise ModelError(f"{path}: 'activation' must be one of {ACTIVATIONS}")
        if not info.languages:
            raise ModelError(f"{path}: 'languages' must name at least one language")
        if info.emoji not in EMOJI_FORMS:
            raise ModelError(f"{path}: 'emoji' must be one of {EMOJI_FORMS}")
        if info.max_length < 2:
            raise ModelError(f"{path}: 'max_length' must be at least 2")
        return info


def _activate(logits: Scores, activation: str) -> Scores:
    activated: npt.NDArray[np.floating[Any]]
    if activation == "sigmoid":
        activated = 1.0 / (1.0 + np.exp(-logits))
    elif activation == "softmax":
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        activated = shifted / shifted.sum(axis=1, keepdims=True)
    else:
        activated = logits
    return np.asarray(activated, dtype=np.float32)


class Classifier:
    """A model directory loaded for scoring with `threads` intra-op threads.

    `encode` never pads; `score_ids` pads a batch only to its own longest member.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 1,
        verify: bool = True,
        graph: Path | None = None,
        info: ModelInfo | None = None,
    ) -> None:
        """The model in `model_dir`, its `model.onnx` checked against the manifest (`verify`).

        For the model builder, which scores as the service does before a model directory is
        finished: `graph` is another ONNX file to run with this directory's tokenizer (the fp32
        graph, a quantization candidate; never checked), `info` stands in for a manifest not
        written yet.
        """
        self.model_dir = model_dir
        self.info = ModelInfo.load(model_dir) if info is None else info
        model_path = model_dir / "model.onnx" if graph is None else graph
        _check_graph(model_path, self.info.sha256 if verify and graph is None else None)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.info.max_length)
        self.tokenizer.no_padding()
        self.pad_id = _pad_id(self.tokenizer)
        self.threads = threads
        self._warm = False
        self.session = _session(model_path, threads)
        self._needs_token_types = _needs_token_types(model_path, self.session)
        self._output = self.session.get_outputs()[0].name
        log.info(
            "loaded model %s (%d labels) with %d intra-op threads",
            self.info.ident,
            len(self.info.labels),
            threads,
        )

    @property
    def labels(self) -> tuple[str, ...]:
        return self.info.labels

    def encode(self, texts: Sequence[str]) -> list[TokenIds]:
        """Token ids of each text after `normalize_text`, truncated to the model's length."""
        return self.encode_normalized([normalize_text(t) for t in texts])

    def model_text(self, normalized: Sequence[str]) -> Sequence[str]:
        """Normalised texts in the form this model reads (emoji as names if its manifest says)."""
        if self.info.emoji == "names":
            return [name_emoji(t) for t in normalized]
        return normalized

    def encode_normalized(self, normalized: Sequence[str]) -> list[TokenIds]:
        """`encode` of texts normalised already (the pipeline's `text.Text.normalized`).

        The tokenizer reads a whole text before it truncates (a 60 KiB message costs ~30 ms of
        the event loop), so a long text is first cut at a space near `HEAD_CHARS_PER_TOKEN`
        characters per token of the model's length. Cut at a space, the head's tokens are the
        first tokens of the whole text; when they fill the model's length nothing after the cut
        could change them, and only a head that does not (mostly characters the tokenizer
        drops) is read again whole. The ids are the same either way.
        """
        normalized = self.model_text(normalized)
        limit = self.info.max_length
        cap = limit * HEAD_CHARS_PER_TOKEN
        heads = [_head(t, cap) for t in normalized]
        ids = [e.ids for e in self.tokenizer.encode_batch(heads)]
        again = [
            i
            for i, (h, t) in enumerate(zip(heads, normalized, strict=True))
            if len(h) < len(t) and len(ids[i]) < limit
        ]
        if again:
            whole = self.tokenizer.encode_batch([normalized[i] for i in again])
            for i, encoding in zip(again, whole, strict=True):
                ids[i] = encoding.ids
        return [np.asarray(row, dtype=np.int64) for row in ids]

    def warm_up(self, max_batch: int) -> int:
        """Score throw-away inputs of the shapes traffic brings (short to full length, alone and
        in a full batch), once per classifier: the first call of a shape allocates and
        initialises, and would otherwise land on the first real messages. Returns the shapes
        run (0 when already warm)."""
        if self._warm:
            return 0
        word = self.tokenizer.token_to_id("the") or self.pad_id + 1
        shapes = [
            (batch, length)
            for length in WARM_LENGTHS
            if length <= self.info.max_length
            for batch in sorted({1, max(1, max_batch)})
        ]
        for batch, length in shapes:
            ids = np.full(length, word, dtype=np.int64)
            self.score_ids([ids] * batch)
        self._warm = True
        return len(shapes)

    @staticmethod
    def has_content(ids: TokenIds) -> bool:
        """False when normalisation left nothing but the two special tokens ([CLS] [SEP] for
        BERT WordPiece, <s> </s> for SentencePiece)."""
        return len(ids) > 2

    def score_ids(self, batch: Sequence[TokenIds]) -> Scores:
        """Scores `[len(batch), n_labels]` for token-id sequences, padded to the longest one."""
        if not batch:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        input_ids, mask = padded(batch, self.pad_id)
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if self._needs_token_types:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        (out,) = self.session.run([self._output], feeds)
        scores = np.asarray(out, dtype=np.float32)
        if scores.shape != (len(batch), len(self.labels)):
            raise ModelError(
                f"model output has shape {scores.shape}, expected {(len(batch), len(self.labels))}"
            )
        if not self.info.activation_in_graph:
            scores = _activate(scores, self.info.activation)
        return scores

    def as_dict(self, scores: Scores) -> dict[str, float]:
        """One row of scores keyed by label."""
        return {label: float(s) for label, s in zip(self.labels, scores, strict=True)}


# The pad piece of the tokenizers models are built on: BERT WordPiece's, then SentencePiece's
# (XLM-R, multilingual-e5: 1, where 0 is `<s>`). The attention mask hides padding either way,
# but the int8 activation scale of a batch reads the padded rows too.
PAD_PIECES = ("[PAD]", "<pad>")


def _pad_id(tokenizer: Tokenizer) -> int:
    """The tokenizer's pad id (`PAD_PIECES`), else 0."""
    for piece in PAD_PIECES:
        found = tokenizer.token_to_id(piece)
        if found is not None:
            return found
    return 0


def _check_graph(model_path: Path, sha256: str | None) -> None:
    """ModelError when `model_path` is missing, or when it is not the file `sha256` names."""
    if not model_path.is_file():
        raise ModelError(f"{model_path.parent}: no {model_path.name}")
    if sha256 is not None:
        digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
        if digest != sha256:
            raise ModelError(
                f"{model_path}: sha256 {digest[:12]}… does not match the manifest's "
                f"{sha256[:12]}…; rebuild the model or fix the manifest"
            )


def _session(model_path: Path, threads: int) -> ort.InferenceSession:
    """An ONNX Runtime session on the CPU, `threads` intra-op threads that sleep when idle."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT's idle worker threads busy-wait by default. Next to an event loop, a broker client
    # and Redis on a few cores that spinning starves them: on 2 cores it turned a 12 ms p50
    # into 500 ms (BENCHMARKS.md, "spin"). Sleeping threads cost microseconds per batch.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(
        str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
    )


def _needs_token_types(model_path: Path, session: ort.InferenceSession) -> bool:
    """Whether the graph takes token_type_ids; ModelError when its inputs break the contract."""
    graph_inputs = {i.name for i in session.get_inputs()}
    wanted = {"input_ids", "attention_mask", "token_type_ids"}
    if not {"input_ids", "attention_mask"} <= graph_inputs or not graph_inputs <= wanted:
        raise ModelError(
            f"{model_path}: inputs are {sorted(graph_inputs)}; the contract is "
            "input_ids and attention_mask (and token_type_ids only if needed)"
        )
    return "token_type_ids" in graph_inputs


def padded(batch: Sequence[TokenIds], pad_id: int) -> tuple[TokenIds, TokenIds]:
    """(input ids, attention mask) of `batch`, each `[len(batch), longest]`, padded with pad_id."""
    longest = max(len(ids) for ids in batch)
    input_ids = np.full((len(batch), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(batch), longest), dtype=np.int64)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return input_ids, mask


WARM_LENGTHS = (8, 16, 32, 64, 128)  # token counts `warm_up` runs

# A head this many characters per token of the model's length holds all the tokens the model
# reads of any ordinary text (English averages about 4 characters a token).
HEAD_CHARS_PER_TOKEN = 16


def _head(text: str, cap: int) -> str:
    """`text` itself when it is at most `cap` characters, else its start cut at the last space
    before `cap` (the text itself when it has none there: a word is never split)."""
    if len(text) <= cap:
        return text
    cut = text.rfind(" ", 0, cap)
    return text[:cut] if cut > 0 else text
