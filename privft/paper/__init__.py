"""Reproducing the SOFT paper: its published numbers as data, our runs of its protocol, side-by-side tables."""
