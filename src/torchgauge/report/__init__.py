"""Presenting results: tables, Markdown and charts. No measuring, no judging."""
