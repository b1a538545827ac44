"""A second real model directory: the shipped model under another manifest. The one candidate a
fresh checkout has without building a model, for the shadow's and the rollout's tests, the shadow
run of `moderator demo` and the chaos scenario of a promotion.

The candidate is the shipped graph and tokenizer, byte for byte, loaded and sha256-checked by the
same loader as any model; only its manifest differs, the way a retrained model's would: it names
the graph's `toxicity` and `obscene` outputs the other way round, and it says it reads Spanish, so
its language gate lets Spanish through to the model. Its decisions then differ from the primary's
on real text (a toxic line it does not nudge, a profane one it does, Spanish it judges instead of
sending to review), with nothing standing in for the model, the tokenizer or the policy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from moderator.config import DEFAULT_MODEL_DIR
from moderator.decide import selfcheck
from moderator.decide.classifier import Classifier

SWAPPED = ("toxicity", "obscene")
LANGUAGES = ["en", "es"]


def candidate_model(folder: Path) -> Path:
    """The candidate model directory, made in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model.onnx", "tokenizer.json"):
        shutil.copyfile(DEFAULT_MODEL_DIR / name, folder / name)
    manifest = json.loads((DEFAULT_MODEL_DIR / "manifest.json").read_text())
    labels = list(manifest["labels"])
    a, b = (labels.index(name) for name in SWAPPED)
    labels[a], labels[b] = labels[b], labels[a]
    manifest.update(name=f"{manifest['name']}-candidate", labels=labels, languages=LANGUAGES)
    # Its own check lines, as a build records them: the shipped ones name the labels the other
    # way round, and the self-check would refuse the candidate for it.
    texts = [line["text"] for line in manifest.pop(selfcheck.FIELD)]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    manifest[selfcheck.FIELD] = selfcheck.recorded(Classifier(folder), texts)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
