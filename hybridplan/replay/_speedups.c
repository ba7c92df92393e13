/* The replay's trace-side work in C, beside its Python reference:
 *
 * - the chained hashes of a prompt's runs: the same values as hybridplan/replay/trace.py's ``Prompt.chains``
 *   and ``Prompt.unit_keys``, computed without making a tuple per hash;
 * - a Mooncake line's runs (``block_runs``), as hybridplan/replay/trace.py's ``_mooncake_line`` makes them;
 * - the ideal cache (``Ideal``): the same answers as hybridplan/replay/loop.py's ``PyIdeal``.
 *
 * Chains and unit keys:
 *
 * A chain step is trace.py's ``step(chain, key, length)``, one function written out in both twins: the key's
 * hash (Python's hash(), through the documented PyObject_Hash) folded into the chain, then the length folded
 * in, each fold splitmix64's finaliser of a·φ xor b on 64 bits (docs/replay.md "Keys"). Nothing depends on
 * how an interpreter hashes a tuple or an int's internals. tests/test_speedups.py holds every value equal to
 * the Python twin's and to the definition.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_table.h"

#if SIZEOF_PY_HASH_T != 8
#error "the keys fold a 64-bit Py_hash_t"
#endif

typedef uint64_t u64;

/* one fold: splitmix64's finaliser of a·φ xor b (trace.py ``_fold``) */
static inline u64 fold(u64 a, u64 b) {
    u64 x = a * 0x9e3779b97f4a7c15ULL ^ b;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* step(chain, key, length) from the key's hash, as a signed 64-bit value, never -1 (trace.py ``step``) */
static inline i64 step(i64 chain, i64 key_hash, i64 length) {
    i64 x = (i64)fold(fold((u64)chain, (u64)key_hash), (u64)length);
    return x == -1 ? -2 : x;
}

/* a run (key, length): its key's hash and its length; -1 with an exception set */
static int run_of(PyObject *run, i64 *key_hash, i64 *length) {
    if (!PyTuple_Check(run) || PyTuple_GET_SIZE(run) != 2) {
        PyErr_SetString(PyExc_TypeError, "a run is a (key, length) tuple");
        return -1;
    }
    Py_hash_t h = PyObject_Hash(PyTuple_GET_ITEM(run, 0));
    if (h == -1) return -1;
    long long n = AS_I64(PyTuple_GET_ITEM(run, 1));
    if (n == -1 && PyErr_Occurred()) return -1;
    *key_hash = (i64)h;
    *length = (i64)n;
    return 0;
}

/* item j of a prompt as a run: a (key, length) run, or (by_token) a token id, a run of one token */
static int item_of(PyObject *seq, Py_ssize_t j, int by_token, i64 *key_hash, i64 *length) {
    if (!by_token) return run_of(PyTuple_GET_ITEM(seq, j), key_hash, length);
    Py_hash_t h = PyObject_Hash(PyTuple_GET_ITEM(seq, j));
    if (h == -1) return -1;
    *key_hash = (i64)h;
    *length = 1;
    return 0;
}

/* 0, then after each run (or token) the chain of the runs so far (a run of no tokens changes nothing) */
static PyObject *chains_of(PyObject *seq, int by_token) {
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, by_token ? "token_chains(tokens): tokens must be a tuple"
                                                  : "chains(runs): runs must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *out = PyList_New(n + 1);
    if (!out) return NULL;
    i64 chain = 0;
    for (Py_ssize_t j = 0; j <= n; j++) {
        if (j) {
            i64 kh, len;
            if (item_of(seq, j - 1, by_token, &kh, &len) < 0) goto fail;
            if (len) chain = step(chain, kh, len);
        }
        PyObject *c = PyLong_FromLongLong(chain);
        if (!c) goto fail;
        PyList_SET_ITEM(out, j, c);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* chains(runs) */
static PyObject *chains(PyObject *module, PyObject *runs) {
    (void)module;
    return chains_of(runs, 0);
}

/* token_chains(tokens): the same over token ids */
static PyObject *token_chains(PyObject *module, PyObject *tokens) {
    (void)module;
    return chains_of(tokens, 1);
}

/* unit_keys(runs, unit, total): Prompt.unit_keys over runs, the chain before each run folded as it goes; the
 * list is made for total // unit keys (the caller's total is at most the runs' tokens) and cut to those found */
static PyObject *unit_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "unit_keys(runs, unit, total)");
        return NULL;
    }
    PyObject *runs = args[0];
    long long unit = AS_I64(args[1]), total = AS_I64(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(runs)) {
        PyErr_SetString(PyExc_TypeError, "unit_keys: runs must be a tuple");
        return NULL;
    }
    if (unit < 1) {
        PyErr_SetString(PyExc_ValueError, "unit_keys: the unit must be at least 1");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(runs), count = total >= unit ? (Py_ssize_t)(total / unit) : 0, got = 0;
    PyObject *out = PyList_New(count);
    if (!out) return NULL;
    i64 start = 0, end = unit, chain = 0; /* chain: of the whole runs before run j */
    for (Py_ssize_t j = 0; j < n && end <= total; j++) {
        i64 kh, len;
        if (run_of(PyTuple_GET_ITEM(runs, j), &kh, &len) < 0) goto fail;
        if (len < 0 || len > ((i64)1 << 62) - start) {
            PyErr_SetString(PyExc_OverflowError, "unit_keys: a prompt of 2**62 tokens or more");
            goto fail;
        }
        i64 stop_run = start + len, lim = stop_run < total ? stop_run : total;
        for (; end <= lim; end += unit) { /* the units that end in this run (or at its end) */
            PyObject *k = PyLong_FromLongLong(step(chain, kh, end - start));
            if (!k) goto fail;
            PyList_SET_ITEM(out, got++, k);
        }
        if (len) chain = step(chain, kh, len);
        start = stop_run;
    }
    if (got < count && PyList_SetSlice(out, got, count, NULL) < 0) goto fail; /* total past the runs' end */
    return out;
fail:
    /* the cells not yet set are NULL, which a list's deallocation skips */
    Py_DECREF(out);
    return NULL;
}

/* block_runs(ids, block, last): a Mooncake line's runs, (id, block) for each hash id and (the last id, last);
 * None when an id is not exactly an int (a bool, a float: the caller names the line). ids a non-empty list. */
static PyObject *block_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyList_GET_SIZE(args[0]) || !PyLong_Check(args[1]) ||
        !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "block_runs(ids, block, last): a non-empty list and two ints");
        return NULL;
    }
    PyObject *ids = args[0];
    Py_ssize_t n = PyList_GET_SIZE(ids);
    for (Py_ssize_t j = 0; j < n; j++)
        if (!PyLong_CheckExact(PyList_GET_ITEM(ids, j))) Py_RETURN_NONE;
    PyObject *out = PyTuple_New(n);
    if (!out) return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *run = PyTuple_Pack(2, PyList_GET_ITEM(ids, j), j + 1 < n ? args[1] : args[2]);
        if (!run) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, j, run);
    }
    return out;
}

