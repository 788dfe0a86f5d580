"""PDF extractors: the text layer (PyMuPDF)."""
