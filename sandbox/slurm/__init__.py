"""The sandbox Slurm cluster: start it with ``up.sh``; Python helpers for its settings."""
