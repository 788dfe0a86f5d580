"""Media type from the bytes themselves (magic numbers); a caller's claimed type is only checked.

Each modality's spec recognises its own types (:attr:`mediafleet.modalities.spec.ModalitySpec.sniff`);
the registered specs are asked in turn.
"""

from __future__ import annotations

from mediafleet.modalities.registry import sniff

__all__ = ["sniff"]
