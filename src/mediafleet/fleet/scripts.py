"""The job record's transitions, as Lua that Redis runs in one step each.

Every change of a job's record (``mediafleet:job:<id>``) that must not race another process is one
of these scripts, which :class:`mediafleet.fleet.store.JobStore` alone registers and runs: a claim
creates a record once, a start makes a delivery its owner, a finish writes one outcome once and
never over another, a report records a part's outcome once, a recovery requeues a lost worker's
job once. Each script's keys and arguments are named in the comment above it.
"""

from __future__ import annotations

__all__ = ["BRIEF", "CLAIM", "FINISH", "LOOK", "RECOVER", "RELEASE", "REPORT", "RESEND", "START", "TAKE", "TASK_RESULT"]


# KEYS[1] record, KEYS[2] the held set, KEYS[3] Celery's result of the job's task, KEYS[4] the presence
# index; ARGV[1] ttl, ARGV[2] job id, ARGV[3] drop hostnames that beat before this, ARGV[4] hostnames
# that beat since this are live, ARGV[5] the presence key prefix, ARGV[6] the held reason, ARGV[7] the
# route: 'live' (the first candidate whose queue a live worker consumes, what
# mediafleet.fleet.presence.live_workers reads, else held as the first), 'queued' or 'held' (as the first
# candidate; presence is not read), ARGV[8] n, then n candidates in the capability's order (queue,
# device, request JSON, the Redis list its message goes on and the message, or '' and '' for none),
# then field/value pairs. Creates the record unless a live one exists; a cancelled job or one that
# failed retryably is replaced, and the result of its earlier task is forgotten (a waiter must not wake
# on it). The message of a queued candidate is pushed onto its list in the same step and the record
# marked sent; a held job's goes nowhere. Returns {1 when created, the candidate taken (1..n; 0:
# held), 1 when its message was pushed}.
CLAIM = """
local state = redis.call('HGET', KEYS[1], 'state')
if state and state ~= 'cancelled' and not (state == 'failed' and redis.call('HGET', KEYS[1], 'retryable') == '1') then
  return {0, 0, 0}
end
local n, route, taken = tonumber(ARGV[8]), ARGV[7], 0
if route == 'queued' then
  taken = 1
elseif route == 'live' then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[3])
  local live = {}
  for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], ARGV[4], '+inf')) do
    local body = redis.call('GET', ARGV[5] .. name)
    if body then
      local ok, worker = pcall(cjson.decode, body)
      if ok and type(worker) == 'table' and type(worker['queues']) == 'table' then
        for _, queue in ipairs(worker['queues']) do live[queue] = true end
      end
    end
  end
  for i = 1, n do
    if live[ARGV[9 + 5 * (i - 1)]] then taken = i break end
  end
end
local at = 9 + 5 * (math.max(taken, 1) - 1)
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('HSET', KEYS[1], unpack(ARGV, 9 + 5 * n))
local pushed = 0
if taken > 0 then
  redis.call('HSET', KEYS[1], 'device', ARGV[at + 1], 'request', ARGV[at + 2], 'state', 'queued', 'held_reason', '')
  if ARGV[at + 4] ~= '' then
    redis.call('LPUSH', ARGV[at + 3], ARGV[at + 4])
    redis.call('HSET', KEYS[1], 'sent', '1')
    pushed = 1
  end
else
  redis.call('HSET', KEYS[1], 'device', ARGV[at + 1], 'request', ARGV[at + 2], 'state', 'held', 'held_reason', ARGV[6])
  redis.call('SADD', KEYS[2], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {1, taken, pushed}
"""


# KEYS[1] record, KEYS[2] the held set; ARGV[1] job id, ARGV[2] the request as released (JSON),
# ARGV[3] now. Moves a held job to queued exactly once; returns its token, or false.
RELEASE = """
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('HGET', KEYS[1], 'state') ~= 'held' then return false end
redis.call('HSET', KEYS[1], 'state', 'queued', 'held_reason', '', 'request', ARGV[2], 'updated_at', ARGV[3],
           'sent', '0')
return redis.call('HGET', KEYS[1], 'token')
"""


# KEYS[1] record; ARGV[1] now, ARGV[2] seconds. A job recorded as queued whose message was never
# sent (its dispatcher died between the record and the send) for longer than ARGV[2]: marked sent
# and its token returned, once, for a resubmission to send it. Otherwise false.
RESEND = """
if redis.call('HGET', KEYS[1], 'state') ~= 'queued' or redis.call('HGET', KEYS[1], 'sent') ~= '0' then
  return false
end
if tonumber(ARGV[1]) - tonumber(redis.call('HGET', KEYS[1], 'updated_at')) < tonumber(ARGV[2]) then return false end
redis.call('HSET', KEYS[1], 'sent', '1', 'updated_at', ARGV[1])
return redis.call('HGET', KEYS[1], 'token')
"""


