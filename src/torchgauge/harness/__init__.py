"""Measuring only: timer, memory, environment, profiler breakdown, FLOPs, coverage.

The harness returns raw samples and plain dicts; it never prints, stores or judges.
Metric modules are imported here explicitly so that they register themselves; import order
is registration order, which is the order ``compare`` and the reports list quantities in.
"""

# isort: off
from . import metrics  # noqa: F401  (the registry and the timed pass's quantities first)
from . import api_coverage  # noqa: F401  (registers the "coverage" metric)
from . import breakdown  # noqa: F401  (registers the "breakdown" metric; torch-free until it runs)
from . import instructions, op_counts, flops, leak  # noqa: F401  (counting metrics; this order is compare's)
from . import tensor_memory  # noqa: F401  (registers the "tensor_memory" metric: live CPU tensor bytes)
# isort: on
