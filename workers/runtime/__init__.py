"""The Celery runtime around the pure extractors: the app and its task shell (:mod:`.config`), a
job's message (:mod:`.message`), the kombu transport (:mod:`.transport`), the worker's consumer
(:mod:`.consumer`), the result backend (:mod:`.backend`), the middleware every delivery goes through
(:mod:`.middleware`) and a worker's lifecycle (:mod:`.boot`)."""