# KEYS[1] record, KEYS[2] the started set; ARGV[1] hostname, ARGV[2] pid, ARGV[3] now, ARGV[4] the
# message's token, ARGV[5] job id. Counts a delivery and marks the job started, owned by this
# delivery (its number), unless it finished or was cancelled. A message whose token is not the
# record's (left over from a submission that was cancelled and claimed again) is stale: -1.
# Returns {attempts, state before, the parts it fanned out (JSON) or ''}.
START = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {0, '', ''} end
local parts = redis.call('HGET', KEYS[1], 'parts') or ''
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[4] then return {-1, state, parts} end
local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
if state ~= 'cancelled' and state ~= 'done' and state ~= 'failed' then
  redis.call('HSET', KEYS[1], 'state', 'started', 'hostname', ARGV[1], 'pid', ARGV[2], 'updated_at', ARGV[3],
             'owner', attempts)
  redis.call('SADD', KEYS[2], ARGV[5])
elseif state == 'cancelled' and redis.call('HEXISTS', KEYS[1], 'outcome') == 0
       and redis.call('HEXISTS', KEYS[1], 'outcome_ref') == 0 then
  redis.call('HSET', KEYS[1], 'owner', attempts)  -- this delivery writes the cancelled outcome
end
return {attempts, state, parts}
"""


# KEYS[1] record, KEYS[2] the started set, KEYS[3] kombu's index of unacknowledged deliveries (a
# sorted set), KEYS[4] kombu's unacknowledged deliveries (a hash); ARGV[1..5] as START's, ARGV[6]
# the time the message was taken, ARGV[7] its delivery tag, ARGV[8] the delivery as kombu keeps it.
# START as a worker's consumer takes the message, in the step that records the delivery as
# unacknowledged the way kombu's Redis QoS.append does (so the message comes back after the
# visibility timeout unless acknowledged): one round trip where the two were two, one of them in
# the pool process before the job ran. That record is written first: a Redis at its memory limit
# refuses the script at that first write, having written nothing. Returns what START returns.
TAKE = """
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[7])
redis.call('HSET', KEYS[4], ARGV[7], ARGV[8])
""" + START


# KEYS[1] record, KEYS[2] the started set; ARGV[1] the delivery that must own the record ('' for
# any: a joiner, the cancel path), ARGV[2] the attempts the writer saw ('' for any: only the waiter,
# writing a lost task's failure, passes it), ARGV[3] the hostname that delivery ran on ('' for
# any), ARGV[4] job id, ARGV[5] '1' when the outcome is ok, ARGV[6] the ttl when the record names
# none, ARGV[7] '1' to publish on KEYS[3] (the job's finished channel) once written: the record's
# submission token, then ARGV[9] (what a woken waiter of that submission takes the outcome from,
# :meth:`JobStore.noticed`), ARGV[8] '1' to write nothing to a record cancelled meanwhile (returns
# -1: the writer finishes it cancelled), ARGV[9] the fields below as :func:`mediafleet.fleet.records.notice_bytes` writes them,
# ARGV[10] the one part whose report stays ('' for none), ARGV[11..] field/value pairs. Writes a
# final outcome once: a record that holds an outcome (inline, or by reference) is never
# overwritten, and a delivery that no longer owns the record (a newer one started since) writes
# nothing. Returns 1 when written.
FINISH = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'outcome') == 1
   or redis.call('HEXISTS', KEYS[1], 'outcome_ref') == 1 then return 0 end
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'attempts') ~= ARGV[2] then return 0 end
if ARGV[3] ~= '' and (redis.call('HGET', KEYS[1], 'hostname') or '') ~= ARGV[3] then return 0 end
if ARGV[8] == '1' and redis.call('HGET', KEYS[1], 'state') == 'cancelled' then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV, 11))
if ARGV[5] == '1' then redis.call('HINCRBY', KEYS[1], 'completions', 1) end
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(name, 1, 5) == 'part:' and name ~= 'part:' .. ARGV[10] then redis.call('HDEL', KEYS[1], name) end
end
redis.call('SREM', KEYS[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], tonumber(redis.call('HGET', KEYS[1], 'keep_s') or ARGV[6]))
if ARGV[7] == '1' then
  local token = redis.call('HGET', KEYS[1], 'token') or ''
  redis.call('PUBLISH', KEYS[3], #token .. ':' .. token .. ARGV[9])
end
return 1
"""


# KEYS[1] record, KEYS[2] the Celery result of a task ('' for none); ARGV[1] the presence key
# prefix, ARGV[2] '1' for a brief read: each part's report given as '' (present, so whether it
# reported still shows) but the field ARGV[3] names ('' for none). One read of what a waiter looks
# at: {the record's fields and values, whether the worker a started record names still has a
# heartbeat (1, 0; -1: not asked), the task's Celery state or ''}.
LOOK = """
local fields = redis.call('HGETALL', KEYS[1])
local state, host = nil, nil
for i = 1, #fields, 2 do
  local name = fields[i]
  if name == 'state' then state = fields[i + 1] elseif name == 'hostname' then host = fields[i + 1] end
  if ARGV[2] == '1' and string.sub(name, 1, 5) == 'part:' and name ~= ARGV[3] then fields[i + 1] = '' end
end
local alive = -1
if state == 'started' and host and host ~= '' then alive = redis.call('EXISTS', ARGV[1] .. host) end
local status = ''
if KEYS[2] ~= '' then
  local meta = redis.call('GET', KEYS[2])
  if meta then
    local ok, decoded = pcall(cjson.decode, meta)
    if ok and type(decoded) == 'table' and type(decoded['status']) == 'string' then status = decoded['status'] end
  end
end
return {fields, alive, status}
"""


