"""What every delivery of a fleet job goes through, around the pure runner, in the style of dramatiq:
:mod:`.delivery` (the delivery, the hooks, the runner of a chain) and one module per concern, put in
order by :func:`.chain.fleet_middleware`. Each middleware is tested on its own against a real Redis
(``tests/test_middleware.py``, ``tests/test_release_check.py``); none imports Celery."""
