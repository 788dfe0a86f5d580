"""The discovery commands of ``mediafleet``: the host's side (trusted, never model-callable).

* ``mediafleet index add BUNDLE.json... --workspace W [--subject S] [--index URL]``
* ``mediafleet discovery key new [--receipt-key FILE]``
* ``mediafleet discovery lease open --workspace W [--subject S] [--agent A] --ttl-s N
  --max-operations N --max-evidence N [--max-characters N] [--credential-file FILE]
  [--endpoint URL]``: prints the lease as JSON with ``lease_id`` and ``credential_file``; a missing
  receipt key is created first (mode 600; ``receipt_key`` and ``receipt_key_created`` say so), an
  unusable one refuses the lease in one line naming ``mediafleet discovery key new``
* ``mediafleet discovery lease revoke LEASE_ID`` / ``lease show LEASE_ID``
* ``mediafleet discovery binding disable BINDING_ID``
* ``mediafleet discovery receipt show REQUEST_ID``: decrypts one receipt
* ``mediafleet serve-discovery --credential-file FILE`` (stdio) or ``--http [--port N]``, with
  ``--channels lexical[,semantic]`` (default the ``discovery_channels`` setting,
  ``MEDIAFLEET_DISCOVERY_CHANNELS``, else ``lexical``):
  a server whose receipt key, state or credential file is missing or unusable still starts, says
  why on stderr and answers every tool call ``host_unavailable`` (an exit at start reaches an agent
  as a closed connection that says nothing)

Host state (``--state``, default ``$XDG_STATE_HOME/mediafleet/discovery/host.db``), the receipt key
(``--receipt-key``, default beside it) and the index (``--index``, default the
``MEDIAFLEET_DISCOVERY_INDEX`` setting's URL, else ``sqlite:`` beside the state).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = frozenset({"index", "discovery", "serve-discovery"})
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mediafleet" / "discovery"


def _host_options(parser: argparse.ArgumentParser, *, index: bool = True, key: bool = True) -> None:
    parser.add_argument("--state", type=Path,
                        help="the host's lease store, a SQLite file (default $XDG_STATE_HOME/mediafleet/discovery/host.db)")
    if key:
        parser.add_argument("--receipt-key", type=Path,
                            help="the AES-256-GCM receipt key file: 64 hex characters, mode 600 (default beside --state)")
    if index:
        parser.add_argument("--index", help="sqlite:PATH or postgresql://... (default: the MEDIAFLEET_DISCOVERY_INDEX "
                                            "setting's URL, else index.db beside --state)")


def _scope_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="the workspace of the scope (fixed by the host)")
    parser.add_argument("--subject", default="default", help="the subject of the scope (default: default)")


def add_commands(sub: Any) -> None:
    """Register ``index``, ``discovery`` and ``serve-discovery`` on ``mediafleet``'s subparsers."""
    ix = sub.add_parser("index", help="index evidence bundles for discovery (host side)")
    ix_sub = ix.add_subparsers(dest="index_command", required=True, metavar="COMMAND", help="add")
    add = ix_sub.add_parser("add", help="index the text units of evidence bundles in a scope")
    add.add_argument("bundles", nargs="+", type=Path,
                     help="bundle JSON files (from mediafleet extract --out, or --json: one bundle per line)")
    _scope_options(add)
    _host_options(add, key=False)

    dc = sub.add_parser("discovery", help="the host contract: receipt key, leases, bindings, receipts")
    dc_sub = dc.add_subparsers(dest="discovery_command", required=True, metavar="COMMAND",
                               help="key, lease, binding or receipt")
    key = dc_sub.add_parser("key", help="create the receipt key")
    key.add_argument("key_command", choices=["new"], help="new: 32 random bytes, written as hex with mode 600")
    _host_options(key, index=False)
    lease = dc_sub.add_parser("lease", help="open, revoke or show a lease")
    lease_sub = lease.add_subparsers(dest="lease_command", required=True, metavar="COMMAND",
                                     help="open, revoke or show")
    opened = lease_sub.add_parser("open", help="open a lease for one binding and turn; prints it as JSON")
    _scope_options(opened)
    opened.add_argument("--agent", default="agent", help="the agent of the binding (default: agent)")
    opened.add_argument("--turn", help="the turn this lease is for (default: the lease id)")
    opened.add_argument("--ttl-s", type=float, required=True, help="seconds until the lease expires")
    opened.add_argument("--max-operations", type=int, required=True, help="how many tool calls the lease allows")
    opened.add_argument("--max-evidence", type=int, required=True, help="how many evidence units it may deliver")
    opened.add_argument("--max-characters", type=int, default=100_000,
                        help="how many characters of evidence text it may deliver (default 100000)")
    opened.add_argument("--credential-file", type=Path,
                        help="where to write the binding's credential (default: credentials/<lease>.json beside "
                             "--state); never inside a repository")
    opened.add_argument("--endpoint", help="a loopback serve-discovery --http URL for the stdio bridge to reach")
    _host_options(opened)
    for name, text in (("revoke", "revoke a lease (its operations fail closed from now on)"),
                       ("show", "print a lease and its operations as JSON")):
        cmd = lease_sub.add_parser(name, help=text)
        cmd.add_argument("lease_id", help="the lease id (mfl-...)")
        _host_options(cmd, index=False, key=False)
    binding = dc_sub.add_parser("binding", help="disable a binding")
    binding.add_argument("binding_command", choices=["disable"], help="disable: every lease of it fails closed")
    binding.add_argument("binding_id", help="the binding id (mfb-..., in the lease's JSON)")
    _host_options(binding, index=False, key=False)
    receipt = dc_sub.add_parser("receipt", help="decrypt and print one preparation receipt")
    receipt.add_argument("receipt_command", choices=["show"], help="show: decrypt with the receipt key, print JSON")
    receipt.add_argument("request_id", help="the request id (host-request:discovery:N)")
    _host_options(receipt, index=False)

    sd = sub.add_parser("serve-discovery", help="serve discovery-search and discovery-inspect over MCP")
    sd.add_argument("--credential-file", type=Path, help="stdio: the credential file 'discovery lease open' wrote")
    sd.add_argument("--http", action="store_true",
                    help="streamable HTTP at http://HOST:PORT/mcp instead of stdio, each call's credential as its "
                         "Authorization: Bearer header")
    sd.add_argument("--host", default="127.0.0.1", help="the HTTP address: a loopback address only (default 127.0.0.1)")
    sd.add_argument("--port", type=int, default=8766, help="the HTTP port (default 8766)")
    sd.add_argument("--channels", help="the nominating channels: lexical (the default) or lexical,semantic "
                                       "(default: the MEDIAFLEET_DISCOVERY_CHANNELS variable, else lexical)")
    _host_options(sd)


