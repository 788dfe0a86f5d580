"""The ways an admitted job runs: the protocol both implement (:mod:`.protocol`), in this process
(:mod:`.inprocess`) or on the Celery fleet (:mod:`.celery_fleet`, whose jobs are :mod:`.fleet_job`),
and the handle every submission returns (:mod:`.job`)."""
