"""What the tests share: running DAGs, the Airflow version, the machine, the stand-ins' helpers."""