def _paths(args: argparse.Namespace) -> tuple[Path, Path]:
    state = (args.state or _state_dir() / "host.db").expanduser()
    key = getattr(args, "receipt_key", None) or state.parent / "receipt.key"
    return state, key.expanduser()


def _index_url(args: argparse.Namespace, settings: Any) -> str:
    if getattr(args, "index", None):
        return str(args.index)
    if settings.discovery_index:
        from mediafleet.discovery.hook import parse_index_setting

        return parse_index_setting(settings.discovery_index)[0]
    state, _ = _paths(args)
    return f"sqlite:{state.parent / 'index.db'}"


def _fail(message: str) -> int:
    print(f"mediafleet: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace, settings: Any) -> int:
    """Run a discovery command; returns the exit code."""
    from mediafleet.discovery.errors import DiscoveryError

    try:
        if args.command == "index":
            return _index_add(args, settings)
        if args.command == "serve-discovery":
            return _serve(args, settings)
        return _discovery(args, settings)
    except DiscoveryError as exc:
        return _fail(exc.message)
    except FileExistsError as exc:
        return _fail(f"{exc.filename or 'the file'} exists already: it is never replaced")
    except FileNotFoundError as exc:
        return _fail(f"{exc.filename or 'a file'} does not exist")
    except (ValueError, PermissionError) as exc:
        return _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _index_add(args: argparse.Namespace, settings: Any) -> int:
    from pydantic import ValidationError

    from mediafleet.discovery.index_open import open_index
    from mediafleet.discovery.units import Scope

    scope = Scope(args.workspace, args.subject)
    bundles = []
    for path in args.bundles:
        try:
            bundles.extend(_bundles(path.read_text(encoding="utf-8")))
        except (OSError, ValidationError, UnicodeDecodeError):
            return _fail(f"{path.name}: not an evidence bundle (mediafleet extract --json or --out)")
    index = open_index(_index_url(args, settings))
    try:
        added = superseded = 0
        for bundle in bundles:
            report = index.add_bundle(scope, bundle)
            added, superseded = added + report.added, superseded + report.superseded
        generation = index.scope_generation(scope)
    finally:
        index.close()
    print(json.dumps({"workspace": scope.workspace, "subject": scope.subject, "bundles": len(bundles),
                      "units_added": added, "units_superseded": superseded, "generation": generation}))
    return EXIT_OK


def _bundles(text: str) -> list[Any]:
    """One bundle (a file from ``--out``) or one per line (``extract --json``)."""
    from pydantic import ValidationError

    from mediafleet.contract.bundle import EvidenceBundle

    try:
        return [EvidenceBundle.model_validate_json(text)]
    except ValidationError:
        return [EvidenceBundle.model_validate_json(line) for line in text.splitlines() if line.strip()]


def _discovery(args: argparse.Namespace, settings: Any) -> int:
    from mediafleet.discovery.host import LeaseHost, NavigationBudget
    from mediafleet.discovery.receipt import ReceiptKey, create_key_file

    state, key_path = _paths(args)
    if args.discovery_command == "key":
        create_key_file(key_path)
        print(json.dumps({"receipt_key": str(key_path)}))
        return EXIT_OK
    host = LeaseHost(state)
    try:
        if args.discovery_command == "lease" and args.lease_command == "open":
            return _open_lease(args, settings, host, NavigationBudget(args.max_operations, args.max_evidence,
                                                                      args.max_characters))
        if args.discovery_command == "lease":
            if args.lease_command == "revoke" and not host.revoke_lease(args.lease_id):
                return _fail("there is no such lease")
            lease = host.lease(args.lease_id)
            if lease is None:
                return _fail("there is no such lease")
            print(json.dumps({**lease.public(), "operations": host.operations(lease.lease_id)}))
            return EXIT_OK
        if args.discovery_command == "binding":
            if not host.disable_binding(args.binding_id):
                return _fail("there is no such binding")
            print(json.dumps({"binding_id": args.binding_id, "disabled": True}))
            return EXIT_OK
        sealed = host.receipt(args.request_id)
        if sealed is None:
            return _fail("there is no receipt for that request")
        print(json.dumps(ReceiptKey(key_path).open(sealed)))
        return EXIT_OK
    finally:
        host.close()


def _ensure_key(key_path: Path) -> bool:
    """The receipt key the server will need: created (mode 600) when missing; whether it was.

    Raises:
        ValueError: a key file is there but unusable (one line naming ``discovery key new``).
    """
    from mediafleet.discovery.receipt import ReceiptKey, create_key_file

    if not key_path.exists() and not key_path.is_symlink():
        create_key_file(key_path)
        return True
    try:
        ReceiptKey(key_path)
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"the receipt key cannot be used ({reason}); no lease was opened: move it away and run "
                         "'mediafleet discovery key new'") from None
    return False


