"""Sensors of the Pathways provider."""
