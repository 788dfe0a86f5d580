/*
 * A keyframe's sharpness, in C: the variance of the Laplacian of a grey frame.
 *
 * variance(grey) gives exactly what mediafleet.workers.video.shots.grey_sharpness's OpenCV form
 * gives (tests/test_video_analysis.py checks both on decoded frames, random pixels and every small
 * size): OpenCV's Laplacian with its default 1-pixel aperture, the kernel
 *
 *        0  1  0
 *        1 -4  1
 *        0  1  0
 *
 * with the border reflected without repeating the edge pixel (BORDER_REFLECT_101; a frame one
 * pixel wide or high reads its only pixel), then the mean square less the squared mean. The sums
 * are integers here (OpenCV's are exact too: 16-bit values, sums far below 2**53), and the two
 * divisions and the subtraction are the same double operations in the same order, with nothing
 * contracted into fused multiply-adds (setup.py builds it with -ffp-contract=off).
 *
 * OpenCV's form makes the 16-bit Laplacian frame, then reads it twice (sum, sum of squares): three
 * passes. This is one pass over the grey frame, about a quarter of the time on a 320x180 frame.
 * Anything but a 2-D array of bytes with contiguous rows gives None: the OpenCV form reads those.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* BORDER_REFLECT_101's neighbour index: -1 reads 1, n reads n - 2; a length of 1 reads 0. */
static inline Py_ssize_t reflect(Py_ssize_t i, Py_ssize_t n)
{
    if (n == 1)
        return 0;
    if (i < 0)
        return 1;
    if (i >= n)
        return n - 2;
    return i;
}

/* One row's Laplacian, summed and squared; above and below are the neighbouring rows (reflected). */
static inline void row_sums(const uint8_t *above, const uint8_t *row, const uint8_t *below, Py_ssize_t width,
                            int64_t *sum, int64_t *squares)
{
    int64_t s = 0, q = 0;
    int32_t v;
    if (width == 1) {
        v = above[0] + below[0] - 2 * row[0];
        *sum += v;
        *squares += (int64_t)v * v;
        return;
    }
    v = above[0] + below[0] + 2 * row[1] - 4 * row[0];
    s += v;
    q += (int64_t)v * v;
    /* The inner pixels, in chunks of 1024 whose int32 partial sums cannot overflow (|w| <= 1020,
     * so w * w <= 1040400 and 1024 of them stay under 2**31), which lets the compiler vectorise. */
    Py_ssize_t x = 1;
    while (x < width - 1) {
        Py_ssize_t end = x + 1024 < width - 1 ? x + 1024 : width - 1;
        int32_t ps = 0, pq = 0;
        for (Py_ssize_t k = x; k < end; k++) {
            int32_t w = (int32_t)above[k] + below[k] + row[k - 1] + row[k + 1] - 4 * (int32_t)row[k];
            ps += w;
            pq += w * w;
        }
        s += ps;
        q += pq;
        x = end;
    }
    v = above[width - 1] + below[width - 1] + 2 * row[width - 2] - 4 * row[width - 1];
    s += v;
    q += (int64_t)v * v;
    *sum += s;
    *squares += q;
}

static PyObject *variance(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (view.ndim != 2 || view.itemsize != 1 || (view.format != NULL && strcmp(view.format, "B") != 0) ||
        view.strides[1] != 1 || view.shape[0] < 1 || view.shape[1] < 1 || view.strides[0] < view.shape[1]) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    const uint8_t *pixels = (const uint8_t *)view.buf;
    Py_ssize_t height = view.shape[0], width = view.shape[1], stride = view.strides[0];
    int64_t sum = 0, squares = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t y = 0; y < height; y++) {
        row_sums(pixels + reflect(y - 1, height) * stride, pixels + y * stride, pixels + reflect(y + 1, height) * stride,
                 width, &sum, &squares);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    double n = (double)height * (double)width;
    double mean = (double)sum / n;
    return PyFloat_FromDouble((double)squares / n - mean * mean);
}

static PyMethodDef methods[] = {
    {"variance", variance, METH_O, "variance(grey): the variance of the Laplacian of a grey frame, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sharp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sharp(void)
{
    return PyModule_Create(&module);
}