def _open_lease(args: argparse.Namespace, settings: Any, host: Any, budget: Any) -> int:
    from mediafleet.discovery.credential_file import write_credential_file
    from mediafleet.discovery.index_open import open_index
    from mediafleet.discovery.units import Scope

    scope = Scope(args.workspace, args.subject)
    key_path = _paths(args)[1]
    key_created = _ensure_key(key_path)
    index = open_index(_index_url(args, settings))
    try:
        generation = index.scope_generation(scope)
    finally:
        index.close()
    binding = host.bind(scope, args.agent)
    lease, credential = host.open_lease(binding, ttl_s=args.ttl_s, budget=budget, generation=generation,
                                        turn=args.turn)
    path = (args.credential_file or (_paths(args)[0].parent / "credentials" / f"{lease.lease_id}.json")).expanduser()
    try:
        write_credential_file(path, lease.lease_id, credential, args.endpoint)
    except BaseException:
        host.revoke_lease(lease.lease_id)  # a lease whose credential could not be written is of no use
        raise
    print(json.dumps({**lease.public(), "workspace": scope.workspace, "subject": scope.subject,
                      "agent": binding.agent, "credential_file": str(path.resolve()),
                      "receipt_key": str(key_path.resolve()), "receipt_key_created": key_created}))
    return EXIT_OK


