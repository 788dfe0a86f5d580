"""OCR with RapidOCR and onnxruntime (PP-OCRv4 detector; PP-OCRv6 tiny recogniser, PP-OCRv6 small for the lines tiny is unsure of), shared by the PDF and image paths.

``engine`` builds the models once per process; ``device`` is the start-up check of a worker's
device class; ``lines`` finds and reads the text lines of an image; ``ctc`` decodes the
recogniser's output with each character's position; ``spacing`` puts back the spaces between
words that the recogniser drops; ``reread`` chooses the unsure words of a line to read again with
the small recogniser and puts its reading of them back in the line.
"""
