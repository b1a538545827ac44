"""Render models/REPORT.md from a manifest and the metrics models.evaluation.evaluate measured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.evaluation import realeval, suite
from models.evaluation.evaluate import LATENCY_LENGTHS, LATENCY_THREADS
from models.files import MODELS_DIR

REPORT_FILE = MODELS_DIR / "REPORT.md"

NOTES = (
    "- **Read the real-text section first.** The synthetic held-out split measures"
    " generalisation to new templates and new words of the same generator, not to real chat;"
    " the unseen-chat tables are small hand-written checks (about 50 lines each), noisy from one"
    " training to the next.",
    "- The benign pools are unlabelled real conversation (and film dialogue, which is ruder"
    " than chat). Every flag on them counts as a false positive, including the lines that are"
    " in fact rude: read the table of surest false positives before trusting the rate either"
    " way.",
    "- The default policy's thresholds are tuned for this model on the real dev split and"
    " ship with it (`moderator/default_policy.toml`). A platform that tolerates more nudges"
    " can lower them: the AUC row says how much more the model would catch.",
    "- The insult comments (forum and news comments, 2012) are never trained on. Their insults"
    " sit inside long arguments; compare the flag rate with the teachers at equal benign flag"
    " rates, not only at each one's own threshold: the teachers flag four to five times more of"
    " the benign chat.",
    "- No real labelled text covers `self_harm`, and real `sexual_explicit` and `threat` lines"
    " are few (toxic web snippets; ETHOS's violence comments, which judge but never train):"
    " those labels rest on the template corpus. The family rows with a dozen lines are noisy.",
    "- Labelled research data: the held-out threat set is ETHOS's comments that incite"
    " violence and the threatening texts of OpenAI's moderation test set (`models/DATA.md`);"
    " `openai_moderation` texts are long (a median of about 380 characters), so how much of"
    " each the model reads matters there. alt-profanity-check and HateSonar were trained on"
    " Davidson et al.'s tweets, so their `davidson` rows are not held out for them.",
    "- The identity probe is written in this project's voice; it checks the words, not every"
    " way people speak about themselves or attack others.",
    "- `obscene` is lexical by construction and never acts alone; `severe_toxicity` is coarse"
    " (whole template families, and the Perspective score on the web snippets).",
    "- The load generator's corpus (`loadgen/corpus/`) is not independent for false-positive"
    " figures: lines from it shaped the template word lists. The real test splits are.",
    "- int8 vs fp32: a few percent of lines change action; they are lines whose scores sit near"
    " a threshold. Per-channel weights halve the disagreement of per-tensor ones (see the"
    " trials line).",
    "- Training is seeded with a fixed thread count (2), but bit-identical weights across"
    " machines are not guaranteed (oneDNN kernels differ by CPU); the build re-evaluates"
    " whatever it produced, so the report always matches the model it sits next to.",
    "- Latency was measured on a shared 2-core machine while other work ran; compare rows"
    " of one run (int8 vs fp32, 1 vs 2 threads), not absolute values across runs.",
)


def _fmt(value: Any) -> str:
    """Compact, rounded rendering of nested figures for prose lines."""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-3 else f"{value:.4f}".rstrip("0").rstrip(".")
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    return str(value)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _prf_table(rows: Mapping[str, Mapping[str, float]], first: str) -> list[str]:
    out = [f"| {first} | precision | recall | F1 | support |", "|---|---|---|---|---|"]
    for name, m in rows.items():
        out.append(
            f"| {name} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} "
            f"| {int(m['support'])} |"
        )
    return out


def render(manifest: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    """The whole report as Markdown."""
    training = manifest.get("training", {})
    lines = [
        "# Default model report: chat-minilm",
        "",
        "Regenerate with `python -m models evaluate` (or `moderator model evaluate`); every figure",
        "below is measured by that command on this machine and also written to the model's",
        "`manifest.json` under `metrics`. Latency is noisy on these shared machines: compare",
        "columns of one run, not runs.",
        "",
        f"- model: `{manifest['name']}@{manifest['version']}`"
        f" (sha256 `{manifest['sha256'][:16]}…`)",
        f"- source: {manifest.get('source', '')}",
        f"- labels: {', '.join(manifest['labels'])}"
        f" (activation {manifest['activation']}, in graph)",
        f"- quantization: {manifest.get('quantization', '')}",
        f"- fused operators: {_fmt(manifest.get('fused_operators', {}))}",
        f"- int8 variants tried (agreement with fp32 on held-out):"
        f" {_fmt(manifest.get('quantization_trials', 'not recorded'))}",
        f"- export parity (max/mean abs score difference): {_fmt(manifest.get('parity', {}))}",
        f"- policy used for actions: {metrics['policy']}",
        f"- machine: {metrics.get('machine', '')}",
        "",
    ]
    if "real" in metrics:
        lines += render_real(metrics["real"], manifest.get("policy_tuning"))
    lines += suite.render(metrics.get("suite"))
    if training:
        lines += [
            "## Training",
            "",
            f"- {training.get('n_train')} template lines (`models/data/train.tsv`, generated by"
            f" `models/lines/corpus.py`) + {training.get('n_real')} real lines (the train split of"
            " `models/DATA.md`; toxic ones counted twice), fine-tuned together in"
            f" {_fmt(training.get('seconds'))} s on {training.get('threads')} threads",
            f"- synthetic held-out at threshold 0.5 right after training:"
            f" {_fmt(training.get('synthetic_heldout_at_0.5'))}",
            "",
        ]
    i8 = metrics["int8"]
    lines += [
        "## Synthetic held-out split (int8 model, the one the runtime loads)",
        "",
        f"{metrics['heldout_lines']} lines, {metrics['heldout_benign_lines']} of them benign"
        " (gold action allow). Gold actions are the policy applied to the 0/1 gold labels, so an"
        " insult's gold action is `block` (insult 1.0 >= 0.9); a predicted `nudge` on it counts"
        " as a miss per action but as a hit in the flagged row.",
        "",
        "### Per label (score >= 0.5)",
        "",
        *_prf_table(i8["per_label"], "label"),
        "",
        f"Label macro-F1: {i8['label_macro_f1']:.3f}",
        "",
        "### Per action",
        "",
        *_prf_table(
            {**i8["actions"]["per_action"], "flagged (any but allow)": i8["actions"]["flagged"]},
            "action",
        ),
        "",
        f"- action macro-F1: {i8['actions']['macro_f1']:.3f}; exact action accuracy:"
        f" {_pct(i8['actions']['accuracy'])}",
        f"- benign flag rate (benign held-out lines that get any action but allow):"
        f" **{_pct(i8['actions']['benign_flag_rate'])}**"
        f" (blocked: {_pct(i8['actions']['benign_block_rate'])})",
        "",
    ]
    if "int8_vs_fp32" in metrics:
        q = metrics["int8_vs_fp32"]
        f32 = metrics["fp32"]
        lines += [
            "## int8 vs fp32",
            "",
            "| | fp32 | int8 |",
            "|---|---|---|",
            f"| label macro-F1 | {f32['label_macro_f1']:.4f} | {i8['label_macro_f1']:.4f} |",
            f"| action macro-F1 | {f32['actions']['macro_f1']:.4f} |"
            f" {i8['actions']['macro_f1']:.4f} |",
            f"| benign flag rate | {_pct(f32['actions']['benign_flag_rate'])} |"
            f" {_pct(i8['actions']['benign_flag_rate'])} |",
            f"| size (MB) | {metrics['size_mb'].get('fp32', '-')} | {metrics['size_mb']['int8']} |",
            "",
            f"- action agreement int8 vs fp32: **{_pct(q['action_agreement'])}**",
            f"- label macro-F1 difference (int8 - fp32): **{q['label_macro_f1_delta_points']:+.2f}"
            f" points**; action macro-F1 difference:"
            f" {q['action_macro_f1_delta_points']:+.2f} points",
            f"- score difference: max {q['score_max_abs_diff']:.4f}, mean"
            f" {q['score_mean_abs_diff']:.5f}",
            "",
        ]
    lat = metrics.get("latency_ms_median_batch1", {})
    if lat:
        lines += [
            "## Latency per message (median ms, batch 1, onnxruntime, dynamic shapes)",
            "",
            "Configurations interleaved round by round. 1-minute load average before/after"
            f" (2 cores): {metrics.get('latency_load_average', 'not recorded')}; above 2, other"
            " processes were competing and the 2-thread rows suffer most.",
            "",
            "| model | threads | " + " | ".join(f"L={n}" for n in LATENCY_LENGTHS) + " |",
            "|---|---|" + "---|" * len(LATENCY_LENGTHS),
        ]
        for kind in ("int8", "fp32"):
            for t in LATENCY_THREADS:
                row = lat.get(kind, {}).get(str(t))
                if row:
                    cells = " | ".join(f"{row[str(n)]:.2f}" for n in LATENCY_LENGTHS)
                    lines.append(f"| {kind} | {t} | {cells} |")
        lines.append("")
    titles = {
        "unseen_chat": "## Unseen chat (hand-written, not in the corpus nor from its generator)\n\n"
        "`models/data/unseen_chat.tsv`, written after the last corpus change; its results were"
        " never used to change the corpus or the training.",
        "unseen_short": "## Unseen short chat (hand-written 1-4 word lines, not in the corpus)\n\n"
        "`models/data/unseen_short.tsv`: short benign lines (emotes, callouts, greetings, single"
        " words) and a few toxic shorts, written before the short-lines template batch and never"
        " used to write it or to tune. The false-positive check for short chat.",
        "unseen_dev": "## Development chat set (hand-written; NOT unseen any more)\n\n"
        "`models/data/unseen_dev.tsv` was the first unseen set. Its failures on the first model"
        " (game 'kill everyone', 'crush you at chess tonight', a passive threat) guided the"
        " second template batch, so it is reported for transparency, not as a generalisation"
        " figure.",
    }
    for key, title in titles.items():
        unseen = metrics.get(key)
        if not unseen:
            continue
        lines += [
            title,
            "",
            f"{unseen['as_expected']}/{unseen['lines']} as expected (`nudge` expected:"
            " `review` and `block` also count; int8 model, default policy).",
            "",
            "| line | kind | expected | got | reason | top score | ok |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in unseen["rows"]:
            text = r["text"].replace("|", "\\|")
            lines.append(
                f"| {text} | {r['kind']} | {r['expected']} | {r['action']} |"
                f" {r['reason'] or ''} | {r['top']} | {'yes' if r['ok'] else '**no**'} |"
            )
        lines.append("")
    lines += ["## Notes and known weaknesses", "", *NOTES, ""]
    return "\n".join(lines)


def _cell(value: float | None, pct: bool = True) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return _pct(value) if pct else f"{value:.3f}"


def _real_rows(real: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(row title, one cell per scorer) for the side-by-side table."""
    names = list(real["scorers"])
    sc = real["scorers"]

    def get(path: tuple[str, ...], pct: bool = True) -> list[str]:
        cells = []
        for n in names:
            node: Any = sc[n]
            for key in path:
                node = node.get(key) if isinstance(node, Mapping) else None
            cells.append(_cell(node, pct))
        return cells

    first = sc[names[0]]
    rows: list[tuple[str, list[str]]] = []
    for src, m in first["benign"].items():
        bold = "**" if src == "chat-like" else ""
        rows.append(
            (f"{bold}benign {src} flagged{bold} ({m['lines']})", get(("benign", src, "flagged")))
        )
        if src == "chat-like":
            if "reviewed" in m:
                reviewed = get(("benign", src, "reviewed"))
                rows.append((f"**benign chat-like sent to review** ({m['lines']})", reviewed))
            rows.append(
                (f"**benign chat-like blocked** ({m['lines']})", get(("benign", src, "blocked")))
            )
    for src, m in first["toxic"].items():
        bold = "**" if src == "all" else ""
        title = "all real toxic" if src == "all" else src
        rows.append((f"{bold}{title} flagged{bold} ({m['lines']})", get(("toxic", src, "flagged"))))
    for fam, m in first["family"].items():
        rows.append(
            (f"toxic family `{fam}` flagged ({m['lines']})", get(("family", fam, "flagged")))
        )
    for src, families in first.get("labelled", {}).items():
        if src == "pooled":
            continue
        for fam, m in families.items():
            verb = "caught" if m.get("toxic") else "flagged"
            rows.append(
                (
                    f"labelled `{src}` {fam} {verb} ({m['lines']})",
                    get(("labelled", src, fam, "flagged")),
                )
            )
    rows.append(("AUC, chat-like benign vs real toxic", get(("auc_chat_like_vs_toxic",), False)))
    ins = first["insults"]
    rows.append((f"insult comments: flag F1 ({ins['lines']})", get(("insults", "flag_f1"), False)))
    rows.append(("insult comments: non-insults flagged", get(("insults", "non_insults_flagged"))))
    rows.append(("insult comments: AUC of the insult score", get(("insults", "auc"), False)))
    return rows


