"""The provider's ``airflow pathways`` commands (provider info ``cli``; Airflow's CLI loads
providers' commands from 3.2; before, ``python -m airflow_provider_pathways.cli`` runs the same):
``sweep-gke`` and ``sweep-slurm`` list the jobs this provider made in a cluster, with each one's
task instance and its state, and end those no task instance follows any more
(:mod:`airflow_provider_pathways.sweep`)."""

from __future__ import annotations

import argparse
import logging
from typing import Any


def get_cli_commands() -> list[Any]:
    """The ``pathways`` command group (imports no client library: Airflow builds its parser at
    every CLI start)."""
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

    dry_run = Arg(("--dry-run",), action="store_true", help="Report what would be ended; end nothing")
    dag_id = Arg(
        ("--dag-id",),
        action="append",
        help="Sweep only this DAG's jobs (repeat for several; default: every DAG's)",
    )
    sweep_gke = ActionCommand(
        name="sweep-gke",
        help="End the PathwaysJobs and JobSets no task instance follows any more",
        description=(
            "Lists the jobs this provider made in the namespaces (their owner labels) that have not ended, "
            "with each one's task instance and its state, and deletes those whose task instance ended or no "
            "longer exists, unless its task leaves it running then (wait_until created/ready, delete_on). "
            "Each delete names the UID and resourceVersion it judged. --dry-run ends nothing."
        ),
        func=lazy_load_command("airflow_provider_pathways.cli.sweep_gke_command"),
        args=(
            Arg(
                ("--conn-id",),
                default="kubernetes_default",
                help="The Pathways-on-GKE or cncf-kubernetes connection (default: kubernetes_default)",
            ),
            Arg(
                ("--namespace",),
                action="append",
                help="A namespace to sweep (repeat for several; default: the connection's, then default)",
            ),
            dag_id,
            dry_run,
        ),
    )
    sweep_slurm = ActionCommand(
        name="sweep-slurm",
        help="Cancel the Slurm jobs no task instance follows any more",
        description=(
            "Lists the active jobs of the connection's user that this provider submitted (the marker in "
            "their comment), with each one's task instance and its state, and cancels those whose task "
            "instance ended or no longer exists, unless its task leaves them running then (a Pathways "
            "service once ready, cancel_on_kill=False); a Pathways service job with its worker array. "
            "--dry-run cancels nothing."
        ),
        func=lazy_load_command("airflow_provider_pathways.cli.sweep_slurm_command"),
        args=(
            Arg(
                ("--conn-id",),
                default="pathways_slurm_default",
                help="The Pathways-on-Slurm connection (default: pathways_slurm_default)",
            ),
            dag_id,
            dry_run,
        ),
    )
    return [
        GroupCommand(
            name="pathways",
            help="Find and end the Pathways jobs no task instance follows any more",
            subcommands=(sweep_gke, sweep_slurm),
        )
    ]


def sweep_gke_command(args: argparse.Namespace) -> None:
    """``airflow pathways sweep-gke``: print the sweep's table."""
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
    from airflow_provider_pathways.operators.sweep import sweep_gke
    from airflow_provider_pathways.sweep import report

    hook = PathwaysJobHook(kubernetes_conn_id=args.conn_id)
    try:
        namespaces = args.namespace or [hook.resolve_namespace(None)]
        swept = sweep_gke(
            hook, namespaces, dry_run=args.dry_run, log=logging.getLogger(__name__), dag_ids=args.dag_id
        )
    finally:
        hook.close()
    if args.dry_run:
        print("Dry run: nothing was ended")
    print(report(swept))


def sweep_slurm_command(args: argparse.Namespace) -> None:
    """``airflow pathways sweep-slurm``: print the sweep's table."""
    from airflow_provider_pathways.hooks.slurm import SlurmHook
    from airflow_provider_pathways.operators.sweep import sweep_slurm
    from airflow_provider_pathways.sweep import report

    hook = SlurmHook(slurm_conn_id=args.conn_id)
    try:
        swept = sweep_slurm(hook, dry_run=args.dry_run, log=logging.getLogger(__name__), dag_ids=args.dag_id)
    finally:
        hook.close()
    if args.dry_run:
        print("Dry run: nothing was cancelled")
    print(report(swept))


def main(argv: list[str] | None = None) -> None:
    """``python -m airflow_provider_pathways.cli <command>``: the ``airflow pathways`` commands
    where Airflow's CLI does not load providers' commands (before 3.2)."""
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_pathways.cli")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in get_cli_commands()[0].subcommands:
        sub = commands.add_parser(command.name, help=command.help, description=command.description)
        for arg in command.args:
            arg.add_to_parser(sub)
        sub.set_defaults(func=command.func)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
