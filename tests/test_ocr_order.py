"""Reading order of OCR lines: columns of text by column, tables by row.

The synthetic cases give each rule a known answer on boxes alone; the last test runs the real
models on a scanned page that holds both a table and two columns of text.
"""

from __future__ import annotations

import random
from pathlib import Path

from mediafleet.contract import Limits, PdfOptions
from mediafleet.workers.ocr.lines import OcrLine
from mediafleet.workers.ocr.order import CELL_WIDTH, MIN_COLUMN, TABLE_ROWS, ocr_reading_order, rows
from mediafleet.workers.pdf.mupdf import pymupdf
from mediafleet.workers.pdf.textlayer import extract_pdf

from tests.media import scanned

HEIGHT = 30.0  # a line's box height in pixels
PITCH = 36.0  # one line to the next


def line(text: str, x0: float, width: float, row: int, top: float = 100.0) -> OcrLine:
    y0 = top + row * PITCH
    return OcrLine(text, 0.99, (x0, y0, x0 + width, y0 + HEIGHT))


def texts(lines: list[OcrLine]) -> list[str]:
    return [ln.text for ln in ocr_reading_order(lines)]


def test_two_columns_of_text_on_one_baseline_grid_are_read_column_by_column() -> None:
    # Justified prose, both columns 20 line heights wide, every line level with its neighbour.
    left = [line(f"L{r}", 100, 600, r) for r in range(8)]
    right = [line(f"R{r}", 760, 600, r) for r in range(8)]
    shuffled = left + right
    random.Random(3).shuffle(shuffled)
    assert texts(shuffled) == [f"L{r}" for r in range(8)] + [f"R{r}" for r in range(8)]


def test_a_table_of_short_cells_is_read_row_by_row() -> None:
    heading = line("Memory use by block size", 100, 700, 0)
    cells = [line(f"c{r}{c}", 100 + 250 * c, 150, r) for r in range(1, 6) for c in range(4)]
    after = line("The sorting phase of compression gathers similar strings together", 100, 1100, 6)
    order = texts([after, *reversed(cells), heading])
    assert order == [heading.text, *(f"c{r}{c}" for r in range(1, 6) for c in range(4)), after.text]


def test_a_table_row_is_read_whole_though_its_cells_sit_a_little_apart_in_height() -> None:
    # Cells of one row detected a few pixels apart (a type column set in another font).
    cells = [OcrLine(f"c{r}{c}", 0.99, (100 + 300 * c, 100 + r * PITCH + 4 * c, 220 + 300 * c, 130 + r * PITCH + 4 * c))
             for r in range(4) for c in range(3)]
    assert [[ln.text for ln in row] for row in rows(cells)] == [[f"c{r}{c}" for c in range(3)] for r in range(4)]
    assert texts(cells) == [f"c{r}{c}" for r in range(4) for c in range(3)]


def test_short_lines_side_by_side_fewer_than_a_table_stay_in_their_columns() -> None:
    # Two columns of prose whose paragraphs end in short lines at the same height: a run of
    # TABLE_ROWS - 1 rows of short lines is not a table.
    left = [line(f"L{r}", 100, 600, r) for r in range(6)]
    right = [line(f"R{r}", 760, 600, r) for r in range(6)]
    for r in range(3, 3 + TABLE_ROWS - 1):
        left[r] = line(f"L{r}", 100, 120, r)
        right[r] = line(f"R{r}", 760, 120, r)
    assert texts(right + left) == [f"L{r}" for r in range(6)] + [f"R{r}" for r in range(6)]


def test_a_cell_is_at_most_cell_width_of_its_own_heights() -> None:
    # Three rows of two lines: as cells (just at the bound) a table read by rows; a little wider,
    # two columns of text.
    for width, by_rows in ((CELL_WIDTH * HEIGHT, True), (CELL_WIDTH * HEIGHT + 2, False)):
        lines = [line(f"{side}{r}", x, width, r) for r in range(TABLE_ROWS) for side, x in (("a", 100), ("b", 900))]
        expected = ([f"{side}{r}" for r in range(TABLE_ROWS) for side in "ab"] if by_rows
                    else [f"{side}{r}" for side in "ab" for r in range(TABLE_ROWS)])
        assert texts(list(reversed(lines))) == expected, width


def test_a_narrow_first_column_beside_descriptions_is_read_row_by_row() -> None:
    # fontconfig's property table: names, then their types and descriptions in one wide line.
    names = [line(f"name{r}", 420, 130, r) for r in range(6)]
    descriptions = [line(f"String description {r} of the property", 660, 700, r) for r in range(6)]
    expected = [t for r in range(6) for t in (f"name{r}", f"String description {r} of the property")]
    assert texts(descriptions + names) == expected


def test_a_column_at_least_min_column_of_its_neighbour_is_still_a_column() -> None:
    wide = 900.0
    side = [line(f"S{r}", 100, MIN_COLUMN * wide + 1, r) for r in range(6)]
    main = [line(f"M{r}", 500, wide, r) for r in range(6)]
    assert texts(main + side) == [f"S{r}" for r in range(6)] + [f"M{r}" for r in range(6)]


def test_every_line_comes_out_once_whatever_the_layout() -> None:
    rng = random.Random(11)
    for _ in range(300):
        lines = [OcrLine(str(i), 0.9, (x := rng.uniform(0, 1500), y := rng.uniform(0, 2000),
                                       x + rng.uniform(5, 900), y + rng.uniform(8, 60)))
                 for i in range(rng.randrange(0, 40))]
        order = ocr_reading_order(lines)
        assert sorted(map(id, order)) == sorted(map(id, lines))
        assert ocr_reading_order(list(reversed(lines))) == order  # boxes all differ: no ties


# -- the real models ------------------------------------------------------------------------------

TABLE = [("Flag", "Compress", "Decompress", "Size"),
         ("-1", "1200k", "500k", "914704"),
         ("-2", "2000k", "900k", "877703"),
         ("-3", "2800k", "1300k", "860338"),
         ("-4", "3600k", "1700k", "846899")]
LEFT = ("Shot detection reads every frame once and keeps the cut where the picture changes "
        "completely, never on a flash or a fade inside one shot.")
RIGHT = ("Transcription keeps each segment to whole sentences and never ends one at an "
         "abbreviation such as a title before a name.")


def table_and_columns_pdf() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    y = 90.0
    for row in TABLE:
        for k, cell in enumerate(row):
            page.insert_text((90 + 110 * k, y), cell, fontname="cour", fontsize=10)
        y += 14
    page.insert_textbox(pymupdf.Rect(72, 220, 287, 420), LEFT, fontname="helv", fontsize=10)
    page.insert_textbox(pymupdf.Rect(308, 220, 523, 420), RIGHT, fontname="helv", fontsize=10)
    data = doc.tobytes()
    doc.close()
    return data


def test_a_scanned_table_reads_by_rows_and_its_columns_of_text_by_column(tmp_path: Path) -> None:
    path = tmp_path / "scan.pdf"
    path.write_bytes(scanned(table_and_columns_pdf()))
    page = extract_pdf(path, PdfOptions(ocr="always"), Limits(max_bytes=1 << 30, max_pages=10,
                                                               max_pixels=50_000_000)).pages[0]
    assert page.path == "ocr"
    words = page.text.split()
    table = [cell for row in TABLE for cell in row]
    assert words[:len(table)] == table
    prose = words[len(table):]
    assert " ".join(prose) == f"{LEFT} {RIGHT}"
