"""Deterministic fine-tuning of a pretrained encoder (all-MiniLM-L6-v2 unless `TrainConfig.encoder`
names another, `models.training.encoders`) on the template corpus plus real text.

The whole encoder is fine-tuned with a masked-mean-pooling linear head (word embeddings frozen:
they are 45% of the parameters, and untouched embeddings keep unseen words and obfuscations
where pretraining put them). A frozen-embedding head was tried as a second candidate in earlier
builds and always lost on held-out text (selection score 0.73 vs 0.84), so it is gone.
Targets may be soft (a teacher's probability), so real text labelled by distillation and
template lines with 0/1 labels share one loss. All text goes through
moderator.normalize.normalize_text first, as at serving time. A build's training saves its
state as it goes and a stopped one resumes there (models/training/resume.py).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.lines import corpus
from models.training import encoders, resume
from models.training.metrics import f1_counts
from models.training.resume import Checkpoint

logger = logging.getLogger(__name__)

MAX_LENGTH = 128  # the model's limit at serving time
TRAIN_MAX_LENGTH = 64  # chat lines are short; longer training lines are cut to halve the cost
SEED = 1234
THREADS = 2  # fixed so results do not depend on the machine's core count


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters; the defaults fit ~4 minutes on 2 cores."""

    epochs: int = 2
    # Toxic template lines are seen this many times per epoch: the real benign lines outnumber
    # them, and without it recall on the synthetic held-out split fell below the template-only
    # model's.
    template_toxic_repeat: int = 2
    batch_size: int = 32
    lr_encoder: float = 5e-5
    lr_head: float = 2e-3
    warmup_share: float = 0.06
    weight_decay: float = 0.01
    seed: int = SEED
    encoder: str = encoders.DEFAULT  # the pretrained encoder fine-tuned (`encoders.ENCODERS`)
    # The forward pass in bfloat16 (torch's CPU autocast; weights, optimiser and loss stay fp32).
    # 2.5-2.6x faster a step on a CPU with avx512_bf16 (`bf16_supported`), where an e5 build's
    # training would take about an hour instead of 2.4; off by default, so the shipped recipe's
    # arithmetic is unchanged.
    bf16: bool = False


@dataclass
class TrainResult:
    """The fine-tuned module and what training saw."""

    module: Any
    heldout: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    n_train: int = 0
    n_real: int = 0
    n_heldout: int = 0


def bf16_supported(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes bfloat16 in hardware (avx512_bf16, which every AMX CPU also
    reports): elsewhere torch emulates it, which buys nothing."""
    from loadgen.machine import cpu_flags

    return cpu_flags(cpuinfo)["avx512_bf16"]


def base_model_dir(encoder: str = encoders.DEFAULT) -> Path:
    """The pretrained folder of `encoder` (`models.training.encoders`; MiniLM's by default)."""
    return encoders.base_model_dir(encoder)


def tokenizer_path(encoder: str = encoders.DEFAULT) -> Path:
    """The tokenizer.json shipped with the pretrained weights."""
    return base_model_dir(encoder) / "tokenizer.json"


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(THREADS)


def build_module(n_labels: int, folder: Path | None = None) -> Any:
    """The encoder in `folder` (MiniLM's by default; eager attention, exportable) + masked mean
    pooling + head + sigmoid."""
    import torch
    from transformers import BertConfig, BertModel

    folder = folder or base_model_dir()
    config = BertConfig.from_pretrained(str(folder), local_files_only=True)
    config._attn_implementation = "eager"  # the SDPA export does not fuse in onnxruntime
    encoder = BertModel.from_pretrained(
        str(folder), config=config, local_files_only=True, add_pooling_layer=False
    )
    encoder.config._attn_implementation = "eager"

    class MeanPoolClassifier(torch.nn.Module):
        """forward(input_ids, attention_mask) -> sigmoid scores [batch, n_labels]."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.dropout = torch.nn.Dropout(0.1)
            self.head = torch.nn.Linear(config.hidden_size, n_labels)

        def pooled(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

        def logits(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.head(self.dropout(self.pooled(input_ids, attention_mask)))

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return torch.sigmoid(self.logits(input_ids, attention_mask))

    return MeanPoolClassifier()


def encode_texts(
    texts: Sequence[str], max_length: int = MAX_LENGTH, encoder: str = encoders.DEFAULT
) -> list[list[int]]:
    """Normalise, name the emoji, then tokenize (truncation, no padding), as the runtime does
    for a model whose manifest says `"emoji": "names"` (EMOJI, which the export writes)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path(encoder)))
    tok.enable_truncation(max_length)
    tok.no_padding()
    return [enc.ids for enc in tok.encode_batch(encoders.model_form(texts))]


