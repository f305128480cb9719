"""The provider's Airflow UI plugins."""
