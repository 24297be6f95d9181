"""Workloads: the phases of a study and the operation streams they time."""
