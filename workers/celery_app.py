"""Module-level app for ``celery -A mediafleet.workers.celery_app`` and Flower; settings from the environment."""

from mediafleet.settings import Settings
from mediafleet.workers.app import create_app

app = create_app(Settings.load())
