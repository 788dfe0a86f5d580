"""Image extractors: decode upright frames, hash and thumbnail them, OCR their text lines."""