def _service(args: argparse.Namespace, settings: Any) -> Any:
    """The service, or the reason (one public-safe line) the host cannot serve."""
    from mediafleet.discovery.host import LeaseHost
    from mediafleet.discovery.index_open import open_index
    from mediafleet.discovery.operations import DiscoveryService, allow_active_bindings
    from mediafleet.discovery.receipt import ReceiptKey

    state, key_path = _paths(args)
    channels = _channels(args, settings)
    if not state.is_file():
        return "the host's state does not exist: open a lease with 'mediafleet discovery lease open' first"
    try:
        key = ReceiptKey(key_path)
    except FileNotFoundError:
        return "the receipt key does not exist: create it with 'mediafleet discovery key new'"
    except (OSError, ValueError) as exc:
        return f"the receipt key cannot be used ({str(exc).splitlines()[0]}): see 'mediafleet discovery key new'"
    host = LeaseHost(state)
    recovered = host.recover()
    if recovered:
        logging.getLogger("mediafleet.discovery").warning(
            "%d operation(s) left reserved by an earlier run are now uncertain (counted, not retried)", recovered)
    return DiscoveryService(host, open_index(_index_url(args, settings)), key, allow_active_bindings,
                            channels=channels)


def _channels(args: argparse.Namespace, settings: Any) -> tuple[str, ...]:
    from mediafleet.discovery.operations import parse_channels

    # The setting (MEDIAFLEET_DISCOVERY_CHANNELS) was read and checked once, with the process's settings.
    return parse_channels(args.channels or settings.discovery_channels)


def _tools(args: argparse.Namespace, settings: Any) -> Any:
    """The tools over the service; when the host cannot serve, tools answering ``host_unavailable``.

    A server that exits at start reaches the agent as a closed connection that says nothing: this
    one starts, says why on stderr, and answers every call with the public error instead.
    """
    from mediafleet.discovery.mcp import DiscoveryTools, UnavailableTools

    service = _service(args, settings)
    if isinstance(service, str):
        print(f"mediafleet serve-discovery: unavailable: {service}", file=sys.stderr, flush=True)
        return UnavailableTools()
    return DiscoveryTools(service)


def _serve(args: argparse.Namespace, settings: Any) -> int:
    from mediafleet.discovery.credential_file import read_credential_file
    from mediafleet.discovery.mcp import UnavailableTools, is_loopback_host, serve_http, serve_stdio

    # stdout is the MCP wire under stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _channels(args, settings)  # a channel list that is not understood refuses to start (a usage error)
    if args.http:
        if args.credential_file is not None:
            return _fail("serve-discovery --http takes each call's credential from its Authorization header")
        if not is_loopback_host(args.host):
            return _fail("serve-discovery --http listens on a loopback address only")
        serve_http(_tools(args, settings), host=args.host, port=args.port)
        return EXIT_OK
    if args.credential_file is None:
        return _fail("serve-discovery (stdio) needs --credential-file, written by 'discovery lease open'")
    try:
        connection = read_credential_file(args.credential_file)
    except (OSError, ValueError) as exc:
        reason = f"{exc.filename and Path(exc.filename).name} does not exist" if isinstance(exc, FileNotFoundError) \
            else (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        print(f"mediafleet serve-discovery: unavailable: the credential file cannot be used: {reason}",
              file=sys.stderr, flush=True)
        serve_stdio("", tools=UnavailableTools())
        return EXIT_OK
    if connection.endpoint is not None:
        serve_stdio(connection.credential, endpoint=connection.endpoint)
    else:
        serve_stdio(connection.credential, tools=_tools(args, settings))
    return EXIT_OK
