"""Building blocks shared across domains; no model is registered here.

A domain imports its own modules and these, never another domain's (``tests/models/test_import_graph.py``
checks it): a block that a second domain needs moves here.
"""