/* ---- the ideal cache ----
 *
 * The longest prefix a request shares with any earlier request's prompt and output, to the token, then the
 * request remembered. A run (key, length) with tokens is known after a prefix by its slot, a mix of (the
 * chain of the runs before it, its key's hash), and its length; the chain after it is a mix of (slot, length).
 * Two runs after the same prefix with the same key share their first min(lengths) tokens; with the same
 * length too, the prefixes after them are equal.
 *
 * A radix tree: an edge is the runs of one request from a node (a chain) on, as (slot, length) pairs; a node's
 * edges are a list (``next``). A request follows the edges while its runs equal theirs; where it parts from
 * one, the edge is split there (its head keeps the pairs before, the rest starts the new node, the pairs are
 * shared, never copied) and the request's own remaining runs become a new edge beside the rest. So a trace of
 * distinct prompts costs one array a request, 16 bytes a run. Nothing is ever forgotten.
 */

static inline i64 mix2(i64 a, i64 b) {
    u64 x = (u64)a * 0x9e3779b97f4a7c15ULL ^ (u64)b;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x == (u64)EMPTY ? 1 : (i64)x;
}

typedef struct {
    i64 *pairs; /* slot, length, slot, length, ... (into a request's array; shared by the pieces of a split) */
    i64 runs;
    i64 next;   /* the next edge from the same node, -1: none */
    int owns;   /* its pairs start an allocation (a split's rest points inside one) */
} Edge;

