"""Operators of the Pathways provider."""
