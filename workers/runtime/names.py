"""The names a fleet task's messages and results carry: the task, the summary's keys, the header
its consumer adds."""

__all__ = ["EXTRACT_TASK", "IN_RECORD", "PUBLISHED", "TAKEN_HEADER"]

EXTRACT_TASK = "mediafleet.extract"
IN_RECORD = "in_record"
"""The task summary's key saying the job's record holds its outcome and its waiters were woken."""
PUBLISHED = "progress_published"
"""The task summary's key saying the task published progress (stored as its result meanwhile)."""

# The header a fleet task's message gets from the consumer that counted its delivery as it took it
# (:class:`_FleetQoS`): [the delivery's number, the record's state before it, the parts (name -> job
# id)], what :meth:`mediafleet.fleet.store.JobStore.start` gives. Only that consumer sets it: any other
# value is removed before the message goes further.
TAKEN_HEADER = "mediafleet_taken"
