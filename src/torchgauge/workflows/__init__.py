"""Workflows: procedures built from planning (:mod:`torchgauge.config`), running
(:mod:`torchgauge.runner`), storing and judging. Each module is one workflow that a ``cli``
command (or a notebook) calls: suite_run, confirm, bisect, tune_batch, scale, coverage,
compare_backends, diagnose, trace_analysis."""
