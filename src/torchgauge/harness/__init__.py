"""Measuring only: timer, memory, environment, profiler breakdown, FLOPs, coverage.

The harness returns raw samples and plain dicts; it never prints, stores or judges.
Metric modules are imported here explicitly so that they register themselves.
"""

from . import metrics  # noqa: F401  (the registry first; metric modules below register into it)
from . import api_coverage  # noqa: F401,E402  (registers the "coverage" metric)
from . import breakdown  # noqa: F401,E402  (registers the "breakdown" metric; torch-free until it runs)
from . import instructions, op_counts, flops, leak  # noqa: F401,E402  (counting metrics; this order is compare's)
