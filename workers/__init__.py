"""Workers: pure extractors (one folder per modality), the shared request runner
(:mod:`mediafleet.workers.runner`), the extractor table (:mod:`mediafleet.workers.extractor`) and the Celery app with its
thin task shell (:mod:`mediafleet.workers.app`). Import the module you need; this package imports nothing, so
a PDF-only worker never loads another modality's engine.
"""
