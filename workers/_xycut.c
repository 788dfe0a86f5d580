/*
 * The recursive XY-cut of mediafleet.workers.reading_order, in C.
 *
 * order(boxes, overlap, min_column) gives the indices of boxes, each (x0, y0, x1, y1, index), in
 * reading order: exactly what reading_order_indices gives (tests/test_pdf_speed_paths.py checks
 * both against the plain XY-cut it states, on random layouts and every page of real PDFs). It is
 * that plain form, with an explicit stack instead of recursion:
 *
 *   a region of at most one box reads as itself; otherwise its rows are its boxes grouped along y
 *   (sorted by (y0, y1), stably; a box joins the group before it when the group's end is past the
 *   box's start by more than overlap * the smaller of its height and the previous box's). A region
 *   whose boxes all share an x stretch longer than overlap * the widest box reads as its rows.
 *   Else its columns are grouped the same way along x, the widest gap between consecutive rows
 *   (h) and between consecutive columns that leave real columns on both sides (the widest group
 *   on the narrower side at least min_column of the widest on the other; v) are found, first
 *   widest first; the region is cut between columns when v is wider than twice h, else between
 *   rows, else read as its rows; each part is read in turn. Rows read left to right (stably by x0).
 *
 * Arithmetic is in doubles, as Python's floats, in the same order, and nothing is contracted
 * (setup.py builds it with -ffp-contract=off), so every comparison comes out as in Python. A box
 * with a NaN, or anything but five numbers, gives None: the Python form reads those.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef struct {
    double x0, y0, x1, y1;
} Box;

typedef struct {
    const Box *boxes;
    int axis; /* 0: (x0, x1), 1: (y0, y1), 2: x0 alone */
} Key;

static inline int before(const Key *key, Py_ssize_t a, Py_ssize_t b)
{
    const Box *p = key->boxes + a, *q = key->boxes + b;
    switch (key->axis) {
    case 0: return p->x0 < q->x0 || (p->x0 == q->x0 && p->x1 < q->x1);
    case 1: return p->y0 < q->y0 || (p->y0 == q->y0 && p->y1 < q->y1);
    default: return p->x0 < q->x0;
    }
}

