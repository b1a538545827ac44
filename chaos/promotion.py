"""The promotion scenario: a moderator SIGKILLed just after an operator's `moderator rollout
promote`, while load flows through two instances that run the shipped model beside a candidate.

A switch is no rebalance (README, "Promote and roll back"), but a SIGKILL at the switch is one:
the killed instance's partitions go to the survivor, which switches on the record, and to the
restarted instance, which reads the record before its first fetch. The ledger must show every
input decided, and every decision of a message sent once both run the candidate carrying the
candidate's `model`; in each partition the deciding model changes once and never back.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.ledger import Ledger
from chaos.results import ScenarioResult, now_ms
from chaos.stage import Stage, traffic_and_finish
from devstack.candidate import candidate_model
from devstack.child import ModeratorChild
from moderator.decide.classifier import ModelInfo

if TYPE_CHECKING:
    from chaos.scenarios import Context

OPERATOR = "chaos"
SWITCHED_LOG = "s after the record"  # shadow/switch.py's line once a record is in effect
SWITCH_WAIT_S = 60.0  # the survivor's switch: the target is 10 s, this only bounds a hang


def first_models_by_partition(lg: Ledger) -> dict[int, list[str]]:
    """Each partition's first decisions' models, in offset order (the order of its messages)."""
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for mid, inp in lg.inputs.items():
        if mid in lg.models:
            out[inp.partition].append((inp.offset, lg.models[mid][0]))
    return {p: [model for _, model in sorted(rows)] for p, rows in sorted(out.items())}


def switched_back(models: list[str], promoted: str) -> bool:
    """Whether another model decided after `promoted` first did."""
    if promoted not in models:
        return False
    return any(model != promoted for model in models[models.index(promoted) :])


def models_sent_since(lg: Ledger, since_ms: float) -> Counter[str]:
    """The models of every decision (repeats included) of the inputs sent at or after
    `since_ms`."""
    return Counter(
        model
        for mid, inp in lg.inputs.items()
        if inp.sent_at_ms >= since_ms
        for model in lg.models.get(mid, ())
    )


async def promote(st: Stage, shadow: Path, rollout_topic: str) -> None:
    """`moderator rollout promote` as an operator runs it, given both model directories."""
    env = st.env(shadow_model=str(shadow), rollout_topic=rollout_topic).env()
    argv = ["-m", "moderator", "rollout", "promote", "--operator", OPERATOR]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *argv, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"rollout promote exited {proc.returncode}: {out.decode()[-500:]}")


async def switched(proc: ModeratorChild) -> float:
    """Wait until `proc` counts a switching rollout record; when (wall-clock ms)."""
    deadline = now_ms() + SWITCH_WAIT_S * 1000
    while now_ms() < deadline:
        if (await asyncio.to_thread(proc.metric, "moderator_rollout_records_total",
                                    result="switched") or 0) >= 1:  # fmt: skip
            return now_ms()
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{proc.name} did not switch within {SWITCH_WAIT_S:g} s")


def serves(proc: ModeratorChild, ident: str) -> bool:
    """Whether `proc`'s moderator_model_info names `ident` (name@version) and no other."""
    name, version = ident.split("@", 1)
    samples = proc.scrape()
    info = "moderator_model_info"
    return samples is not None and (samples.by(info, "name"), samples.by(info, "version")) == (
        {name: 1.0},
        {version: 1.0},
    )


