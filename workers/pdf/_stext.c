/*
 * The text lines of a MuPDF structured-text page, read straight from MuPDF's structures.
 *
 * lines(address) gives what PyMuPDF's ``get_text("dict")`` gives for each text line (the
 * concatenated text of its spans and its bbox), without building the dict: no span, font or
 * colour objects, one tuple per line. It is the hot loop of the PDF text layer
 * (mediafleet.workers.pdf.mupdf.text_lines).
 *
 * It follows the dict's rules, so the two agree exactly (tests/test_pdf_speed_paths.py checks it
 * on every PDF it has):
 *   - a text block is read when its bbox overlaps the page's media box, a line when its bbox meets
 *     it, a character when its box overlaps it (the media box is the text page's);
 *   - a line's text is its characters' code points (an unpaired surrogate or a value outside
 *     Unicode reads as U+FFFD); its box is the union of its characters' quad boxes;
 *   - structure blocks are not entered (the dict nests them; the text layer does not read them).
 * A character's box is MuPDF's own quad, as in the dict with PyMuPDF's quad corrections off (as
 * PyMuPDF 2 leaves them, and as mediafleet.workers.pdf.mupdf sets them). Where the dict would
 * still differ (a vertical line, whose characters PyMuPDF stretches to their size) or a code point
 * is one it would spell differently, it gives None, and the caller reads that page through the dict.
 *
 * It reads MuPDF's structs, so it is built against the headers of the MuPDF that PyMuPDF ships
 * (setup.py) and used only when that is the MuPDF at run time (MUPDF_VERSION). It calls no MuPDF
 * function, so it links against nothing but Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>

#include "mupdf/fitz.h"

static int rects_overlap(fz_rect a, fz_rect b)
{
    return !(a.x0 >= b.x1 || a.y0 >= b.y1 || a.x1 <= b.x0 || a.y1 <= b.y0);
}

/* MuPDF's fz_empty_rect, fz_infinite_rect, fz_intersect_rect, fz_union_rect and fz_rect_from_quad,
 * which live in the library, not its headers. */
static const fz_rect empty_rect = {FZ_MAX_INF_RECT, FZ_MAX_INF_RECT, FZ_MIN_INF_RECT, FZ_MIN_INF_RECT};
static const fz_rect infinite_rect = {FZ_MIN_INF_RECT, FZ_MIN_INF_RECT, FZ_MAX_INF_RECT, FZ_MAX_INF_RECT};

static fz_rect intersect(fz_rect a, fz_rect b)
{
    if (fz_is_infinite_rect(b)) return a;
    if (fz_is_infinite_rect(a)) return b;
    if (a.x0 < b.x0) a.x0 = b.x0;
    if (a.y0 < b.y0) a.y0 = b.y0;
    if (a.x1 > b.x1) a.x1 = b.x1;
    if (a.y1 > b.y1) a.y1 = b.y1;
    return a;
}

static fz_rect unite(fz_rect a, fz_rect b)
{
    if (!fz_is_valid_rect(b)) return a;
    if (!fz_is_valid_rect(a)) return b;
    if (fz_is_infinite_rect(a)) return a;
    if (fz_is_infinite_rect(b)) return b;
    if (a.x0 > b.x0) a.x0 = b.x0;
    if (a.y0 > b.y0) a.y0 = b.y0;
    if (a.x1 < b.x1) a.x1 = b.x1;
    if (a.y1 < b.y1) a.y1 = b.y1;
    return a;
}

static float min4(float a, float b, float c, float d)
{
    return fz_min(fz_min(a, b), fz_min(c, d));
}

static float max4(float a, float b, float c, float d)
{
    return fz_max(fz_max(a, b), fz_max(c, d));
}

