"""The Slurm domain, free of Airflow and of network libraries (the hooks in
:mod:`airflow_provider_pathways.hooks` carry these values over slurmrestd or SSH):

- :mod:`.job`: one job as the cluster reports it (states, field values, ``scontrol -o show job``
  records); :mod:`.outcome`: what its state means (outcome and failure class, lost slices, stuck
  jobs);
- :mod:`.rest`: slurmrestd JSON (records, errors, the submit body); :mod:`.accounting`: records
  from slurmdbd or ``sacct``;
- :mod:`.submit`: a submission, its sbatch options and ``#SBATCH`` directives, the operators'
  arguments;
- :mod:`.service`: the Pathways service (its ``cluster.env``, which service job wrote it, one look
  at it);
- :mod:`.settings`, :mod:`.transport`, :mod:`.errors`: the connection, the interface both
  transports implement, and errors by cause with which are worth retrying.
"""
