"""Pure mapping of worker results to located evidence, graph nodes, PROV-O and claims."""

from mediafleet.adapters.bundle import build_bundle, refused_bundle
from mediafleet.adapters.ids import canonical, job_id, token
from mediafleet.adapters.loci import Bounds, LocusDraft, to_loci
from mediafleet.adapters.prov import prov_jsonld, to_turtle
from mediafleet.adapters.stream import (
    BUNDLE_STREAM_FORMAT,
    bundle_lines,
    read_bundle_lines,
    write_bundle_lines,
)
from mediafleet.adapters.verify import inside, loci_valid

__all__ = [
    "BUNDLE_STREAM_FORMAT",
    "Bounds",
    "LocusDraft",
    "build_bundle",
    "bundle_lines",
    "canonical",
    "inside",
    "job_id",
    "loci_valid",
    "prov_jsonld",
    "read_bundle_lines",
    "refused_bundle",
    "to_loci",
    "to_turtle",
    "token",
    "write_bundle_lines",
]
