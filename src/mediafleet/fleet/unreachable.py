"""Moved to :mod:`mediafleet.fleet.redis_client`; this name is kept while workers/ is being moved
(issue 40's layout-2) and goes with it."""

from __future__ import annotations

from mediafleet.fleet.redis_client import redis_away_errors, translated, translating, unreachable_errors

__all__ = ["redis_away_errors", "translated", "translating", "unreachable_errors"]
