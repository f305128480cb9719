"""Errors of the compilation-cache cleanup."""

from __future__ import annotations


class CacheCleanupError(Exception):
    """A cleanup could not run (missing bucket, no permission, server refused a change)."""


class BucketNotFoundError(CacheCleanupError):
    """The bucket does not exist or the credentials cannot see it."""
