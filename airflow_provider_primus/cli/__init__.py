"""The ``primus`` command line: the core without Airflow."""
