"""Every threshold and operator set of the bug rules, one named constant each.

The letter in each comment is the rule family it tunes (see :mod:`torchgauge.workflows.diagnose.rules`).
"""

from __future__ import annotations

__all__ = [
    "EXCEPTION_MIN_PER_STEP",
    "FOREACH_OPS",
    "HEAVY_TRAFFIC_MIN_BYTES",
    "HEAVY_TRAFFIC_RATIO",
    "HOST_READ_OPS",
    "HOST_STATE_PATHS",
    "IDLE_GAP_US",
    "IDLE_MIN_FRACTION",
    "IDLE_MIN_STEP_FRACTION",
    "STORM_MAX_GAP_US",
    "STORM_MAX_PERIOD",
    "STORM_MIN_REPEATS",
    "SYNC_OPS",
    "SYNC_WRAPPERS",
    "TINY_COPY_BYTES",
    "TINY_OP_US",
]

# (a) A host operator shorter than this (median over the repetitions) is launch/dispatch-bound work.
TINY_OP_US = 30.0
# (a) Repetitions of one operator pattern, back to back, that make a storm.
STORM_MIN_REPEATS = 16
# (a) Longest pattern (operators per repetition) searched; a per-tensor loop body is short.
STORM_MAX_PERIOD = 8
# (a) Calls are "back to back" when the median host gap between them is at most this.
STORM_MAX_GAP_US = 200.0
# (b) A host-to-device copy at most this large is a "tiny" one (scalars, small lists).
TINY_COPY_BYTES = 1024
# (c) Host-device bytes per step below this are never "large" traffic.
HEAVY_TRAFFIC_MIN_BYTES = 1 << 20
# (c) Copy time per step over compute time per step that makes traffic "heavy".
HEAVY_TRAFFIC_RATIO = 0.25
# (d) Operators that make the host wait for the device's result.
SYNC_OPS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::equal",
    }
)
# (d) Python-facing operators that end in one of SYNC_OPS (``.item()``, ``bool(t)``, ``.tolist()``).
SYNC_WRAPPERS = frozenset({"aten::item", "aten::is_nonzero", "aten::tolist"})
# (d) Code whose scalar reads are of host-resident state by design (optimizer step counts).
HOST_STATE_PATHS = ("torch/optim/",)
# (d) Host reads of a whole tensor's data (``.tolist()``, ``.numpy()``): on a CPU they reach
# the profiler only as these conjugate/negative-bit resolutions; on a device they are a copy
# to the host and a synchronisation.
HOST_READ_OPS = frozenset({"aten::resolve_conj"})
# (a) Foreach kernels that exist in every supported torch (>= 2.4): a storm hint names one only
# if it is here (tests check each resolves on torch).
FOREACH_OPS = frozenset(
    {
        "_foreach_abs",
        "_foreach_abs_",
        "_foreach_add",
        "_foreach_add_",
        "_foreach_addcdiv",
        "_foreach_addcdiv_",
        "_foreach_addcmul",
        "_foreach_addcmul_",
        "_foreach_clamp_max",
        "_foreach_clamp_max_",
        "_foreach_clamp_min",
        "_foreach_clamp_min_",
        "_foreach_copy_",
        "_foreach_div",
        "_foreach_div_",
        "_foreach_exp",
        "_foreach_exp_",
        "_foreach_lerp",
        "_foreach_lerp_",
        "_foreach_log",
        "_foreach_log_",
        "_foreach_maximum",
        "_foreach_maximum_",
        "_foreach_minimum",
        "_foreach_minimum_",
        "_foreach_mul",
        "_foreach_mul_",
        "_foreach_neg",
        "_foreach_neg_",
        "_foreach_norm",
        "_foreach_pow",
        "_foreach_pow_",
        "_foreach_reciprocal",
        "_foreach_reciprocal_",
        "_foreach_sigmoid",
        "_foreach_sigmoid_",
        "_foreach_sign",
        "_foreach_sign_",
        "_foreach_sqrt",
        "_foreach_sqrt_",
        "_foreach_sub",
        "_foreach_sub_",
        "_foreach_zero_",
    }
)
# (f) Raised-and-caught operator calls per step that make a finding: any (a raise on the hot
# path costs a C++ backtrace each time and is never needed).
EXCEPTION_MIN_PER_STEP = 1
# (e) A stretch with no device work (CPU: no operator) at least this long is a gap.
IDLE_GAP_US = 1000.0
# (e) Gaps with one cause are reported only when together they are at least this fraction of the window.
IDLE_MIN_FRACTION = 0.05
# (e) ... and only when they recur in at least this fraction of the steps (a bug in the step
# recurs every step; a one-off scheduler or GC pause does not).
IDLE_MIN_STEP_FRACTION = 1.0
