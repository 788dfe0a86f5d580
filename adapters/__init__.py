"""Pure mapping of worker results to located evidence, graph nodes, PROV-O and claims."""

from adapters.bundle import build_bundle, refused_bundle
from adapters.ids import canonical, job_id, token
from adapters.loci import Bounds, LocusDraft, to_loci
from adapters.prov import prov_jsonld, to_turtle
from adapters.verify import inside, loci_valid

__all__ = [
    "Bounds",
    "LocusDraft",
    "build_bundle",
    "canonical",
    "inside",
    "job_id",
    "loci_valid",
    "prov_jsonld",
    "refused_bundle",
    "to_loci",
    "to_turtle",
    "token",
]
