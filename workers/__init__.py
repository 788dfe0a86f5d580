"""Workers: pure extractors (one folder per modality, each with its ``spec.py``), the modality
spec (:mod:`mediafleet.modalities.spec`) and the registered specs (:mod:`mediafleet.modalities.registry`),
the shared request runner (:mod:`mediafleet.workers.runner`), the task middleware
(:mod:`mediafleet.workers.runtime.middleware`), worker boot (:mod:`mediafleet.workers.runtime.boot`) and the Celery
app with its thin task shell (:mod:`mediafleet.workers.runtime.config`). Import the module you need; this
package imports nothing, so a PDF-only worker never loads another modality's engine.
"""
