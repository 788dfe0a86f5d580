"""Module-level app for ``celery -A mediafleet.workers.celery_app`` (Flower, ``inspect ping``);
settings from the environment.

Workers start with ``mediafleet worker`` (:func:`mediafleet.workers.runtime.boot.boot_worker`), which
attaches what a fleet worker does besides running tasks: engine configuration in each pool
process, its presence heartbeat, releasing held jobs and recovering a lost node's jobs.
"""

from mediafleet.settings import Settings
from mediafleet.workers.runtime.config import create_app

app = create_app(Settings.load())