async def promotion_kill(ctx: Context, res: ScenarioResult) -> None:
    p = ctx.plan
    with tempfile.TemporaryDirectory(prefix="chaos-candidate-") as tmp:
        shadow = candidate_model(Path(tmp))
        primary, promoted = ModelInfo.load(ctx.model_dir).ident, ModelInfo.load(shadow).ident
        async with ctx.stage("promote") as st:
            rollout_topic = f"{st.names.in_topic}.rollout"
            env = st.env(shadow_model=str(shadow), rollout_topic=rollout_topic, shadow_topic="")
            a, b = await asyncio.gather(st.start("a", env), st.start("b", env))
            load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.after_kill_s))
            await asyncio.sleep(p.fault_at_s)
            record_ms = now_ms()
            await promote(st, shadow, rollout_topic)
            written_ms = now_ms()
            a.kill()
            killed_ms = now_ms()
            restarted = st.spawn("a2", env)  # restarted at once, as a supervisor would
            b_switched_ms = await switched(b)
            ready_s = await asyncio.to_thread(restarted.wait_ready)
            both_ms = max(b_switched_ms, now_ms())
            decided_before = [x.metric("moderator_decisions_total") or 0.0 for x in (b, restarted)]
            await traffic_and_finish(st, res, load, killed_ms)
            decided_after = [x.metric("moderator_decisions_total") or 0.0 for x in (b, restarted)]
            _checks(res, st.obs.ledger, primary, promoted, record_ms, both_ms)
            res.check("the survivor and the restarted instance serve the promoted model",
                      all(serves(x, promoted) for x in (b, restarted)),
                      f"b {serves(b, promoted)}, a2 {serves(restarted, promoted)}")  # fmt: skip
            res.check("both decided messages once both ran the promoted model",
                      all(n > m for n, m in zip(decided_after, decided_before, strict=True)),
                      f"b {decided_before[0]:.0f} → {decided_after[0]:.0f}, a2 "
                      f"{decided_before[1]:.0f} → {decided_after[1]:.0f}")  # fmt: skip
            delay = b.metric("moderator_rollout_switch_delay_seconds")
            res.figure("`rollout promote` started → exited 0 (the record acknowledged)",
                       f"{written_ms - record_ms:.0f} ms")  # fmt: skip
            res.figure("its exit → SIGKILL of a", f"{killed_ms - written_ms:.0f} ms")
            res.figure("a had switched when killed (its log)",
                       "yes" if SWITCHED_LOG in a.output() else "no")  # fmt: skip
            res.figure("record → b switched (its moderator_rollout_switch_delay_seconds)",
                       "-" if delay is None else f"{delay:.2f} s")  # fmt: skip
            res.figure("restart to ready (a2, the record applied before its first fetch)",
                       f"{ready_s:.2f} s")  # fmt: skip
            res.notes.append(
                f"Two moderators with the shipped model ({primary}) deciding and the candidate "
                f"of devstack/candidate.py ({promoted}: the same graph, its manifest naming two "
                f"outputs the other way round and reading Spanish) as shadow; {p.fault_at_s:g} s "
                f"into the traffic `moderator rollout promote --operator {OPERATOR}` wrote the "
                "record, and as soon as it was acknowledged one moderator was SIGKILLed and "
                "started again at once."
            )
            if not res.passed:
                res.logs.extend(
                    (f"{x.name} (pid {x.pid})", x.output(25)) for x in (a, b, restarted)
                )


def _checks(
    res: ScenarioResult, lg: Ledger, primary: str, promoted: str, record_ms: float, both_ms: float
) -> None:
    before = Counter(lg.models[mid][0] for mid, inp in lg.inputs.items()
                     if mid in lg.models and lg.first_ms[mid] < record_ms)  # fmt: skip
    after = models_sent_since(lg, both_ms)
    partitions = first_models_by_partition(lg)
    back = [p for p, models in partitions.items() if switched_back(models, promoted)]
    res.figure("first decisions before the record, by model", _counts(before))
    res.figure("decisions of messages sent once both ran the promoted model, by model",
               _counts(after))  # fmt: skip
    res.figure(
        "first decisions by the promoted model, per partition",
        " ".join(f"p{p}:{m.count(promoted)}/{len(m)}" for p, m in partitions.items()),
    )
    res.check("before the record, the shipped model decided", set(before) == {primary},
              _counts(before))  # fmt: skip
    res.check("once both switched, every decision carries the promoted model's id",
              sum(after.values()) > 0 and set(after) == {promoted}, _counts(after))  # fmt: skip
    res.check("in each partition the deciding model changed once, never back",
              not back and all(promoted in m for m in partitions.values()),
              f"back in {back}" if back else "")  # fmt: skip


def _counts(models: Counter[str]) -> str:
    return ", ".join(f"{m} {n}" for m, n in models.most_common()) or "none"
