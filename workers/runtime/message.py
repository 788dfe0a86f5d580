"""A fleet job's message: sent on its capability's queue, or made without being pushed (for the
job store's claim to push in the same step as it writes the record); priorities and visibility."""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
from typing import Any

from celery import Celery, signals
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json
from mediafleet.contract.jobs import ExtractRequest
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.workers.runtime.names import EXTRACT_TASK
from mediafleet.workers.runtime.transport import MADE, SENTINEL_TRANSPORT, TRANSPORT, NotKept

__all__ = ["extract_message", "redis_priority", "send_extract", "visibility_timeout_s"]


def visibility_timeout_s(manifest: Manifest) -> int:
    """Longest hard time limit plus a margin: a running job is never redelivered while it runs."""
    return int(manifest.max_hard_time_limit_s() * 1.25) + 60


def redis_priority(priority: int) -> int:
    """The fleet's 0 (lowest) .. 9 (highest) as the Redis transport's 0 (first) .. 9 (last)."""
    return 9 - priority


def send_extract(app: Celery, request: ExtractRequest, capability: Capability, token: str, priority: int) -> None:
    """Put one job on its capability's queue for ``request.device``, with the capability's limits.

    The message's shown arguments (task events, Flower) name the job and its action: Celery would
    otherwise render the whole request with its safe repr for every message (~0.2 ms each).
    """
    app.send_task(
        EXTRACT_TASK,
        args=[request.model_dump(mode="json")],
        kwargs={"token": token},
        argsrepr=_shown_args(request),
        kwargsrepr="{'token': '...'}",
        task_id=request.job_id,
        queue=capability.queue(request.device),
        soft_time_limit=capability.time_limits.soft_s,
        time_limit=capability.time_limits.hard_s,
        priority=redis_priority(priority),
    )


def _shown_args(request: ExtractRequest) -> str:
    return repr([{"job_id": request.job_id, "action": request.action}])


def extract_message(app: Celery, request: ExtractRequest, capability: Capability, token: str,
                    priority: int) -> tuple[str, str] | None:
    """The message :func:`send_extract` would put on the queue, made by the same call (Celery's
    ``send_task``: its headers, limits and priority, signed with signing on) but not pushed:
    (the Redis list kombu would push it on, the payload), for the job store's claim to push in the
    same step as it writes the record (:meth:`mediafleet.fleet.store.JobStore.claim_routed`).

    Later messages to the same queue, with the same limits and priority, from the same thread, are
    made from the first one's form (:class:`_MessageForm`: its job's fields, the body and a new
    delivery tag put in) at about a sixth of the cost (~0.3 ms a message through ``send_task``),
    once the second message ``send_task`` made is byte for byte what the form makes of it; a form
    that does not reproduce it (signed messages, another Celery) is never used. Inside a task
    (where Celery names the running task as the message's parent) the message is always made by
    ``send_task``.

    None where the message must be sent the ordinary way: the broker is not on the fleet's
    transport, the app sends task-sent events, or a publish signal has receivers (each of those
    goes out once per message made, and a candidate's message may never be pushed).
    """
    if app.conf.broker_transport not in (TRANSPORT, SENTINEL_TRANSPORT) or app.conf.task_send_sent_event or any(
            signal.receivers for signal in (signals.before_task_publish, signals.after_task_publish, signals.task_sent)):
        return None
    in_task = app.current_worker_task is not None
    forms: dict[tuple[Any, ...], _MessageForm | None] = app.__dict__.setdefault("mediafleet_message_forms", {})
    queue = capability.queue(request.device)
    limits = capability.time_limits
    key = (os.getpid(), threading.get_ident(), queue, limits.soft_s, limits.hard_s, priority,
           app.conf.task_serializer, app.conf.task_protocol)
    form = None if in_task else forms.get(key, _UNSEEN)
    if isinstance(form, _MessageForm) and form.checked:
        return form.make(request, token, str(uuid.uuid4()))
    made = _made_by_celery(app, request, capability, token, priority)
    if made is None or in_task:
        return made
    if form is _UNSEEN:
        forms[key] = _MessageForm.of(*made)
    elif isinstance(form, _MessageForm):
        tag = json.loads(made[1])["properties"]["delivery_tag"]
        if form.make(request, token, tag) == made:
            form.checked = True
        else:
            forms[key] = None  # something else varies: this key's messages always go through send_task
    return made


def _made_by_celery(app: Celery, request: ExtractRequest, capability: Capability, token: str,
                    priority: int) -> tuple[str, str] | None:
    made: list[tuple[str, str]] = []
    kept = MADE.set(made)
    try:
        send_extract(app, request, capability, token, priority)
    except NotKept:
        return None
    finally:
        MADE.reset(kept)
    if len(made) != 1:
        raise RuntimeError(f"send_task put {len(made)} messages, not one")
    return made[0]


_UNSEEN: Any = object()


class _MessageForm:
    """A message ``send_task`` made, as the form of later ones: the same headers and properties
    but for the job's own fields (its id, as the message's id, root and correlation id; its shown
    arguments; a new delivery tag) and the body (the request and token, with the form's embedded
    callbacks), serialised as kombu serialises them (its JSON, then base64)."""

    def __init__(self, key: str, message: dict[str, Any], embed: Any) -> None:
        self.key, self.message, self.embed = key, message, embed
        self.checked = False

    @classmethod
    def of(cls, key: str, payload: str) -> _MessageForm | None:
        try:
            message = json.loads(payload)
            _, _, embed = json.loads(base64.b64decode(message["body"]))
            if message["properties"].get("body_encoding") != "base64" or message.get("content-type") != "application/json":
                return None
        except (ValueError, KeyError, TypeError):
            return None
        return cls(key, message, embed)

    def make(self, request: ExtractRequest, token: str, tag: str) -> tuple[str, str]:
        shown = _shown_args(request)
        headers = {**self.message["headers"], "id": request.job_id, "root_id": request.job_id, "argsrepr": shown}
        properties = {**self.message["properties"], "correlation_id": request.job_id, "delivery_tag": tag}
        if "argsrepr" in properties:
            properties["argsrepr"] = shown
        body = kombu_json.dumps([[request.model_dump(mode="json")], {"token": token}, self.embed])
        message = {**self.message, "body": base64.b64encode(body.encode("utf-8")).decode("ascii"),
                   "headers": headers, "properties": properties}
        return self.key, kombu_redis.dumps(message)
