"""Module-level app for ``celery -A workers.celery_app`` and Flower; settings from the environment."""

from mediafleet.settings import Settings
from workers.app import create_app

app = create_app(Settings.load())
