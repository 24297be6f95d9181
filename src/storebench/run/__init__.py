"""Carrying out a plan: the runner (one run after another, records appended) and its progress display."""