def _batches(
    ids: Sequence[Sequence[int]], batch_size: int, rng: random.Random, shuffle: bool
) -> list[list[int]]:
    """Index batches grouped by length (less padding), in shuffled order when training."""
    order = list(range(len(ids)))
    if shuffle:
        rng.shuffle(order)
    chunk = batch_size * 50
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: len(ids[i]))
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    if shuffle:
        rng.shuffle(batches)
    return batches


def pad(ids: Sequence[Sequence[int]], rows: Sequence[int]) -> tuple[Any, Any]:
    """The token ids of `rows` as one zero-padded tensor, and its attention mask."""
    import torch

    width = max(len(ids[i]) for i in rows)
    out = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, i in enumerate(rows):
        out[r, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
        mask[r, : len(ids[i])] = 1
    return out, mask


def predict(module: Any, ids: Sequence[Sequence[int]], batch_size: int = 64) -> npt.NDArray[Any]:
    """Sigmoid scores for tokenized lines, in input order."""
    import torch

    module.eval()
    out = np.zeros((len(ids), module.head.out_features), dtype=np.float32)
    with torch.no_grad():
        for rows in _batches(ids, batch_size, random.Random(0), shuffle=False):
            x, m = pad(ids, rows)
            out[rows] = module(x, m).numpy()
    return out


def train_finetune(
    ids: Sequence[Sequence[int]],
    targets: Any,
    cfg: TrainConfig,
    progress: Callable[[str], None],
    checkpoint: Checkpoint | None = None,
    after_epoch: Callable[[int, Any], None] | None = None,
) -> Any:
    """Candidate 2: fine-tune the encoder (word embeddings frozen) with the head; with a
    `checkpoint`, resumed from the state an earlier run of the same recipe and data left, and
    saved as it goes (models/training/resume.py). `after_epoch(epoch, module)` is called after
    each epoch (the module in train mode again after it), for a caller that judges the epochs
    on its own dev lines."""
    import torch

    _seed_everything(cfg.seed)
    module = build_module(targets.shape[1], base_model_dir(cfg.encoder))
    module.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    head_params = list(module.head.parameters())
    enc_params = [p for p in module.encoder.parameters() if p.requires_grad]
    no_decay = [p for p in enc_params if p.ndim == 1]
    decay = [p for p in enc_params if p.ndim > 1]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "lr": cfg.lr_encoder, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "lr": cfg.lr_encoder, "weight_decay": 0.0},
            {"params": head_params, "lr": cfg.lr_head, "weight_decay": 0.0},
        ]
    )
    rng = random.Random(cfg.seed)
    steps_per_epoch = math.ceil(len(ids) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = max(1, int(total * cfg.warmup_share))

    def lr_lambda(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    first_epoch, skip, step, running = 0, 0, 0, 0.0
    state = checkpoint.load() if checkpoint is not None else None
    if checkpoint is not None and state is not None:
        module.load_state_dict(state["module"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["schedule"])
        torch.set_rng_state(state["torch_rng"])
        rng.setstate(state["epoch_rng"])  # the batch order is drawn again, the same
        first_epoch, skip, step, running = (
            state["epoch"], state["batch"], state["step"], state["running"])  # fmt: skip
        progress(f"  resumed at step {step}/{total} from {checkpoint.path}")

    def snapshot(epoch: int, batch: int, epoch_rng: object) -> dict[str, Any]:
        """All that decides what comes next: resumed from it, a run ends as if never stopped."""
        return {
            "module": module.state_dict(),
            "optimizer": opt.state_dict(),
            "schedule": sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "epoch_rng": epoch_rng,
            "epoch": epoch,
            "batch": batch,
            "step": step,
            "running": running,
        }

    start = time.perf_counter()
    for epoch in range(first_epoch, cfg.epochs):
        module.train()
        epoch_rng = rng.getstate()
        for batch, rows in enumerate(_batches(ids, cfg.batch_size, rng, shuffle=True)):
            if epoch == first_epoch and batch < skip:
                continue
            x, m = pad(ids, rows)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
                logits = module.logits(x, m)
            loss = loss_fn(logits.float(), targets[rows])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            opt.step()
            sched.step()
            running += loss.item()
            step += 1
            if step % 100 == 0:
                progress(
                    f"  step {step}/{total} loss {running / 100:.4f} "
                    f"({time.perf_counter() - start:.0f}s)"
                )
                running = 0.0
            if checkpoint is not None and checkpoint.due():
                checkpoint.save(snapshot(epoch, batch + 1, epoch_rng))
        logger.info("epoch %d done after %.0fs", epoch + 1, time.perf_counter() - start)
        if after_epoch is not None:
            after_epoch(epoch + 1, module)
    if checkpoint is not None:  # trained: run again, it goes straight past (the caller ends it)
        checkpoint.save(snapshot(cfg.epochs, 0, rng.getstate()))
    return module.eval()


def save(module: Any, path: Path) -> None:
    """The fine-tuned weights (state dict), for re-exporting without training again."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(module.state_dict(), path)


def selection_score(scores: npt.NDArray[Any], gold: npt.NDArray[Any]) -> dict[str, float]:
    """Synthetic held-out figures at threshold 0.5 (printed; the report measures the rest)."""
    pred = np.asarray(scores >= 0.5)
    gold_b = np.asarray(gold >= 0.5)
    per_label = [
        f1_counts(np.asarray(pred[:, j]), np.asarray(gold_b[:, j]))["f1"]
        for j in range(gold.shape[1])
    ]
    acting = list(corpus.ACTING)
    flag_pred = np.asarray(pred[:, acting].any(axis=1))
    flag = f1_counts(flag_pred, np.asarray(gold_b[:, acting].any(axis=1)))
    return {"macro_f1": round(float(np.mean(per_label)), 4), "flag_f1": round(flag["f1"], 4)}


def train(
    real: Sequence[tuple[str, Sequence[float]]] = (),
    cfg: TrainConfig | None = None,
    progress: Callable[[str], None] = print,
    checkpoints: Path | None = None,
) -> TrainResult:
    """Fine-tune on train.tsv plus `real` lines (text, soft targets in LABELS order).

    The template corpus teaches what the categories mean (targeted vs untargeted, gaming talk,
    friendly profanity, obfuscation); the real lines teach what ordinary conversation and real
    abuse look like, which no generator can.
    """
    import torch

    cfg = cfg or TrainConfig()
    template_rows = corpus.read_tsv(corpus.TRAIN_FILE)
    train_rows = [
        row
        for row in template_rows
        for _ in range(cfg.template_toxic_repeat if set(row[1]) - {"obscene"} else 1)
    ]
    held_rows = corpus.read_tsv(corpus.HELDOUT_FILE)
    texts = [t for t, _ in train_rows] + [t for t, _ in real]
    targets = torch.tensor(
        corpus.label_matrix(train_rows) + [[float(v) for v in y] for _, y in real],
        dtype=torch.float32,
    )
    train_ids = encode_texts(texts, TRAIN_MAX_LENGTH, cfg.encoder)
    held_ids = encode_texts([t for t, _ in held_rows], encoder=cfg.encoder)
    gold = np.asarray(corpus.label_matrix(held_rows), dtype=np.float32)
    progress(
        f"fine-tuning {cfg.encoder} ({cfg.epochs} epochs): {len(template_rows)} template lines"
        f" ({len(train_rows)} with toxic ones x{cfg.template_toxic_repeat}) +"
        f" {len(real)} real lines"
    )
    t0 = time.perf_counter()
    checkpoint = None
    if checkpoints is not None:  # resumable: a stopped build starts again where it was
        checkpoint = Checkpoint(checkpoints, resume.fingerprint(train_ids, targets, cfg))
    module = train_finetune(train_ids, targets, cfg, progress, checkpoint)
    seconds = round(time.perf_counter() - t0, 1)
    heldout = selection_score(predict(module, held_ids), gold)
    progress(f"  synthetic held-out at 0.5: {heldout} after {seconds}s")
    return TrainResult(
        module=module,
        heldout=heldout,
        seconds=seconds,
        n_train=len(template_rows),
        n_real=len(real),
        n_heldout=len(held_rows),
    )