typedef struct {
    PyObject_HEAD
    Table nodes; /* chain -> its first edge */
    Edge *edges;
    i64 n_edges, cap_edges;
    i64 bytes;   /* the pairs' bytes */
} Ideal;

static i64 edge_new(Ideal *t, i64 *pairs, i64 runs, i64 next, int owns) {
    Edge *e = (Edge *)room_for_one(t->edges, t->n_edges, &t->cap_edges, sizeof(Edge), 1024);
    if (!e) return -1;
    t->edges = e;
    t->edges[t->n_edges] = (Edge){pairs, runs, next, owns};
    return t->n_edges++;
}

/* the request's runs from i on, a new edge first among node's */
static int add_tail(Ideal *t, i64 node, const i64 *pairs, i64 i, i64 runs) {
    i64 n = runs - i;
    i64 *mine = (i64 *)malloc((size_t)(2 * n) * sizeof(i64));
    if (!mine) return -1;
    memcpy(mine, pairs + 2 * i, (size_t)(2 * n) * sizeof(i64));
    t->bytes += 2 * n * (i64)sizeof(i64);
    int fresh;
    Cell *c = table_slot(&t->nodes, node, &fresh);
    if (!c) {
        free(mine);
        return -1;
    }
    i64 e = edge_new(t, mine, n, fresh ? -1 : c->v1, 1);
    if (e < 0) {
        free(mine);
        return -1;
    }
    c = table_find(&t->nodes, node);
    c->v1 = e;
    return 0;
}

/* visit(runs, tokens, prompt_len): the tokens of the prompt shared with any earlier request's, then the
 * request remembered; runs: the prompt's and output's (key, length) runs, or tokens: their token ids */
static PyObject *Ideal_visit(Ideal *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "visit(runs, tokens, prompt_len)");
        return NULL;
    }
    PyObject *runs = args[0], *tokens = args[1];
    long long prompt_len = AS_I64(args[2]);
    if (prompt_len == -1 && PyErr_Occurred()) return NULL;
    int by_token = tokens != Py_None;
    PyObject *seq = by_token ? tokens : runs;
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "visit: runs (or tokens) must be a tuple");
        return NULL;
    }
    Py_ssize_t total = PyTuple_GET_SIZE(seq);
    i64 *pairs = (i64 *)malloc((size_t)(2 * (total ? total : 1)) * sizeof(i64));
    i64 *chains = (i64 *)malloc((size_t)(total + 1) * sizeof(i64)); /* the chain before each run */
    if (!pairs || !chains) {
        free(pairs);
        free(chains);
        return PyErr_NoMemory();
    }
    i64 runs_n = 0, chain = 0;
    for (Py_ssize_t j = 0; j < total; j++) {
        i64 kh, len;
        if (item_of(seq, j, by_token, &kh, &len) < 0) goto fail;
        if (len <= 0) continue; /* no tokens: no part of a prefix */
        i64 slot = mix2(chain, kh);
        chains[runs_n] = chain;
        pairs[2 * runs_n] = slot;
        pairs[2 * runs_n + 1] = len;
        runs_n++;
        chain = mix2(slot, len);
    }
    i64 shared = 0, pos = 0, i = 0;
    while (i < runs_n) {
        i64 node = chains[i], slot = pairs[2 * i], len = pairs[2 * i + 1];
        Cell *c = table_find(&t->nodes, node);
        i64 match = -1, other = 0;
        for (i64 e = c ? c->v1 : -1; e >= 0; e = t->edges[e].next) {
            const Edge *x = &t->edges[e];
            if (x->pairs[0] != slot) continue;
            if (x->pairs[1] == len) {
                match = e;
                break;
            }
            if (x->pairs[1] > other) other = x->pairs[1];
        }
        if (match < 0) { /* nothing like this run here; an earlier run of its key and another length shares */
            if (other && pos < prompt_len) shared += len < other ? len : other;
            if (add_tail(t, node, pairs, i, runs_n) < 0) goto nomem;
            break;
        }
        Edge *x = &t->edges[match];
        i64 k = 1;
        while (k < x->runs && i + k < runs_n && x->pairs[2 * k] == pairs[2 * (i + k)] &&
               x->pairs[2 * k + 1] == pairs[2 * (i + k) + 1])
            k++;
        for (i64 q = i; q < i + k; q++) {
            if (pos < prompt_len) shared += pairs[2 * q + 1];
            pos += pairs[2 * q + 1];
        }
        if (k == x->runs) { /* the whole edge: on from its end */
            i += k;
            continue;
        }
        if (i + k == runs_n) break; /* the request ends along the edge */
        /* part at k: the rest of the edge and the request's own runs start a node there */
        i64 at = chains[i + k];
        if (x->pairs[2 * k] == pairs[2 * (i + k)] && pos < prompt_len) { /* the same key, another length */
            i64 a = x->pairs[2 * k + 1], b = pairs[2 * (i + k) + 1];
            shared += a < b ? a : b;
        }
        i64 rest = edge_new(t, x->pairs + 2 * k, x->runs - k, -1, 0);
        if (rest < 0) goto nomem;
        x = &t->edges[match]; /* (edge_new may move the edges) */
        x->runs = k;
        int fresh;
        Cell *n = table_slot(&t->nodes, at, &fresh);
        if (!n) goto nomem;
        if (!fresh) t->edges[rest].next = n->v1; /* (a node inside an edge has no edges: a hash collision) */
        n->v1 = rest;
        if (add_tail(t, at, pairs, i + k, runs_n) < 0) goto nomem;
        break;
    }
    free(pairs);
    free(chains);
    return PyLong_FromLongLong(shared);