def _targets(real: Mapping[str, Any]) -> list[str]:
    """The acceptance figures, each with its verdict, computed from the same metrics."""
    sc = real["scorers"]
    ours = sc["int8"]
    teachers = [n for n in sc if n not in ("int8", "fp32")]
    flag = ours["benign"]["chat-like"]["flagged"]
    block = ours["benign"]["chat-like"]["blocked"]
    review = ours["benign"]["chat-like"].get("reviewed")  # None: measured before `review`
    # "Real toxic text" is the toxic web snippets (Perspective toxicity >= 0.5), as in the
    # measurement that opened this work; the insult comments are judged by F1 and AUC below.
    recall = ours["toxic"]["rtp_scored"]["flagged"]
    best_t_flag = min(sc[t]["benign"]["chat-like"]["flagged"] for t in teachers)
    best_t_recall = max(sc[t]["toxic"]["rtp_scored"]["flagged"] for t in teachers)
    ins_f1 = ours["insults"]["flag_f1"]
    best_t_f1 = max(sc[t]["insults"]["flag_f1"] for t in teachers)
    ident = real["identity"]["int8"]
    f32 = sc.get("fp32")
    rows: list[tuple[str, str, bool | None]] = [
        ("benign chat-like flagged <= 1%", _pct(flag), flag <= 0.01),
        *(
            [("benign chat-like sent to review <= 0.5%", _pct(review), review <= 0.005)]
            if review is not None
            else []
        ),
        ("benign chat-like blocked <= 0.2%", _pct(block), block <= 0.002),
        ("real toxic web snippets (rtp_scored) flagged >= 80%", _pct(recall), recall >= 0.8),
        (
            "benign flagged below every teacher",
            f"{_pct(flag)} vs best teacher {_pct(best_t_flag)}",
            flag < best_t_flag,
        ),
        (
            "toxic web snippets flagged above every teacher",
            f"{_pct(recall)} vs best teacher {_pct(best_t_recall)}",
            recall > best_t_recall,
        ),
        (
            "insult comments: flag F1 above every teacher (reported, not a target)",
            f"{ins_f1:.3f} vs best teacher {best_t_f1:.3f}",
            ins_f1 > best_t_f1,
        ),
        (
            "identity probe: benign flagged <= 2% for every term",
            f"worst term {_pct(ident['worst_term_benign_flagged'])}",
            ident["worst_term_benign_flagged"] <= 0.02,
        ),
        (
            "identity probe: hostile caught >= 95%",
            _pct(ident["hostile_caught"]),
            ident["hostile_caught"] >= 0.95,
        ),
    ]
    rows += _labelled_targets(ours)
    gap = "int8 within 1 point of fp32 (benign flagged, blocked, each toxic set flagged)"
    if f32 is not None:
        worst = realeval.int8_gap(ours, f32)
        rows.append((gap, f"largest gap {100 * worst:.2f} points", worst <= 0.01))
    else:  # a shipped model directory holds the int8 graph alone; the build measures the gap
        rows.append((gap, "not measured: no fp32 graph beside this model", None))
    out = ["| target | measured | met |", "|---|---|---|"]
    out += [f"| {t} | {m} | {_met(ok)} |" for t, m, ok in rows]
    return out


