"""The search: find the fastest correct placement with few measurements.

- ``candidates.py``: the candidate generators (each device alone, greedy, min-cut, DP + local
  search, random, mutations, every feasible placement);
- ``strategy.py``: the search strategies, one class each behind :func:`create`;
- ``tune.py``: the loop (:func:`tune`): the strategy proposes, the measurer builds, verifies
  and times, every result goes to the records; then the finalists are re-timed alternately
  and the winner declared;
- ``state.py``: what the search knows so far (:class:`SearchState`, :class:`TuneResult`);
- ``records.py``: the placement records (:class:`PlacementRecords`), an append-only JSON-lines
  file, resumable;
- ``report.py``: the report of a search read from its records (:func:`write_report`).

``tune`` measures seed candidates first (the min-cut for two devices and the DP on the
profile, its best guesses, then every device alone and the greedy placement on the fewest
devices whose capacity holds the model), then, while the budget lasts:

- below ``threshold`` measured samples it measures diverse feasible candidates (random
  placements and mutations of the best so far) and would take the best measured (the second
  seed's rule);
- at or past the threshold it trains the XGBoost cost model on all measurements, ranks a large
  pool (mutations of the top candidates, DP/local-search variants, random placements), measures
  the top of the ranking plus a small share of random exploration, and retrains.

Every candidate passes through the runner (verified outputs) and every result into the records;
re-running with the same records measures nothing twice.

Before it declares a winner, ``tune`` builds its ``retime`` best candidates and every
single-device placement measured again and times them alternately in one process
(``retime_rounds`` rounds, best of each): one figure taken at another moment of a busy machine
cannot win by luck. Those figures are recorded too (tag ``source: retime``), and the winner,
the best single device and the speedup come from them. The best single device is any measured
placement that puts every layer on one device, whichever generator proposed it.
"""

from . import candidates
from .records import PlacementRecords, best_placement
from .report import write_report
from .strategy import DEFAULT_THRESHOLD, STRATEGIES, SearchStrategy, create
from .state import SearchState, Trial, TuneResult
from .tune import tune

__all__ = ["DEFAULT_THRESHOLD", "PlacementRecords", "STRATEGIES", "SearchState",
           "SearchStrategy", "Trial", "TuneResult", "best_placement", "candidates", "create",
           "tune", "write_report"]
