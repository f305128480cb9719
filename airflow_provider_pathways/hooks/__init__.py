"""Hooks of the Pathways provider."""