/* A stable sort of idx[0..n) (a merge sort through tmp), skipped when already in order. */
static void stable_sort(Py_ssize_t *idx, Py_ssize_t *tmp, Py_ssize_t n, const Key *key)
{
    Py_ssize_t i;
    for (i = 1; i < n && !before(key, idx[i], idx[i - 1]); i++) {}
    if (i >= n) return;
    for (Py_ssize_t width = 1; width < n; width *= 2) {
        for (Py_ssize_t lo = 0; lo < n; lo += 2 * width) {
            Py_ssize_t mid = lo + width < n ? lo + width : n;
            Py_ssize_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            Py_ssize_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi) tmp[k++] = before(key, idx[b], idx[a]) ? idx[b++] : idx[a++];
            while (a < mid) tmp[k++] = idx[a++];
            while (b < hi) tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

static inline double lo_of(const Box *b, int axis) { return axis == 0 ? b->x0 : b->y0; }
static inline double hi_of(const Box *b, int axis) { return axis == 0 ? b->x1 : b->y1; }

/* Groups of sorted[0..n) along axis: their first positions (first[g], first[count] = n) and
 * extents (the least start, the largest end); returns the count. */
static Py_ssize_t group(const Box *boxes, const Py_ssize_t *sorted, Py_ssize_t n, int axis, double overlap,
                        Py_ssize_t *first, double *starts, double *ends)
{
    Py_ssize_t count = 0;
    double end = 0.0, last = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Box *it = boxes + sorted[i];
        double start = lo_of(it, axis), stop = hi_of(it, axis);
        double size = stop - start;
        double smaller = last < size ? last : size;
        if (count && end - start > overlap * smaller) {
            if (stop > end) end = stop;
            if (start < starts[count - 1]) starts[count - 1] = start;
            if (stop > ends[count - 1]) ends[count - 1] = stop;
        } else {
            first[count] = i;
            starts[count] = start;
            ends[count] = stop;
            count++;
            end = stop;
        }
        last = size;
    }
    first[count] = n;
    return count;
}

/* The widest gap between consecutive groups whose sides are real parts: its index (> 0) and gap
 * in *gap, or 0 for none. wb and wa are scratch (count entries each). */
static Py_ssize_t best_cut(const double *starts, const double *ends, Py_ssize_t count, double min_part,
                           double *wb, double *wa, double *gap)
{
    for (Py_ssize_t g = 0; g < count; g++) {
        double w = ends[g] - starts[g];
        wb[g] = g && !(w > wb[g - 1]) ? wb[g - 1] : w;
    }
    for (Py_ssize_t g = count - 1; g >= 0; g--) {
        double w = ends[g] - starts[g];
        wa[g] = g < count - 1 && !(w > wa[g + 1]) ? wa[g + 1] : w;
    }
    Py_ssize_t best = 0;
    double end_max = ends[0];
    for (Py_ssize_t i = 1; i < count; i++) {
        double a = wb[i - 1], b = wa[i];
        double narrow = b < a ? b : a, wide = b < a ? a : b;
        if (!(narrow < min_part * wide)) {
            double g = starts[i] - end_max;
            if (!best || g > *gap) {
                best = i;
                *gap = g;
            }
        }
        if (ends[i] > end_max) end_max = ends[i];
    }
    return best;
}

typedef struct {
    const Box *boxes;
    Py_ssize_t n;
    Py_ssize_t *perm, *ys, *xs, *tmp, *first_y, *first_x, *stack;
    double *starts_y, *ends_y, *starts_x, *ends_x, *wb, *wa;
    Py_ssize_t *out;
    Py_ssize_t emitted;
} Work;

static void read_rows(Work *w, const Py_ssize_t *ys, const Py_ssize_t *first, Py_ssize_t rows)
{
    Key by_x0 = {w->boxes, 2};
    for (Py_ssize_t r = 0; r < rows; r++) {
        Py_ssize_t len = first[r + 1] - first[r];
        Py_ssize_t *row = w->tmp + w->n; /* the second half of tmp */
        memcpy(row, ys + first[r], (size_t)len * sizeof *row);
        stable_sort(row, w->tmp, len, &by_x0);
        memcpy(w->out + w->emitted, row, (size_t)len * sizeof *row);
        w->emitted += len;
    }
}

static void xy_cut(Work *w, double overlap, double min_column)
{
    const Box *boxes = w->boxes;
    Key by_y = {boxes, 1}, by_x = {boxes, 0};
    Py_ssize_t top = 0;
    w->stack[top++] = 0;
    w->stack[top++] = w->n;
    while (top) {
        Py_ssize_t b = w->stack[--top], a = w->stack[--top];
        Py_ssize_t m = b - a;
        if (m <= 1) {
            if (m) w->out[w->emitted++] = w->perm[a];
            continue;
        }
        Py_ssize_t *ys = w->ys + a, *xs = w->xs + a;
        memcpy(ys, w->perm + a, (size_t)m * sizeof *ys);
        stable_sort(ys, w->tmp, m, &by_y);
        Py_ssize_t *first_y = w->first_y + a, *first_x = w->first_x + a;
        Py_ssize_t rows = group(boxes, ys, m, 1, overlap, first_y, w->starts_y + a, w->ends_y + a);
        double x1min = boxes[ys[0]].x1, x0max = boxes[ys[0]].x0, wmax = x1min - x0max;
        for (Py_ssize_t i = 1; i < m; i++) {
            const Box *it = boxes + ys[i];
            if (it->x1 < x1min) x1min = it->x1;
            if (it->x0 > x0max) x0max = it->x0;
            if (it->x1 - it->x0 > wmax) wmax = it->x1 - it->x0;
        }
        if (x1min - x0max > overlap * wmax) {
            read_rows(w, ys, first_y, rows);
            continue;
        }
        memcpy(xs, w->perm + a, (size_t)m * sizeof *xs);
        stable_sort(xs, w->tmp, m, &by_x);
        Py_ssize_t cols = group(boxes, xs, m, 0, overlap, first_x, w->starts_x + a, w->ends_x + a);
        double hgap = 0.0, vgap = 0.0;
        Py_ssize_t h = rows > 1 ? best_cut(w->starts_y + a, w->ends_y + a, rows, 0.0, w->wb, w->wa, &hgap) : 0;
        Py_ssize_t v = cols > 1 ? best_cut(w->starts_x + a, w->ends_x + a, cols, min_column, w->wb, w->wa, &vgap) : 0;
        Py_ssize_t k;
        if (v && (!h || vgap > 2.0 * hgap)) {
            memcpy(w->perm + a, xs, (size_t)m * sizeof *xs);
            k = first_x[v];
        } else if (h) {
            memcpy(w->perm + a, ys, (size_t)m * sizeof *ys);
            k = first_y[h];
        } else {
            read_rows(w, ys, first_y, rows);
            continue;
        }
        /* The part after the cut waits under the part before it. */
        w->stack[top++] = a + k;
        w->stack[top++] = b;
        w->stack[top++] = a;
        w->stack[top++] = a + k;
    }
}

static int read_box(PyObject *item, Box *box)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) return 0;
    double v[4];
    for (int i = 0; i < 4; i++) {
        PyObject *o = PyTuple_GET_ITEM(item, i);
        if (PyFloat_CheckExact(o)) v[i] = PyFloat_AS_DOUBLE(o);
        else return 0; /* ints and the rest: the Python form */
        if (isnan(v[i])) return 0;
    }
    box->x0 = v[0];
    box->y0 = v[1];
    box->x1 = v[2];
    box->y1 = v[3];
    return 1;
}

