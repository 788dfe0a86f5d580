"""Workers: pure extractors, the shared request runner and the Celery task shell around it."""

from workers.extractor import EXTRACTORS, Extractor, load_extractor
from workers.runner import run_request

__all__ = ["EXTRACTORS", "Extractor", "load_extractor", "run_request"]
