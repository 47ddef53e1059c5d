"""Airflow UI plugin: the Primus job pages served by Airflow's API server (``plugin.PrimusPlugin``).

Importing this package imports nothing heavy; ``app.create_app`` builds the FastAPI app.
"""
