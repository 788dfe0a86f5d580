"""The fleet's job state in Redis: the store, the record read model, the Lua transitions, the
workers' presence and the job reports. Every change of a job's record is made here, and only here."""
