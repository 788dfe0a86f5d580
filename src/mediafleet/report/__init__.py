"""The evidence report: one self-contained HTML page per artifact (``mediafleet report``).

``build_report`` turns a bundle and the artifact into the page; ``store_inputs`` finds the
artifact and its derived blobs (keyframes) in the blob store.
"""

from mediafleet.report.build import (
    DEFAULT_MAX_EMBED_BYTES,
    ReportInputs,
    build_report,
    load_bundles,
    report_file_name,
    store_inputs,
)

__all__ = ["DEFAULT_MAX_EMBED_BYTES", "ReportInputs", "build_report", "load_bundles", "report_file_name",
           "store_inputs"]