static PyObject *order(PyObject *self, PyObject *args)
{
    PyObject *list;
    double overlap, min_column;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!dd", &PyList_Type, &list, &overlap, &min_column)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (isnan(overlap) || isnan(min_column)) Py_RETURN_NONE;
    Work w = {0};
    w.n = n;
    Box *boxes = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *boxes);
    Py_ssize_t *ints = PyMem_Malloc((size_t)(10 * n + 2) * sizeof *ints);
    double *reals = PyMem_Malloc((size_t)(n ? n : 1) * 6 * sizeof *reals);
    PyObject *result = NULL;
    if (!boxes || !ints || !reals) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!read_box(PyList_GET_ITEM(list, i), boxes + i)) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    }
    w.boxes = boxes;
    w.perm = ints;
    w.ys = ints + n;
    w.xs = ints + 2 * n;
    w.tmp = ints + 3 * n; /* 2n: a sort's scratch, then a row */
    /* n + 1 each: a region [a, b) writes its groups' first positions at a..b (b is scratch to the
     * region that starts there, which is read later and writes its own). */
    w.first_y = ints + 5 * n;
    w.first_x = ints + 6 * n + 1;
    w.out = ints + 7 * n + 2;
    w.stack = ints + 8 * n + 2; /* 2n: each open part is two entries, and open parts are disjoint */
    w.starts_y = reals;
    w.ends_y = reals + n;
    w.starts_x = reals + 2 * n;
    w.ends_x = reals + 3 * n;
    w.wb = reals + 4 * n;
    w.wa = reals + 5 * n;
    for (Py_ssize_t i = 0; i < n; i++) w.perm[i] = i;
    if (n) xy_cut(&w, overlap, min_column);
    result = PyList_New(n);
    if (!result) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *index = PyTuple_GET_ITEM(PyList_GET_ITEM(list, w.out[i]), 4);
        Py_INCREF(index);
        PyList_SET_ITEM(result, i, index);
    }
done:
    PyMem_Free(boxes);
    PyMem_Free(ints);
    PyMem_Free(reals);
    return result;
}

static PyMethodDef methods[] = {
    {"order", order, METH_VARARGS,
     "order(boxes, overlap, min_column) -> list | None\n\n"
     "The indices (each box's fifth item) of boxes (x0, y0, x1, y1, index) in XY-cut reading order;\n"
     "None for a box with a NaN or of another shape."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_xycut", "The XY-cut reading order, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__xycut(void)
{
    return PyModule_Create(&module);
}