# KEYS[1] record. Its fields and values as HGETALL gives them, with the inline outcome and each
# part's report given as '' (present, so whether they are there still shows): what a waiter's
# progress reads of a range's record, without the outcome it holds once finished.
BRIEF = """
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local name = fields[i]
  if name == 'outcome' or string.sub(name, 1, 5) == 'part:' then fields[i + 1] = '' end
end
return fields
"""


# KEYS[1] record, KEYS[2] the started set, KEYS[3] the presence key of the worker the caller saw the
# record name; ARGV[1] job id, ARGV[2] now, ARGV[3] seconds, ARGV[4] that worker's hostname, ARGV[5]
# the heartbeat interval. A job whose record has not moved for ARGV[3] seconds and names a worker
# whose heartbeat has gone (its presence key expired), or whose latest beat, at least one heartbeat
# after the record last moved, lists the jobs it holds without this one, is queued again, once:
# returns its token (to send it with), else false. A beat that lists nothing (an older worker, or
# one that could not tell) never lets a job of a live worker be taken.
RECOVER = """
if redis.call('HGET', KEYS[1], 'state') ~= 'started' then
  redis.call('SREM', KEYS[2], ARGV[1])
  return false
end
if (redis.call('HGET', KEYS[1], 'hostname') or '') ~= ARGV[4] then
  return false
end
local updated = tonumber(redis.call('HGET', KEYS[1], 'updated_at') or '0')
if tonumber(ARGV[2]) - updated < tonumber(ARGV[3]) then
  return false
end
local beat = redis.call('GET', KEYS[3])
if beat then
  local ok, worker = pcall(cjson.decode, beat)
  if not ok or type(worker) ~= 'table' or type(worker['running']) ~= 'table' then return false end
  if tonumber(worker['at'] or 0) - updated < tonumber(ARGV[5]) then return false end
  for _, id in ipairs(worker['running']) do
    if id == ARGV[1] then return false end
  end
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'hostname', '', 'pid', '', 'lost_worker', ARGV[4],
           'updated_at', ARGV[2])
redis.call('SREM', KEYS[2], ARGV[1])
return redis.call('HGET', KEYS[1], 'token')
"""


# KEYS[1] the caller's job record; ARGV[1] part name, ARGV[2] its outcome (JSON), ARGV[3] '1' when
# this part decides the job alone (a failed own task or page range), ARGV[4] now, ARGV[5] the delivery
# that must own the record ('' for any: a part reporting into its caller; given, it is the job's own
# task, and the record notes that it reported). Records a part's outcome once;
# returns how many parts are still to report (0: the caller joins them now), or -1 when there is
# nothing to do (the job already finished, or this part reported before).
REPORT = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state or state == 'done' or state == 'failed' or state == 'cancelled' then return -1 end
if ARGV[5] ~= '' and redis.call('HGET', KEYS[1], 'owner') ~= ARGV[5] then return -1 end
local field = 'part:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], field) == 1 then return -1 end
redis.call('HSET', KEYS[1], field, ARGV[2], 'updated_at', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'own_reported', '1') end
local left = redis.call('HINCRBY', KEYS[1], 'pending_parts', -1)
if ARGV[3] == '1' and left > 0 then
  redis.call('HSET', KEYS[1], 'pending_parts', 0)
  left = 0
end
if left < 0 then return -1 end
return left
"""


# KEYS[1] a task's Celery result key, KEYS[2] the record of the job the task delivers (the task's id
# is the job's); ARGV[1] the result (Celery's meta, JSON), ARGV[2] its lifetime in seconds ('' for
# none), ARGV[3] the token of the delivery writing it. A delivery of an earlier submission (its token
# no longer the record's: the job was claimed again since, which forgot that submission's result)
# writes nothing, so it can never answer a later submission's waiters; nor does any write replace a
# SUCCESS (as Celery's own store does not). Otherwise sets and publishes the result as Celery's Redis
# backend does. Returns 1 when written.
TASK_RESULT = """
local token = redis.call('HGET', KEYS[2], 'token')
if token and token ~= ARGV[3] then return 0 end
local current = redis.call('GET', KEYS[1])
if current then
  local ok, meta = pcall(cjson.decode, current)
  if ok and type(meta) == 'table' and meta['status'] == 'SUCCESS' then return 0 end
end
if ARGV[2] ~= '' then
  redis.call('SETEX', KEYS[1], ARGV[2], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""
