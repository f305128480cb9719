"""Triggers of the Pathways provider."""
