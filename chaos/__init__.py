"""Chaos runs: real moderator processes, real faults, nothing lost (`python -m chaos`).

Each scenario starts its own embedded Tansu broker and Redis, runs `python -m moderator run` as
child processes, drives open-loop traffic with `loadgen.runner.run_load`, injects one fault
(a signal to a process, a dependency stopped or frozen, a broker that refuses decisions, a
burst of overload or of hostile records) and checks what came out of the decisions and
dead-letter topics. `report.py` turns the results into RELIABILITY.md.
"""
