"""The OCR engine's life cycle and device rules, and the pure steps around the models
(CTC positions, word spaces, text normalisation, joining cut lines)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from mediafleet.contract import DeviceClass, Unavailable
from mediafleet.workers.ocr.ctc import Decoded, decode
from mediafleet.workers.ocr.device import CUDA_PROVIDER, check_device
from mediafleet.workers.ocr import engine as ocr_engine
from mediafleet.workers.ocr.engine import OcrEngine, _charset, _fast_recogniser, _ink_box
from mediafleet.workers.ocr.lines import OcrLine, capitals, join_pieces, normalise
from mediafleet.workers.ocr.spacing import with_spaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cuda_installed() -> bool:
    import onnxruntime

    return CUDA_PROVIDER in onnxruntime.get_available_providers()


# -- life cycle and devices -----------------------------------------------------------------------

def test_importing_the_worker_app_and_extractors_loads_no_ocr_engine() -> None:
    code = ("import sys, mediafleet, mediafleet.workers.runtime.config, mediafleet.workers.pdf.textlayer, mediafleet.workers.image.analyze, mediafleet.workers.ocr.engine; "
            "print('rapidocr_onnxruntime' in sys.modules, not mediafleet.workers.ocr.engine._engines)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_engine_caps_onnxruntime_threads() -> None:
    engine = OcrEngine(threads=1)
    for session in (engine._det.infer.session, engine._rec.session.session):
        assert session.get_session_options().intra_op_num_threads == 1
        assert session.get_providers()[0] == "CPUExecutionProvider"


def test_the_recogniser_brings_its_own_dictionary_and_is_pinned_by_digest() -> None:
    # PP-OCRv6 small (rapidocr wheel): its 18,708 characters live in the model's metadata.
    engine = OcrEngine(threads=1)
    classes = engine._rec.session.session.get_outputs()[0].shape[-1]
    assert len(engine._charset) == classes
    assert (engine._charset[0], engine._charset[-1]) == ("blank", " ")
    assert {"a", "Z", "0", "_", "\u4e2d"} <= set(engine._charset)
    rec = [m for m in engine.models() if m.name.startswith("rapidocr ")]
    assert [m.name.rsplit(": ", 1)[1] for m in rec] == ["PP-OCRv6_rec_small.onnx"]
    assert rec[0].digest == "sha256:" + hashlib.sha256(engine._model_paths["rec"].read_bytes()).hexdigest()


def test_the_fast_recogniser_is_read_from_its_wheel_and_pinned_by_digest() -> None:
    # PP-OCRv6 tiny: inside faster-paddle's extension library, found by size and digest, with its
    # 6,904-character dictionary; same threads as the other sessions.
    engine = OcrEngine(threads=1)
    assert engine._fast.get_session_options().intra_op_num_threads == 1
    assert len(engine._fast_charset) == engine._fast.get_outputs()[0].shape[-1] == 6906
    assert (engine._fast_charset[0], engine._fast_charset[-1]) == ("blank", " ")
    assert {"a", "Z", "0", "_"} <= set(engine._fast_charset)
    fast = [m for m in engine.models() if m.name.startswith("faster-paddle ")]
    assert [m.name.rsplit(": ", 1)[1] for m in fast] == ["PP-OCRv6_rec_tiny.onnx"]
    model, _, _ = _fast_recogniser()
    assert fast[0].digest == "sha256:" + hashlib.sha256(model).hexdigest()


def _printed(text: str, width: int = 400) -> np.ndarray:
    import cv2

    crop = np.full((48, width, 3), 255, np.uint8)
    cv2.putText(crop, text, (8, 34), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (0, 0, 0), 2)
    return crop


def test_lines_the_fast_recogniser_is_unsure_of_are_read_again_by_the_small_one(monkeypatch) -> None:
    from mediafleet.workers.ocr import reread

    engine = OcrEngine(threads=1)
    crop = _printed("Located evidence")
    fast = engine._read(engine._fast, engine._fast_charset, [crop], [0])
    small = engine._read(engine._rec.session.session, engine._charset, [crop], [0])
    monkeypatch.setattr(ocr_engine, "FALLBACK", 0.0)  # every reading is sure enough
    assert engine.recognise([crop]) == fast
    monkeypatch.setattr(ocr_engine, "FALLBACK", 1.01)  # none is ...
    monkeypatch.setattr(reread, "UNSURE_CHAR", 0.0)  # ... but no word is unsure: the spacing step decides
    assert engine.recognise([crop]) == fast
    monkeypatch.setattr(reread, "UNSURE_CHAR", 1.01)  # every word is: the whole line is read again
    assert engine.recognise([crop]) == small


def test_a_cut_of_a_line_is_read_in_the_lines_pixels() -> None:
    engine = OcrEngine(threads=1)
    crop = _printed("Located evidence", width=420)
    whole = engine._read(engine._rec.session.session, engine._charset, [crop], [0])[0]
    start = round(whole.spans[whole.text.index("evidence")][0]) - 12  # just before "evidence"
    read = engine._read_cut(crop[:, start:], start)
    assert read.text.strip() == "evidence"
    assert all(start <= a <= b <= crop.shape[1] for a, b in read.spans)
    # where the whole line's reading put the same letters, within a timestep (8 input columns)
    for (a, _), (c, _) in zip(read.spans, whole.spans[-len(read.spans):], strict=True):
        assert abs(a - c) <= 8


def test_only_the_unsure_words_of_a_line_are_read_again(monkeypatch) -> None:
    from mediafleet.workers.ocr import reread

    engine = OcrEngine(threads=1)
    crop = _printed("Located evidence of it here", width=560)
    fast = engine._read(engine._fast, engine._fast_charset, [crop], [0])[0]
    cuts_read = []
    real_read_cut = engine._read_cut
    monkeypatch.setattr(engine, "_read_cut", lambda cut, x0: cuts_read.append((x0, cut.shape[1])) or real_read_cut(cut, x0))
    monkeypatch.setattr(ocr_engine, "FALLBACK", 1.01)
    # one unsure letter, the "i" of "evidence" (a look-alike of "l"): only that word is read again
    probs = [0.5 if i == fast.text.index("evidence") + 2 else 1.0 for i in range(len(fast.chars))]
    monkeypatch.setattr(engine, "_read", lambda *a: [Decoded(chars=fast.chars, probs=probs, spans=fast.spans)])
    monkeypatch.setattr(reread, "UNSURE_CHAR", 0.9)
    (read,) = engine.recognise([crop])
    assert len(cuts_read) == 1
    x0, width = cuts_read[0]
    assert 0 < x0 and x0 + width < crop.shape[1]  # a cut, not the whole line
    assert read.text.split() == fast.text.split()  # this image reads the same both ways


def test_unsure_parts_run_from_word_gap_to_word_gap() -> None:
    from mediafleet.workers.ocr.reread import cuts, unsure_parts

    # "Ab ci eF": each letter 10 px, words 30 px apart; "ci" holds an unsure letter
    chars = list("Ab ci eF")
    spans = [(0, 10), (10, 20), (35, 35), (50, 60), (60, 70), (85, 85), (100, 110), (110, 120)]
    probs = [1.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0]
    line = Decoded(chars=chars, probs=probs, spans=spans)
    assert unsure_parts(line, 130) == [(35.0, 85.0)]
    assert cuts([(35.0, 85.0)], 130, 20) == [(25, 95, [(35.0, 85.0)])]  # 0.5 line heights of context
    assert cuts([(35.0, 85.0)], 90, 20) == [(25, 90, [(35.0, 85.0)])]  # no further than the line's end
    # the first and last words own the line's ends; neighbours' cuts are read together
    line = Decoded(chars=chars, probs=[0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5], spans=spans)
    assert unsure_parts(line, 130) == [(0.0, 35.0), (85.0, 130.0)]
    parts = [(0.0, 35.0), (200.0, 240.0)]
    assert cuts(parts, 1000, 20) == [(0, 45, [parts[0]]), (190, 250, [parts[1]])]
    assert cuts(parts, 1000, 100) == [(0, 290, parts)]  # 65 columns apart: under a line height


def test_a_plain_word_unsure_of_a_letter_without_a_look_alike_is_not_read_again() -> None:
    from mediafleet.workers.ocr.reread import unsure_parts, worth_reading

    def read_again(word: str, unsure: int) -> bool:
        # "the <word> end", each character 10 px, words 30 px apart; one unsure character in <word>
        chars = list(f"the {word} end")
        spans, x = [], 0.0
        for c in chars:
            spans.append((x, x) if c == " " else (x, x + 10))
            x += 15 if c == " " else 10
        probs = [0.5 if i == 4 + unsure else 1.0 for i in range(len(chars))]
        line = Decoded(chars=chars, probs=probs, spans=spans)
        (part,) = unsure_parts(line, int(x))  # the word is unsure either way
        return worth_reading(line, part)

    assert not read_again("header", 1)  # "e": no other character looks like it
    assert not read_again("header,", 2)  # a plain word with a closing comma
    assert read_again("header:", 6)  # the unsure mark itself: "::" in reST
    assert read_again("field", 1)  # "i" passes for "l" and "1"
    assert read_again("version", 0)  # "v" is "V" but for its size
    assert read_again("Header", 1)  # a capital: names and sentence starts are read again
    assert read_again("heade0", 1)  # a digit in the word
    assert read_again("head()", 1)  # a symbol in the word


def test_a_reread_part_replaces_the_fast_reading_there() -> None:
    from mediafleet.workers.ocr.reread import splice

    line = Decoded(chars=list("ab cx ef"), probs=[1.0, 1.0, 0.9, 1.0, 0.4, 1.0, 1.0, 1.0],
                   spans=[(0, 10), (10, 20), (30, 40), (50, 60), (60, 70), (80, 90), (100, 110), (110, 120)])
    # the small recogniser's reading of columns 25-95 (context on each side), in the line's pixels
    read = Decoded(chars=list("b cd e"), probs=[0.6, 0.99, 0.98, 0.97, 0.99, 0.5],
                   spans=[(25, 30), (35, 40), (50, 60), (60, 70), (80, 90), (92, 95)])
    out = splice(line, [((35.0, 85.0), read)], 1.0)
    assert out.text == "ab cd ef"  # the context's letters and edge spaces are not taken
    assert out.probs == [1.0, 1.0, 1.0, 0.98, 0.97, 1.0, 1.0, 1.0]
    assert out.spans[3:5] == [(50, 60), (60, 70)]
    # a part the small recogniser reads nothing in keeps the fast reading
    assert splice(line, [((35.0, 85.0), Decoded(chars=[], probs=[], spans=[]))], 1.0) == line


def test_chinese_lines_are_read() -> None:
    # Not only Latin: the fast recogniser keeps its whole dictionary (a head cut to the Latin
    # classes read the first line as "Jt" at probability 0.977).
    from mediafleet.workers.ocr.lines import read_lines
    from mediafleet.workers.pdf.mupdf import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=400, height=120)
    page.insert_text((20, 50), "\u4e2d\u6587\u6587\u672c\u8bc6\u522b\u6d4b\u8bd5", fontname="china-s", fontsize=24)
    page.insert_text((20, 95), "\u65e5\u5e38\u4ef7\u683c\u5f88\u597d", fontname="china-s", fontsize=24)
    pix = page.get_pixmap(dpi=200)
    image = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, pix.n)[:, :, :3][:, :, ::-1].copy()
    lines = read_lines(image, det_max_side=2000, engine=OcrEngine(threads=1))
    assert [ln.text for ln in lines] == ["\u4e2d\u6587\u6587\u672c\u8bc6\u522b\u6d4b\u8bd5",
                                         "\u65e5\u5e38\u4ef7\u683c\u5f88\u597d"]


def test_the_detector_gets_rapidocrs_own_input_and_finds_its_lines() -> None:
    import cv2

    engine = OcrEngine(threads=1)
    page = np.full((900, 700, 3), 255, np.uint8)
    for k, text in enumerate(["Located evidence", "of scanned pages", "read line by line"]):
        cv2.putText(page, text, (40, 120 + 90 * k), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (0, 0, 0), 2)
    page[::7, ::5] = 200  # some grey, so more than two values go through the table
    pre = engine._det.get_preprocess(900)
    seen = []
    infer = engine._det.infer
    engine._det.infer = lambda x: seen.append(x.copy()) or infer(x)
    try:
        engine._detect(page)
    finally:
        engine._det.infer = infer
    assert seen[0].dtype == np.float32 and np.array_equal(seen[0], pre(page))  # RapidOCR's own input, bit for bit
    ours, (theirs, _) = engine._detect(page), engine._det(page)
    assert len(ours) == 3 and np.array_equal(ours, theirs)


def test_the_recognisers_get_rapidocrs_own_input() -> None:
    engine = OcrEngine(threads=1)
    for text, width in (("Located evidence of it", 520), ("it", 60)):
        crop = _printed(text, width=width)
        crop[::5, ::3] = 90  # greys, so many values go through the table
        for ratio in (320 / 48, crop.shape[1] / crop.shape[0] * 1.5, crop.shape[1] / crop.shape[0]):
            theirs = engine._rec.resize_norm_img(crop, ratio)[None].astype(np.float32)
            assert np.array_equal(engine._input([crop], ratio), theirs)


def test_the_widest_gap_is_the_longest_run_of_ink_free_columns() -> None:
    from mediafleet.workers.ocr.spacing import _runs, _widest_blank

    def plain(blank: np.ndarray, start: int, stop: int) -> int:
        best = run = 0
        for value in blank[max(start, 0):max(stop, 0)]:
            run = run + 1 if value else 0
            best = max(best, run)
        return best

    rng = np.random.default_rng(7)
    for _ in range(500):
        blank = rng.random(int(rng.integers(0, 40))) < rng.random()
        start, stop = (int(v) for v in rng.integers(-3, 45, size=2))
        assert _widest_blank(_runs(blank), start, stop) == plain(blank, start, stop)


def test_the_detector_sees_only_the_inked_part_of_a_page() -> None:
    page = np.full((1300, 900, 3), 250, np.uint8)
    assert _ink_box(page) is None  # nothing to find
    page[600:620, 100:300] = 0
    x0, y0, x1, y1 = _ink_box(page)
    assert x0 <= 100 - 32 and x1 >= 300 + 32 and y0 <= 600 - 32 and y1 >= 620 + 32  # its margin
    assert min(x1 - x0, y1 - y0) >= 736  # never so small that the detector would scale it up
    assert 0 <= x0 < x1 <= 900 and 0 <= y0 < y1 <= 1300


def test_a_recogniser_without_a_dictionary_is_refused() -> None:
    engine = OcrEngine(threads=1)
    with pytest.raises(Unavailable) as err:
        _charset(engine._det.infer.session)  # a real model that carries no dictionary
    assert "dictionary" in err.value.message


def test_the_cpu_class_needs_no_gpu() -> None:
    check_device(DeviceClass.CPU)


@pytest.mark.skipif(_cuda_installed(), reason="onnxruntime's CUDA provider is installed here")
def test_a_gpu_worker_without_cuda_refuses_to_start() -> None:
    with pytest.raises(Unavailable) as err:
        check_device(DeviceClass.GPU)
    assert "CUDA" in err.value.message and "CPU" in err.value.message


@pytest.mark.skipif(_cuda_installed(), reason="onnxruntime's CUDA provider is installed here")
def test_a_gpu_engine_never_falls_back_to_cpu_quietly() -> None:
    # RapidOCR alone would log a warning and run on CPU; the engine refuses instead.
    with pytest.raises(Unavailable) as err:
        OcrEngine(threads=1, device=DeviceClass.GPU)
    assert "GPU" in err.value.message


def test_the_worker_cli_refuses_the_gpu_class_here(tmp_path) -> None:
    if _cuda_installed():
        pytest.skip("onnxruntime's CUDA provider is installed here")
    env = {**os.environ, "MEDIAFLEET_BROKER_URL": "redis://127.0.0.1:1/0", "MEDIAFLEET_BLOB_ROOT": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "mediafleet.cli", "worker", "--device", "gpu"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False)
    assert out.returncode == 2
    assert "cannot serve gpu" in out.stderr


# -- CTC positions ----------------------------------------------------------------------------------

def test_ctc_decoding_keeps_each_characters_columns() -> None:
    charset = ["<blank>", "a", "b", " "]
    steps = [1, 1, 0, 2, 0, 0, 2, 0]  # a a _ b _ _ b _  ->  "abb"
    probs = np.full((len(steps), len(charset)), 0.01)
    for t, label in enumerate(steps):
        probs[t, label] = 0.9
    line = decode(probs, charset, crop_width=32, input_width=64, used_width=64)
    assert line.text == "abb"
    assert line.spans == [(0.0, 8.0), (12.0, 16.0), (24.0, 28.0)]  # 8 input px per step, crop half as wide
    assert line.confidence == pytest.approx(0.9)


# -- word spaces ----------------------------------------------------------------------------------

def _crop(blobs: list[tuple[int, int]], width: int = 200, height: int = 40) -> np.ndarray:
    crop = np.full((height, width, 3), 255, np.uint8)
    for x0, x1 in blobs:
        crop[12:28, x0:x1] = 0
    return crop


def _line(text: str, centres: list[float]) -> Decoded:
    return Decoded(chars=list(text), probs=[0.9] * len(text), spans=[(c - 4, c + 4) for c in centres])


def test_a_wide_gap_between_characters_becomes_a_space() -> None:
    crop = _crop([(10, 20), (22, 32), (60, 70), (72, 82)])  # x-height 16 px; gap of 28 px between pairs
    spaced = with_spaces(_line("abcd", [15, 27, 65, 77]), crop)
    assert spaced.text == "ab cd"


def test_letter_gaps_and_punctuation_stay_unspaced() -> None:
    crop = _crop([(10, 20), (22, 32), (60, 70)])
    assert with_spaces(_line("ab:", [15, 27, 65]), crop).text == "ab:"
    assert with_spaces(_line("ab", [15, 27]), _crop([(10, 20), (22, 32)])).text == "ab"


def test_the_recognisers_own_spaces_set_the_bar_for_monospaced_lines() -> None:
    # Its own space sits at a 40 px gap; a 20 px gap (a wide letter cell) is then no word gap.
    crop = _crop([(10, 20), (40, 50), (90, 100)])
    assert with_spaces(_line("ab c", [15, 45, 70, 95]), crop).text == "ab c"


def test_a_space_the_recogniser_read_inside_a_word_is_taken_out() -> None:
    # "fi le": its space sits where the ink runs on (a 2 px letter gap against a 16 px x-height).
    crop = _crop([(10, 20), (22, 32), (34, 44), (70, 80)])
    assert with_spaces(_line("ab cd", [15, 27, 30, 39, 75]), crop).text == "abc d"


def test_an_unsure_space_far_narrower_than_the_lines_usual_one_is_taken_out() -> None:
    # Word gaps of 28 px; "b c" sits at a 10 px gap (a monospaced letter cell): out when the
    # recogniser was unsure of it, kept when it was sure.
    crop = _crop([(10, 20), (48, 58), (68, 78), (106, 116), (144, 154)], width=200)
    chars = list("a b c d e")
    centres = [15, 34, 53, 65, 73, 92, 111, 130, 149]
    spans = [(c - 4, c + 4) for c in centres]
    unsure = Decoded(chars=chars, probs=[0.99, 0.99, 0.99, 0.6, 0.99, 0.99, 0.99, 0.99, 0.99], spans=spans)
    sure = Decoded(chars=chars, probs=[0.99] * 9, spans=spans)
    assert with_spaces(unsure, crop).text == "a bc d e"
    assert with_spaces(sure, crop).text == "a b c d e"


def test_a_lone_full_stop_between_a_name_and_small_letters_is_joined() -> None:
    # "magic . mime": a monospaced dot's wide cell, spaced by the recogniser; "structure . At"
    # ends a sentence (a capital follows) and keeps its spaces.
    crop = _crop([(10, 20), (40, 44), (70, 80)])
    joined = with_spaces(_line("a . b", [15, 30, 42, 58, 75]), crop)
    assert joined.text == "a.b"
    assert joined.spans == [(11, 19), (38, 46), (71, 79)]
    assert with_spaces(_line("a . B", [15, 30, 42, 58, 75]), crop).text == "a . B"
    assert with_spaces(_line("a . 3", [15, 30, 42, 58, 75]), crop).text == "a.3"


def test_the_top_of_the_next_line_in_a_crop_does_not_hide_word_gaps() -> None:
    # A 12 px gap against a 16 px x-height is a word gap (0.6 of it or more is). The same crop
    # with the next line's letters showing along its bottom edge, rows apart from this line,
    # spaces the same.
    crop = _crop([(10, 20), (22, 32), (44, 54)], height=48)
    assert with_spaces(_line("abc", [15, 27, 49]), crop).text == "ab c"
    for x in (4, 35, 60):  # three letters of the next line, one under the gap
        crop[42:48, x:x + 6] = 0
    assert with_spaces(_line("abc", [15, 27, 49]), crop).text == "ab c"


def test_lines_whose_boxes_overlap_a_third_are_read_top_first() -> None:
    # The detector's box of the lower line reaches 11 px (0.31 of the upper line's height) into
    # it and starts further left: compared whole, the two were one row, read left to right.
    from mediafleet.workers.ocr.order import ocr_reading_order
    from mediafleet.workers.reading_order import reading_order

    upper = OcrLine("see when changes to the program", 0.99, (196.0, 749.0, 1502.0, 785.0))
    lower = OcrLine("use shows that it is possible", 0.99, (193.0, 774.0, 1504.0, 824.0))
    assert reading_order([lower, upper], lambda line: line.box) == [lower, upper]
    assert ocr_reading_order([lower, upper]) == [upper, lower]


def test_an_identifier_of_capitals_takes_no_plural_s() -> None:
    assert capitals("ASN1_SUCCESs") == "ASN1_SUCCESS"
    assert capitals("PDFs") == "PDFs"


# -- text and lines -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("word", "fixed"),
    [("NoT", "NOT"), ("ERRoR", "ERROR"), ("AsN1_succEss", "ASN1_SUCCESS"), ("FouND,", "FOUND,"),
     ("PDFs", "PDFs"), ("URLs.", "URLs."), ("McCoy", "McCoy"), ("iOS", "iOS"), ("Os", "Os"), ("Hello", "Hello"),
     ("NASA", "NASA")],
)
def test_same_shape_letters_in_a_word_of_capitals_are_capitals(word: str, fixed: str) -> None:
    assert capitals(word) == fixed
    assert normalise(f"if {word} then") == f"if {fixed} then"


def test_full_width_punctuation_becomes_ascii_outside_cjk_text() -> None:
    assert normalise("Hello，world：  ok\u3000now") == "Hello,world: ok now"
    assert normalise("日常价￥，好") == "日常价￥，好"


def test_pieces_of_one_line_are_joined_and_columns_are_not() -> None:
    left = OcrLine("Second", 0.9, (10, 10, 100, 40))
    right = OcrLine("page", 0.8, (130, 11, 200, 41))
    far = OcrLine("column", 0.9, (400, 10, 500, 40))
    below = OcrLine("next", 0.9, (10, 60, 80, 90))
    joined = join_pieces([right, far, left, below])
    texts = {ln.text: ln for ln in joined}
    assert set(texts) == {"Second page", "column", "next"}
    assert texts["Second page"].box == (10, 10, 200, 41)
    assert texts["Second page"].confidence == pytest.approx((0.9 * 6 + 0.8 * 4) / 10)
