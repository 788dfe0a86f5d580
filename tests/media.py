"""Media the tests make themselves, with known content."""

from __future__ import annotations

import sys

sys.modules.setdefault("pymupdf.layout", None)  # type: ignore[arg-type]

import pymupdf  # noqa: E402

WORDS = (
    "evidence ledger harbour lantern meadow quartz orbit falcon granite willow copper velvet "
    "summit river canvas beacon thunder cedar marble signal anchor prism cobalt ember"
).split()


def page_lines(page: int, lines: int = 6) -> list[str]:
    """Deterministic English lines for page ``page`` (1-based)."""
    out = []
    for i in range(lines):
        words = [WORDS[(page * 7 + i * 5 + k * 3) % len(WORDS)] for k in range(8)]
        out.append(f"Page {page} line {i + 1}: " + " ".join(words))
    return out


def text_pdf(pages: int, lines: int = 6, *, rotation: int = 0, size: tuple[float, float] = (595, 842)) -> bytes:
    """A born-digital PDF whose page ``n`` holds ``page_lines(n)`` in 11 pt Helvetica."""
    doc = pymupdf.open()
    for n in range(1, pages + 1):
        page = doc.new_page(width=size[0], height=size[1])
        y = 72.0
        for line in page_lines(n, lines):
            page.insert_text((72, y), line, fontsize=11, fontname="helv")
            y += 18
        if rotation:
            page.set_rotation(rotation)
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def encrypted_pdf() -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret", fontsize=11)
    data = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw="user")
    doc.close()
    return data


def marked_pdf(marker: str, pages: int = 1, salt: str = "") -> bytes:
    """A text PDF whose title (stored uncompressed) carries ``marker``, for tests/faulty_worker.py."""
    doc = pymupdf.open(stream=text_pdf(pages), filetype="pdf")
    doc.set_metadata({"title": f"{marker} {salt}".strip()})
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    assert marker.encode() in data
    return data


def scanned(pdf: bytes, pages: set[int] | None = None, *, dpi: int = 200, stamp: str | None = None) -> bytes:
    """``pdf`` with the pages in ``pages`` (1-based; all when None) replaced by their scans."""
    src = pymupdf.open(stream=pdf, filetype="pdf")
    out = pymupdf.open()
    for index, page in enumerate(src):
        if pages is None or index + 1 in pages:
            pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
            new = out.new_page(width=page.rect.width, height=page.rect.height)
            new.insert_image(new.rect, pixmap=pix)
            if stamp:
                new.insert_text((new.rect.width - 60, new.rect.height - 20), stamp, fontsize=7)
        else:
            out.insert_pdf(src, from_page=index, to_page=index)
    data = out.tobytes(garbage=3, deflate=True)
    out.close()
    src.close()
    return data
