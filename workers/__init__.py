"""Workers: pure extractors (one folder per modality), the shared request runner
(:mod:`workers.runner`), the extractor table (:mod:`workers.extractor`) and the Celery app with its
thin task shell (:mod:`workers.app`). Import the module you need; this package imports nothing, so
a PDF-only worker never loads another modality's engine.
"""