def _met(ok: bool | None) -> str:
    return "-" if ok is None else "yes" if ok else "**no**"


def _marked(row: Mapping[str, Any]) -> str:
    """A worst-mistakes row's action when it is more than a nudge."""
    return " (block)" if row.get("blocked") else " (review)" if row.get("reviewed") else ""


def render_tuning(tuning: Mapping[str, Any]) -> list[str]:
    """How the default policy's thresholds were chosen on the dev split, with each grey zone."""
    review = (
        f" at most {_pct(tuning['max_review'])} sent to review (got"
        f" {_pct(tuning['dev_benign_review_rate'])}),"
        if "max_review" in tuning
        else ""
    )
    lines = [
        f"Thresholds (`moderator/default_policy.toml` v{tuning.get('policy_version')}):"
        f" nudge {tuning['nudge']}, block {tuning['block']} (insult block at least 0.9),"
        f" chosen among {tuning['pairs_tried']} pairs on the dev split: at most"
        f" {_pct(tuning['max_flag'])} of {tuning.get('dev_benign_lines')} chat-like dev"
        f" lines flagged (got {_pct(tuning['dev_benign_flag_rate'])}),{review} at most"
        f" {_pct(tuning['max_block'])} blocked (got {_pct(tuning['dev_benign_block_rate'])}),"
        f" then the most real toxic dev lines caught ({_pct(tuning['dev_toxic_recall'])} of"
        f" {tuning.get('dev_toxic_lines')}).",
    ]
    grey = tuning.get("grey")
    if grey is None:
        return lines
    lines += [
        "",
        "The labels that can hurt most have a grey zone below their block threshold, sent to"
        " `review` (a human should look) while the review limit holds, else to `nudge`. Dev"
        " figures: the lines only the grey zone flags, and the toxic dev lines of the label's own"
        " family (the Perspective attribute it rates highest after toxicity) caught with and"
        " without it.",
        "",
        "| label | grey zone | from | block from | benign dev flagged by it alone"
        " | toxic dev flagged by it alone | own family caught (without the grey zone) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for label, g in grey.items():
        family = (
            f"{g['dev_family_caught']} of {g['dev_family_lines']}"
            f" ({g['dev_family_caught_without']})"
            if g.get("dev_family_lines")
            else "no dev lines"
        )
        lines.append(
            f"| {label} | `{g['action']}` | {g['threshold']:g} | {g['block']:g}"
            f" | {g['dev_benign_added']} | {g['dev_toxic_added']} | {family} |"
        )
    lines += [f"| {label} | none: every threshold below block costs benign lines | | | | | |"
              for label in tuning.get("no_grey", [])]  # fmt: skip
    return lines


def _labelled_targets(ours: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """Issue 27's targets on the labelled research data's test split (our int8 model)."""
    pooled = ours.get("labelled", {}).get("pooled")
    if not pooled:
        return []
    hateful, threat, neutral = (pooled[k] for k in ("hateful", "threat", "group_neutral"))
    short = threat["lines"] < realeval.THREAT_SET_MIN
    return [
        (
            f"hateful lines of the labelled sources caught >= 85% ({hateful['lines']} lines)",
            _pct(hateful["flagged"]),
            hateful["flagged"] >= 0.85,
        ),
        (
            f"neutral statements about groups (ToxiGen) flagged <= 5% ({neutral['lines']} lines)",
            _pct(neutral["flagged"]),
            neutral["flagged"] <= 0.05,
        ),
        (
            f"held-out real threats caught >= 85% ({threat['lines']} lines"
            + (
                f", fewer than the {realeval.THREAT_SET_MIN} asked: all the sources hold"
                if short
                else ""
            )
            + ")",
            _pct(threat["flagged"]),
            threat["flagged"] >= 0.85,
        ),
    ]


def render_real(real: Mapping[str, Any], tuning: Mapping[str, Any] | None) -> list[str]:
    """The real-text section: targets, side by side, identity probe, worst mistakes."""
    names = list(real["scorers"])
    lines = [
        "## Real text (test splits: never trained on, never used to choose a threshold)",
        "",
        "Human-written text from the sources in `models/DATA.md`, split by a hash of each line:"
        " train (fine-tuning), dev (the policy's thresholds), test (this section only). Our"
        " model is judged by the default policy's action (flagged = any action but `allow`:"
        " `nudge`, `review` or `block`); a"
        " teacher, which has no policy, by its own rule (flagged = its toxicity score >= 0.5)."
        " The benign pools are unlabelled real conversation, so every flag on them counts as a"
        " false positive, even on the few lines that are in fact rude.",
        "",
    ]
    if tuning:
        lines += [*render_tuning(tuning), ""]
    lines += ["### Targets (int8, the model the runtime loads)", "", *_targets(real), ""]
    lines += [
        "### Side by side",
        "",
        "| figure (lines) | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines += [f"| {title} | " + " | ".join(cells) + " |" for title, cells in _real_rows(real)]
    lines.append("")
    for name, t in real.get("teachers", {}).items():
        lines.append(f"- `{name}`: {t['version']}; {t['provenance']}")
    probe = "### Identity terms (Dixon et al. 2018 style probe, `models/lines/identity.py`)"
    lines += ["", probe, ""]
    counts = real["identity_lines"]
    lines += [
        f"{counts['benign']} benign and {counts['hostile']} hostile sentences: every template"
        " filled with every identity term. Written for this report; never trained on.",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    idn = real["identity"]
    for key, title in (
        ("benign_flagged", "benign flagged, all terms"),
        ("worst_term_benign_flagged", "benign flagged, worst term"),
        ("hostile_caught", "hostile caught, all terms"),
        ("worst_term_hostile_caught", "hostile caught, worst term"),
    ):
        lines.append(f"| {title} | " + " | ".join(_pct(idn[n][key]) for n in names) + " |")
    lines += ["", "Per term (benign flagged / hostile caught):", ""]
    lines += ["| term | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for term in idn[names[0]]["per_term"]:
        cells = [
            f"{_pct(idn[n]['per_term'][term]['benign_flagged'])} /"
            f" {_pct(idn[n]['per_term'][term]['hostile_caught'])}"
            for n in names
        ]
        lines.append(f"| {term} | " + " | ".join(cells) + " |")
    ours = idn["int8"]
    for key, title in (
        ("benign_flagged_examples", "Benign probe sentences flagged (int8)"),
        ("hostile_missed_examples", "Hostile probe sentences missed (int8)"),
    ):
        lines += ["", f"{title}: " + ("; ".join(f"'{t}'" for t in ours[key]) or "none") + "."]
    worst = real["scorers"]["int8"].get("worst", {})
    for key, title in (
        ("false_positives", "The 20 surest false positives on chat-like test text (int8)"),
        ("false_negatives", "The 20 surest misses on real toxic test text (int8)"),
    ):
        lines += [
            "",
            f"### {title}",
            "",
            "| text | source | family | score | reason |",
            "|---|---|---|---|---|",
        ]
        for r in worst.get(key, []):
            text = " ".join(r["text"].split()).replace("|", "\\|")[:200]
            lines.append(
                f"| {text} | {r['source']} | {r['family']} | {r['score']:.3f} |"
                f" {r['reason'] or ''}{_marked(r)} |"
            )
    lines.append("")
    return lines