static fz_rect quad_box(fz_quad q)
{
    static const fz_rect invalid = {0, 0, -1, -1};
    if (isnan(q.ll.x) || isnan(q.ll.y) || isnan(q.ul.x) || isnan(q.ul.y)
        || isnan(q.lr.x) || isnan(q.lr.y) || isnan(q.ur.x) || isnan(q.ur.y))
        return invalid;
    if (isinf(q.ll.x) && isinf(q.ll.y) && isinf(q.ul.x) && isinf(q.ul.y)
        && isinf(q.lr.x) && isinf(q.lr.y) && isinf(q.ur.x) && isinf(q.ur.y))
        return infinite_rect;
    fz_rect r;
    r.x0 = min4(q.ll.x, q.lr.x, q.ul.x, q.ur.x);
    r.y0 = min4(q.ll.y, q.lr.y, q.ul.y, q.ur.y);
    r.x1 = max4(q.ll.x, q.lr.x, q.ul.x, q.ur.x);
    r.y1 = max4(q.ll.y, q.lr.y, q.ul.y, q.ur.y);
    return r;
}

typedef struct {
    Py_UCS4 *text;
    Py_ssize_t size;
} Buffer;

static int grow(Buffer *buf)
{
    Py_ssize_t size = buf->size * 2;
    Py_UCS4 *text = PyMem_Realloc(buf->text, (size_t)size * sizeof(Py_UCS4));
    if (!text) {
        PyErr_NoMemory();
        return -1;
    }
    buf->text = text;
    buf->size = size;
    return 0;
}

enum { DONE = 0, FAILED = -1, USE_DICT = 1 };

/* One line's tuple appended to out; USE_DICT when the dict must read the page. */
static int add_line(PyObject *out, const fz_stext_line *line, fz_rect clip, int open, Buffer *buf)
{
    if (line->wmode) return USE_DICT; /* PyMuPDF stretches each character's box to its size */
    Py_ssize_t n = 0;
    fz_rect box = empty_rect;
    for (const fz_stext_char *ch = line->first_char; ch; ch = ch->next) {
        fz_rect r = quad_box(ch->quad);
        if (!open && !rects_overlap(clip, r)) continue;
        int c = ch->c;
        if (c < 0 || c > 0x10FFFF) return USE_DICT;
        if (n == buf->size && grow(buf) < 0) return FAILED;
        buf->text[n++] = (c >= 0xD800 && c <= 0xDFFF) ? 0xFFFD : (Py_UCS4)c;
        box = unite(box, r);
    }
    PyObject *text = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf->text, n);
    if (!text) return FAILED;
    PyObject *item = Py_BuildValue("(Ndddd)", text, (double)box.x0, (double)box.y0, (double)box.x1, (double)box.y1);
    if (!item) return FAILED;
    int rc = PyList_Append(out, item);
    Py_DECREF(item);
    return rc < 0 ? FAILED : DONE;
}

static PyObject *lines(PyObject *self, PyObject *arg)
{
    const fz_stext_page *page = (const fz_stext_page *)PyLong_AsVoidPtr(arg);
    if (!page) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no text page at address 0");
        return NULL;
    }
    fz_rect clip = page->mediabox;
    int open = fz_is_infinite_rect(clip);
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Buffer buf = {PyMem_Malloc(256 * sizeof(Py_UCS4)), 256};
    if (!buf.text) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    int rc = DONE;
    for (const fz_stext_block *block = page->first_block; block && rc == DONE; block = block->next) {
        if (block->type != FZ_STEXT_BLOCK_TEXT || !(open || rects_overlap(clip, block->bbox))) continue;
        for (const fz_stext_line *line = block->u.t.first_line; line && rc == DONE; line = line->next) {
            if (!open && fz_is_empty_rect(intersect(clip, line->bbox))) continue;
            rc = add_line(out, line, clip, open, &buf);
        }
    }
    PyMem_Free(buf.text);
    if (rc == DONE) return out;
    Py_DECREF(out);
    if (rc == FAILED) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_O,
     "lines(address: int) -> list[tuple[str, float, float, float, float]] | None\n\n"
     "Each text line of the fz_stext_page at address: its text and bbox (x0, y0, x1, y1), as\n"
     "get_text(\"dict\") gives them; None where the dict must read the page."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stext", "The text lines of a MuPDF structured-text page.", -1, methods,
};

PyMODINIT_FUNC PyInit__stext(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "MUPDF_VERSION", FZ_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
