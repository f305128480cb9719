"""The Slurm domain: jobs and their states, outcomes, the record formats of slurmrestd, scontrol
and accounting, submissions and their options, and the Pathways service's ``cluster.env``.

Free of Airflow and of network libraries: the hooks in :mod:`airflow_provider_pathways.hooks`
carry these values over slurmrestd or SSH.
"""
