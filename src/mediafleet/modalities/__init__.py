"""The modalities the fleet knows, each in one place: what a modality is to the fleet
(:mod:`.spec`: ``ModalitySpec``), one module per modality naming its extractor, checks, adapters and
parts by reference (:mod:`.pdf`, :mod:`.image`, :mod:`.audio`, :mod:`.video`), and the registry every
generic part iterates over (:mod:`.registry`). Nothing here imports an extractor: a code part is a
``Ref`` imported on first use, so the adapters and the dispatcher read the registry without
importing the workers."""
