"""Analyses and transformations on the tensor IR, one per module."""
