"""Comparisons of results: compiler backends, devices and builds (judging, no measuring)."""
