"""Open-loop load generator for the chat moderation stream processor.

`run_load(LoadConfig(...))` drives one run and returns a `LoadSummary`; `find_max(...)` searches
for the highest rate whose p99 stays within the budget; `format_summary` prints a summary.
"""

from loadgen.config import LoadConfig
from loadgen.hop import HopResult, measure_hop
from loadgen.runner import Progress, run_load
from loadgen.schedule import Arrivals
from loadgen.search import MaxResult, Step, find_max
from loadgen.summary import LoadSummary, format_summary

__all__ = [
    "Arrivals",
    "HopResult",
    "LoadConfig",
    "LoadSummary",
    "MaxResult",
    "Progress",
    "Step",
    "find_max",
    "format_summary",
    "measure_hop",
    "run_load",
]
