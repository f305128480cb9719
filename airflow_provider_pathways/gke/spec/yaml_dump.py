"""YAML output of manifests (block style for multi-line strings)."""

from __future__ import annotations

import yaml


class BlockDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


BlockDumper.add_representer(str, _represent_str)