nomem:
    PyErr_NoMemory();
fail:
    free(pairs);
    free(chains);
    return NULL;
}

static int Ideal_init(Ideal *t, PyObject *args, PyObject *kwds) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", names)) return -1;
    if (t->nodes.cells) {
        PyErr_SetString(PyExc_RuntimeError, "ideal cache: already made");
        return -1;
    }
    if (table_init(&t->nodes, 1024) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Ideal_dealloc(Ideal *t) {
    table_free(&t->nodes);
    for (i64 e = 0; e < t->n_edges; e++)
        if (t->edges[e].owns) free(t->edges[e].pairs);
    free(t->edges);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *Ideal_bytes(Ideal *t, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(t->bytes + (i64)(t->nodes.cap * sizeof(Cell)) + t->cap_edges * (i64)sizeof(Edge));
}

static PyMethodDef Ideal_methods[] = {
    {"visit", (PyCFunction)(void (*)(void))Ideal_visit, METH_FASTCALL,
     "visit(runs, tokens, prompt_len): the prompt's tokens shared with any earlier request, then it remembered"},
    {NULL}};

static PyGetSetDef Ideal_getset[] = {
    {"bytes", (getter)Ideal_bytes, NULL, "the memory the tree holds", NULL}, {NULL}};

static PyTypeObject IdealType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hybridplan.replay._speedups.Ideal",
    .tp_basicsize = sizeof(Ideal),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the ideal cache in C (hybridplan/replay/loop.py PyIdeal)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ideal_init,
    .tp_dealloc = (destructor)Ideal_dealloc,
    .tp_methods = Ideal_methods,
    .tp_getset = Ideal_getset,
};

static PyMethodDef methods[] = {
    {"chains", (PyCFunction)chains, METH_O, "chains(runs): 0, then the chain of the runs after each run"},
    {"token_chains", (PyCFunction)token_chains, METH_O, "token_chains(tokens): chains over runs of one token"},
    {"unit_keys", (PyCFunction)(void (*)(void))unit_keys, METH_FASTCALL,
     "unit_keys(runs, unit, total): one key per full unit up to total tokens"},
    {"block_runs", (PyCFunction)(void (*)(void))block_runs, METH_FASTCALL,
     "block_runs(ids, block, last): a Mooncake line's runs; None when an id is not an int"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_speedups",
    .m_doc = "the replay's chained hashes and ideal cache in C (hybridplan/replay/trace.py, loop.py)",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&IdealType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&IdealType);
    if (PyModule_AddObject(m, "Ideal", (PyObject *)&IdealType) < 0) {
        Py_DECREF(&IdealType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
