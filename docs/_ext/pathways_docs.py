"""Sphinx directives that make tables from the code, so that the documentation cannot drift from it.

``pathways-conn-fields``: connection form fields from ``provider_info``, as the Airflow UI shows
them (label, help text, default, choices). Every field of every connection type must appear in some
table: a field left out is a warning (an error with ``-W``).

``pathways-airflow-features``: what the provider does with and without each Airflow feature it uses
(``airflow_features.FEATURES``).
"""

from __future__ import annotations

import json
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

from airflow_provider_pathways.airflow_features import FEATURES
from airflow_provider_pathways.provider_info import get_provider_info

logger = logging.getLogger(__name__)


def _connection_types() -> dict[str, dict[str, Any]]:
    return {conn["connection-type"]: conn for conn in get_provider_info()["connection-types"]}


def _literal(value: Any) -> str:
    return "``" + json.dumps(value) + "``"


def _cell(text: str) -> str:
    return text.replace("\n", " ").replace("|", "\\|").strip() or "\\-"


class ConnFieldsDirective(SphinxDirective):
    """``.. pathways-conn-fields:: pathways_slurm`` with an optional ``:fields:`` list (in order)."""

    required_arguments = 1
    option_spec = {"fields": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        conn_type = self.arguments[0]
        conn = _connection_types().get(conn_type)
        if conn is None:
            raise self.error(f"unknown connection type {conn_type!r}")
        fields: dict[str, Any] = conn["conn-fields"]
        names = [n.strip() for n in self.options.get("fields", "").split(",") if n.strip()] or list(fields)
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise self.error(f"{conn_type} has no fields {unknown}")
        lines = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 18 22 14 46",
            "",
            "   * - Extra key",
            "     - Label in the form",
            "     - Default",
            "     - Meaning",
        ]
        for name in names:
            field = fields[name]
            schema = field.get("schema", {})
            default = _literal(schema["default"]) if schema.get("default") is not None else "unset"
            meaning = field.get("description") or ""
            if "enum" in schema:
                shown = schema.get("values_display", {})
                keys = ["null" if v is None else str(v) for v in schema["enum"]]
                choices = ", ".join(
                    _literal(v) + (f" ({shown[k]})" if k in shown else "")
                    for v, k in zip(schema["enum"], keys, strict=True)
                )
                meaning += f" Choices: {choices}."
            if schema.get("format") == "password":
                meaning += " Stored as a secret and masked in the UI and in logs."
            lines += [
                f"   * - ``{name}``",
                f"     - {_cell(field.get('label', ''))}",
                f"     - {default}",
                f"     - {_cell(meaning)}",
            ]
            self.env.pathways_conn_fields.setdefault(self.env.docname, set()).add((conn_type, name))
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]), container)
        return container.children


class AirflowFeaturesDirective(SphinxDirective):
    """``.. pathways-airflow-features::``: one row per Airflow feature the provider uses."""

    def run(self) -> list[nodes.Node]:
        lines = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 16 10 37 37",
            "",
            "   * - Feature",
            "     - Since Airflow",
            "     - With it",
            "     - Before it",
        ]
        for feature in FEATURES:
            lines += [
                f"   * - {_cell(feature.name)}",
                f"     - {feature.since}",
                f"     - {_cell(feature.with_it)}",
                f"     - {_cell(feature.without)}",
            ]
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]), container)
        return container.children


def _purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    getattr(env, "pathways_conn_fields", {}).pop(docname, None)


def _init(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    if not hasattr(env, "pathways_conn_fields"):
        env.pathways_conn_fields = {}


def _check_every_field_documented(app: Sphinx, env: BuildEnvironment) -> None:
    seen = set().union(*getattr(env, "pathways_conn_fields", {}).values())
    for conn_type, conn in _connection_types().items():
        for name in conn["conn-fields"]:
            if (conn_type, name) not in seen:
                logger.warning("connection field %s.%s is in no pathways-conn-fields table", conn_type, name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("pathways-conn-fields", ConnFieldsDirective)
    app.add_directive("pathways-airflow-features", AirflowFeaturesDirective)
    app.connect("env-before-read-docs", _init)
    app.connect("env-purge-doc", _purge)
    app.connect("env-check-consistency", _check_every_field_documented)
    return {"version": "1", "parallel_read_safe": False, "parallel_write_safe": True}
