/* vLLM's block pool as `replay` runs it: the C build of PyPool (hybridplan/engines/vllm/block_pool.py, the
 * reference, whose docstrings say what each step does and why). The two are kept equal step for step, so a
 * change to one is a change to both; tests/test_block_pool.py replays traces through both and compares every
 * figure.
 *
 * The state is PyPool's, in C: every key is a Python hash (never -1), every block number and request index is
 * >= 0, so -1 marks an empty cell in every table. Two differences of form, none of result:
 *
 * - PyPool gives every take a new number; here a block keeps its number from one holder to the next (the block
 *   evicted at the queue's head is the one taken, a block freed caching nothing waits on a stack of spare
 *   numbers), so the numbers stay below num_blocks and what PyPool keeps in dicts by number (the free queue's
 *   entries, the places hits left in its order, the holders of blocks held twice) is one array indexed by
 *   block;
 * - the keys noted evicted or dropped wait in a short list and go into their table in batches, each cell
 *   fetched ahead of its insertion (the table outgrows the CPU's caches on a long trace, and one insertion at
 *   a time waits on memory at each); a lookup's ``lost`` empties the list first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../_table.h"

#define NONE ((i64)-1)
#define EVICTED 1
#define DROPPED 2

/* ---- a deque of block numbers (the free queue's order) ---- */

typedef struct {
    i64 *items;
    size_t head, len, cap; /* cap a power of two */
} Deque;

static int deque_push(Deque *q, i64 v) {
    if (q->len == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 1024;
        i64 *items = (i64 *)malloc(cap * sizeof(i64));
        if (!items) return -1;
        for (size_t k = 0; k < q->len; k++) items[k] = q->items[(q->head + k) & (q->cap - 1)];
        free(q->items);
        q->items = items;
        q->head = 0;
        q->cap = cap;
    }
    q->items[(q->head + q->len) & (q->cap - 1)] = v;
    q->len++;
    return 0;
}

static inline i64 deque_popleft(Deque *q) {
    i64 v = q->items[q->head];
    q->head = (q->head + 1) & (q->cap - 1);
    q->len--;
    return v;
}

/* ---- the blocks a running request holds (PyPool.running's value) ---- */

typedef struct {
    i64 n_last, n_ents;
    i64 *last;  /* the frees at its end */
    i64 *slots; /* per entry: its block (-1: none) */
    i64 *keys;  /* per entry: its key */
    int *group; /* per entry: its group (-1: the block caches nothing) */
    /* stepwise (PyPool.pending): the later steps' takes and frees, where each step's end among them, how many
     * steps have run, and the most blocks those still to run hold at once beyond what they free */
    i64 n_pend, n_rounds, done, most;
    i64 *pend, *bounds;
} Running;    /* one allocation: the arrays follow the struct */

static void running_free(Running *r) { free(r); }

/* ---- scratch memory for one admit: taken from chunks kept from one admit to the next ---- */

typedef struct Chunk {
    struct Chunk *next;
    size_t cap, used;
    max_align_t data[];
} Chunk;

typedef struct {
    Chunk *head;
} Arena;

/* n bytes (aligned for an i64), or NULL */
static void *arena_take(Arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    Chunk *c = a->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > 65536 ? n : 65536;
        Chunk *d = (Chunk *)malloc(sizeof(Chunk) + cap);
        if (!d) return NULL;
        d->next = c;
        d->cap = cap;
        d->used = 0;
        a->head = c = d;
    }
    void *out = (char *)c->data + c->used;
    c->used += n;
    return out;
}

/* everything taken given back; one chunk as large as all of them kept for the next admit */
static void arena_reset(Arena *a) {
    Chunk *c = a->head;
    if (!c) return;
    if (!c->next) {
        c->used = 0;
        return;
    }
    size_t cap = 0;
    while (c) {
        Chunk *next = c->next;
        cap += c->cap;
        free(c);
        c = next;
    }
    a->head = NULL;
    if (arena_take(a, cap)) a->head->used = 0;
}

static void arena_free(Arena *a) {
    for (Chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ---- a growing array of i64 ---- */

typedef struct {
    i64 *a;
    i64 n, cap;
} Vec;

static int vec_grow_push(Vec *v, i64 x) {
    i64 *a = (i64 *)room_for_one(v->a, v->n, &v->cap, sizeof(i64), 256);
    if (!a) return -1;
    v->a = a;
    v->a[v->n++] = x;
    return 0;
}

/* x at the end (inline while there is room: an admit pushes every take and free of its plan) */
static inline int vec_push(Vec *v, i64 x) {
    if (v->n < v->cap) {
        v->a[v->n++] = x;
        return 0;
    }
    return vec_grow_push(v, x);
}

/* ---- several blocks holding one key (a list in PyPool), rare: cached's v2 > 0 then, v1 the index here ---- */

typedef struct {
    i64 *slots;
    i64 n, cap;
} Holders;

/* ---- a block, by its number ---- */

typedef struct {
    i64 key;     /* in the free queue: the key it caches */
    int group;   /* in the free queue: its group + 1 (0: it caches nothing) */
    int queued;  /* in the free queue */
    i64 stale;   /* places in the queue's order left by hits */
    i64 extra;   /* holders past the first */
} Block;

/* the keys noted evicted or dropped, waiting for the marks table */
#define PENDING 256
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(addr) __builtin_prefetch((addr), 1)
#else
#define PREFETCH(addr) ((void)0)
#endif

typedef struct {
    PyObject_HEAD
    i64 num_blocks, block, fresh, next, evictions, states, peak_states, peak_blocks, uncached_queued, queued;
    int uncached_first, n_groups, first_mamba;
    char *kinds; /* per group: 'a' or 'm' */
    Block *blocks; /* by number, the first ``next`` in use (numbers are given out from 0 up) */
    i64 cap_blocks;
    Vec spare;     /* numbers of blocks freed caching nothing (0.24.0+), taken before new ones */
    Deque order;   /* the free queue's order */
    Table *cached; /* per group: key -> (block, 0) or (index in holders, 1) */
    Table marks;   /* Mamba keys ever evicted (v1 bit EVICTED) or dropped by the rules (bit DROPPED) */
    i64 pending[PENDING], pending_bits[PENDING];
    int n_pending;
    Table running; /* request -> Running * */
    Holders *holders;
    i64 n_holders, cap_holders, free_holders; /* free_holders: a free list through slots == NULL, n = next */
    Arena arena;                              /* an admit's scratch arrays */
    Vec events, last;                         /* an admit's takes and frees, their room kept */
    i64 reserved; /* the blocks the stepwise requests' later steps still take (PyPool.reserved) */
} Pool;

static i64 floordiv(i64 a, i64 b) {
    i64 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* ---- cached keys ---- */

static inline i64 oldest(Pool *p, int g, i64 key, int *ok) {
    Cell *c = table_find(&p->cached[g], key);
    if (!c) {
        *ok = 0;
        return NONE;
    }
    *ok = 1;
    return c->v2 ? p->holders[c->v1].slots[0] : c->v1;
}

static i64 holders_new(Pool *p, i64 a, i64 b) {
    i64 h;
    if (p->free_holders >= 0) {
        h = p->free_holders;
        p->free_holders = p->holders[h].n;
    } else {
        Holders *hs = (Holders *)room_for_one(p->holders, p->n_holders, &p->cap_holders, sizeof(Holders), 64);
        if (!hs) return -1;
        p->holders = hs;
        h = p->n_holders++;
    }
    Holders *x = &p->holders[h];
    x->slots = (i64 *)malloc(4 * sizeof(i64));
    if (!x->slots) return -1;
    x->cap = 4;
    x->slots[0] = a;
    x->slots[1] = b;
    x->n = 2;
    return h;
}

static void holders_release(Pool *p, i64 h) {
    free(p->holders[h].slots);
    p->holders[h].slots = NULL;
    p->holders[h].n = p->free_holders;
    p->free_holders = h;
}

/* key now cached by ``slot`` in group g (dict.setdefault, then the list) */
static int cache_key(Pool *p, int g, i64 key, i64 slot) {
    int fresh;
    Cell *c = table_slot(&p->cached[g], key, &fresh);
    if (!c) return -1;
    if (fresh) {
        c->v1 = slot;
        c->v2 = 0;
        if (g == p->first_mamba) {
            p->states++;
            if (p->states > p->peak_states) p->peak_states = p->states;
        }
        return 0;
    }
    if (!c->v2) {
        i64 h = holders_new(p, c->v1, slot);
        if (h < 0) return -1;
        c->v1 = h;
        c->v2 = 1;
        return 0;
    }
    Holders *x = &p->holders[c->v1];
    i64 *s = (i64 *)room_for_one(x->slots, x->n, &x->cap, sizeof(i64), 4);
    if (!s) return -1;
    x->slots = s;
    x->slots[x->n++] = slot;
    return 0;
}

/* block ``old``, caching key in group g, evicted */
static int uncache_key(Pool *p, int g, i64 key, i64 old) {
    Cell *c = table_find(&p->cached[g], key);
    if (!c) {
        PyErr_SetString(PyExc_RuntimeError, "block pool: an evicted block's key is not cached");
        return -1;
    }
    if (!c->v2) {
        table_remove(&p->cached[g], c);
        if (g == p->first_mamba) p->states--;
        return 0;
    }
    Holders *x = &p->holders[c->v1];
    i64 k = 0;
    while (k < x->n && x->slots[k] != old) k++;
    if (k < x->n) {
        memmove(&x->slots[k], &x->slots[k + 1], (size_t)(x->n - k - 1) * sizeof(i64));
        x->n--;
    }
    if (x->n == 1) {
        i64 only = x->slots[0], h = c->v1;
        holders_release(p, h);
        c->v1 = only;
        c->v2 = 0;
    }
    return 0;
}

/* the waiting marks into their table: room made first, then each cell fetched a few insertions ahead */
static int flush_marks(Pool *p) {
    Table *t = &p->marks;
    int n = p->n_pending;
    p->n_pending = 0;
    while ((t->n + (size_t)n + 1) * 2 > t->cap)
        if (table_grow(t) < 0) return -1;
    size_t mask = t->cap - 1;
    for (int k = 0; k < n; k++) {
        if (k + 8 < n) PREFETCH(&t->cells[mix(p->pending[k + 8]) & mask]);
        int fresh;
        Cell *c = table_slot(t, p->pending[k], &fresh);
        if (!c) return -1; /* (not reached: the room was made above) */
        c->v1 |= p->pending_bits[k];
    }
    return 0;
}

/* a Mamba key noted evicted or dropped */
static inline int mark(Pool *p, i64 key, i64 bit) {
    if (p->n_pending == PENDING && flush_marks(p) < 0) return -1;
    p->pending[p->n_pending] = key;
    p->pending_bits[p->n_pending++] = bit;
    return 0;
}

/* a new block number, its entry zeroed */
static i64 new_number(Pool *p) {
    Block *b = (Block *)room_for_one(p->blocks, p->next, &p->cap_blocks, sizeof(Block), 1024);
    if (!b) return -1;
    p->blocks = b;
    memset(&b[p->next], 0, sizeof(Block));
    return p->next++;
}

/* ---- running the takes and frees ---- */

static int run_events(Pool *p, const i64 *events, i64 n, i64 *slots, const i64 *keys, const int *group) {
    for (i64 e = 0; e < n; e++) {
        i64 f = events[e];
        if (f < 0) {
            f = ~f;
            Block *b = &p->blocks[slots[f]];
            if (b->extra) { /* still held by another request */
                b->extra--;
                continue;
            }
            if (group[f] >= 0) {
                if (deque_push(&p->order, slots[f]) < 0) return -1;
                b = &p->blocks[slots[f]];
                b->key = keys[f];
                b->group = group[f] + 1;
                b->queued = 1;
                p->queued++;
            } else if (p->uncached_first) {
                if (vec_push(&p->spare, slots[f]) < 0) return -1;
                p->fresh++;
            } else {
                if (deque_push(&p->order, slots[f]) < 0) return -1;
                b->key = 0;
                b->group = 0;
                b->queued = 1;
                p->queued++;
                p->uncached_queued++;
            }
            continue;
        }
        i64 slot;
        if (p->fresh) {
            p->fresh--;
            slot = p->spare.n ? p->spare.a[--p->spare.n] : new_number(p);
            if (slot < 0) return -1;
        } else { /* the head of the free queue, evicting what it caches */
            Block *b;
            for (;;) {
                if (!p->order.len) {
                    PyErr_SetString(PyExc_RuntimeError, "block pool: a block was taken from an empty free queue");
                    return -1;
                }
                slot = deque_popleft(&p->order);
                b = &p->blocks[slot];
                if (!b->stale) break;
                b->stale--;
            }
            if (!b->queued) {
                PyErr_SetString(PyExc_RuntimeError, "block pool: the free queue's head is not queued");
                return -1;
            }
            /* the memory the next evictions read, fetched ahead: the block eight places down the free queue, and the
             * cached key's cell of the block four places down (whose entry came in four evictions ago). Written
             * here, not in a function of its own: GCC finds such a function free of effects and drops its calls */
            if (p->order.len > 8) {
                Deque *q = &p->order;
                PREFETCH(&p->blocks[q->items[(q->head + 7) & (q->cap - 1)]]);
                Block *c = &p->blocks[q->items[(q->head + 3) & (q->cap - 1)]];
                if (c->queued && c->group) {
                    Table *t = &p->cached[c->group - 1];
                    PREFETCH(&t->cells[mix(c->key) & (t->cap - 1)]);
                }
            }
            i64 key = b->key, g = b->group - 1;
            b->queued = 0;
            p->queued--;
            if (g < 0) {
                p->uncached_queued--;
            } else {
                if (uncache_key(p, (int)g, key, slot) < 0) return -1;
                p->evictions++;
                if (p->kinds[g] == 'm' && mark(p, key, EVICTED) < 0) return -1;
            }
        }
        if (e + 4 < n && events[e + 4] >= 0 && group[events[e + 4]] >= 0) { /* its cell in the cached keys */
            Table *t = &p->cached[group[events[e + 4]]];
            PREFETCH(&t->cells[mix(keys[events[e + 4]]) & (t->cap - 1)]);
        }
        if (group[f] >= 0 && cache_key(p, group[f], keys[f], slot) < 0) return -1;
        slots[f] = slot;
    }
    return 0;
}

/* ---- conversions ---- */

/* a list of ints (None -> NONE) into an array from the arena; NULL with an exception set */
static i64 *ints_of(Arena *a, PyObject *list, Py_ssize_t *n, const char *what) {
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "block pool: %s must be a list", what);
        return NULL;
    }
    *n = PyList_GET_SIZE(list);
    i64 *out = (i64 *)arena_take(a, (size_t)(*n ? *n : 1) * sizeof(i64));
    if (!out) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *x = PyList_GET_ITEM(list, i);
        if (x == Py_None) {
            out[i] = NONE;
            continue;
        }
        long long v = AS_I64(x);
        if (v == -1 && PyErr_Occurred()) return NULL;
        out[i] = (i64)v;
    }
    return out;
}

/* a stable sort of 0..n-1 by key[] (merge sort) */
static void sort_by(i64 *idx, i64 *tmp, const i64 *key, i64 n) {
    if (n < 2) return;
    i64 h = n / 2;
    sort_by(idx, tmp, key, h);
    sort_by(idx + h, tmp, key, n - h);
    i64 a = 0, b = h, k = 0;
    while (a < h && b < n) tmp[k++] = key[idx[b]] < key[idx[a]] ? idx[b++] : idx[a++];
    while (a < h) tmp[k++] = idx[a++];
    while (b < n) tmp[k++] = idx[b++];
    memcpy(idx, tmp, (size_t)n * sizeof(i64));
}

static i64 bisect_left(const i64 *a, i64 n, i64 x) {
    i64 lo = 0, hi = n;
    while (lo < hi) {
        i64 mid = (lo + hi) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static i64 bisect_right(const i64 *a, i64 lo, i64 n, i64 x) {
    i64 hi = n;
    while (lo < hi) {
        i64 mid = (lo + hi) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* ---- admit ---- */

/* one admit's plan and what is worked out from it (PyPool.admit's locals): arrays from the pool's arena, the
 * takes and frees in the pool's vectors */
typedef struct {
    Py_ssize_t n_steps, nblocks, n_mamba;
    i64 hit, hit_blocks, n_ents, na, nm, n_needs, n_hits;
    i64 m_kept; /* the Mamba hit blocks another request holds (PyPool.admit's m_kept) */
    i64 *steps, *attn, *mamba, *index, *need; /* the plan; None is NONE */
    i64 *offset;                              /* per group, its first entry */
    i64 *ents_key, *slots;                    /* per entry: its key, its block (NONE: not taken yet) */
    int *ents_group;                          /* per entry: its group, -1 where the block caches nothing */
    i64 *m_order, *m_needs, *m_behind, *m_index, *tmp, *hits;
    char *held, *freed;
    i64 *bounds; /* per step: where its takes and frees end in events */
    i64 n_rounds;
    Vec events, last;
} Work;

static void work_start(Pool *p, Work *w) {
    memset(w, 0, sizeof *w);
    w->events = p->events;
    w->last = p->last;
    w->events.n = w->last.n = 0;
}

static void work_done(Pool *p, Work *w) {
    p->events = w->events;
    p->last = w->last;
    arena_reset(&p->arena);
}

static int plan_error(void) {
    PyErr_SetString(PyExc_TypeError, "block pool: a plan is (steps, attn, (mamba, index, need))");
    return -1;
}

/* the plan read into w, every group's entries laid out one after another, and the Mamba blocks' orders */
static int read_plan(Pool *p, PyObject *plan, Work *w) {
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 3) return plan_error();
    PyObject *mamba_part = PyTuple_GET_ITEM(plan, 2);
    if (!PyTuple_Check(mamba_part) || PyTuple_GET_SIZE(mamba_part) != 3) return plan_error();
    Py_ssize_t n_index, n_need;
    Arena *a = &p->arena;
    if (!(w->steps = ints_of(a, PyTuple_GET_ITEM(plan, 0), &w->n_steps, "steps")) ||
        !(w->attn = ints_of(a, PyTuple_GET_ITEM(plan, 1), &w->nblocks, "keys")) ||
        !(w->mamba = ints_of(a, PyTuple_GET_ITEM(mamba_part, 0), &w->n_mamba, "keys")) ||
        !(w->index = ints_of(a, PyTuple_GET_ITEM(mamba_part, 1), &n_index, "index")) ||
        !(w->need = ints_of(a, PyTuple_GET_ITEM(mamba_part, 2), &n_need, "need")))
        return -1;
    if (!w->n_steps) {
        PyErr_SetString(PyExc_ValueError, "block pool: a plan has at least one step");
        return -1;
    }
    if (n_index != w->n_mamba || n_need != w->n_mamba) {
        PyErr_SetString(PyExc_ValueError, "block pool: the Mamba blocks' keys, indexes and needs differ in length");
        return -1;
    }
    int G = p->n_groups;
    w->hit_blocks = floordiv(w->hit, p->block);
    if (!(w->offset = (i64 *)arena_take(a, (size_t)(G + 1) * sizeof(i64)))) return -1;
    for (int g = 0; g < G; g++) {
        w->offset[g] = w->n_ents;
        if (p->kinds[g] == 'a') {
            w->n_ents += w->nblocks;
            w->na++;
        } else {
            w->n_ents += w->n_mamba;
            w->nm++;
        }
    }
    size_t ne = (size_t)(w->n_ents ? w->n_ents : 1), nmb = (size_t)(w->n_mamba ? w->n_mamba : 1);
    w->ents_key = (i64 *)arena_take(a, ne * sizeof(i64));
    w->ents_group = (int *)arena_take(a, ne * sizeof(int));
    w->slots = (i64 *)arena_take(a, ne * sizeof(i64));
    w->m_order = (i64 *)arena_take(a, nmb * sizeof(i64));
    w->m_needs = (i64 *)arena_take(a, nmb * sizeof(i64));
    w->m_behind = (i64 *)arena_take(a, nmb * sizeof(i64));
    w->m_index = (i64 *)arena_take(a, nmb * sizeof(i64));
    w->tmp = (i64 *)arena_take(a, nmb * sizeof(i64));
    w->held = (char *)arena_take(a, nmb);
    w->freed = (char *)arena_take(a, nmb);
    if (!w->ents_key || !w->ents_group || !w->slots || !w->m_order || !w->m_needs || !w->m_behind ||
        !w->m_index || !w->tmp || !w->held || !w->freed)
        return -1;
    for (int g = 0; g < G; g++) {
        const i64 *src = p->kinds[g] == 'a' ? w->attn : w->mamba;
        i64 len = p->kinds[g] == 'a' ? w->nblocks : w->n_mamba, o = w->offset[g];
        for (i64 i = 0; i < len; i++) {
            w->ents_key[o + i] = src[i] == NONE ? 0 : src[i];
            w->ents_group[o + i] = src[i] == NONE ? -1 : g;
            w->slots[o + i] = NONE;
        }
    }
    /* the new Mamba blocks in the order they are taken, and every Mamba block in the order it is passed */
    for (i64 i = 0; i < w->n_mamba; i++)
        if (w->need[i] != NONE) w->m_order[w->n_needs++] = i;
    sort_by(w->m_order, w->tmp, w->need, w->n_needs);
    for (i64 k = 0; k < w->n_needs; k++) w->m_needs[k] = w->need[w->m_order[k]];
    for (i64 i = 0; i < w->n_mamba; i++) w->m_behind[i] = i;
    sort_by(w->m_behind, w->tmp, w->index, w->n_mamba);
    for (i64 k = 0; k < w->n_mamba; k++) w->m_index[k] = w->index[w->m_behind[k]];
    return 0;
}

/* the blocks a hit holds from the start (attention's below it, Mamba's first) into w->hits; the count of
 * the distinct blocks they are that sit in the free queue, or -1 with an exception set; the Mamba ones not in
 * the queue (another request holds them) counted in w->m_kept */
static i64 hits_of(Pool *p, Work *w) {
    if (!w->hit) return 0;
    i64 most = w->na * w->hit_blocks + w->nm;
    if (!most) return 0;
    i64 *touched = (i64 *)arena_take(&p->arena, (size_t)most * sizeof(i64));
    if (!(w->hits = (i64 *)arena_take(&p->arena, (size_t)most * sizeof(i64))) || !touched) {
        PyErr_NoMemory();
        return -1;
    }
    int m_hit = w->n_mamba > 0 && w->need[0] == NONE;
    for (int g = 0; g < p->n_groups; g++) {
        if (p->kinds[g] == 'a') {
            for (i64 i = 0; i < w->hit_blocks; i++) w->hits[w->n_hits++] = w->offset[g] + i;
        } else if (m_hit) {
            w->hits[w->n_hits++] = w->offset[g];
        }
    }
    i64 n_touched = 0, queued = 0;
    for (i64 h = 0; h < w->n_hits; h++) {
        i64 f = w->hits[h];
        int ok = 0;
        i64 s = w->ents_group[f] < 0 ? NONE : oldest(p, w->ents_group[f], w->ents_key[f], &ok);
        if (!ok) {
            PyErr_SetString(PyExc_RuntimeError, "block pool: a hit block caches nothing the pool holds");
            return -1;
        }
        int seen = 0;
        for (i64 t = 0; t < n_touched; t++) seen |= touched[t] == s;
        if (!seen) {
            touched[n_touched++] = s;
            queued += p->blocks[s].queued;
        }
        if (p->kinds[w->ents_group[f]] == 'm' && !p->blocks[s].queued) w->m_kept++;
    }
    return queued;
}

/* the dry run: at no step does the request take more blocks than are free; a passed Mamba block frees one
 * but for the hit's blocks another request holds (PyPool._fits) */
static int fits(Pool *p, const Work *w, i64 avail) {
    i64 B = p->block, na = w->na, nm = w->nm, freed = 0;
    i64 new_blocks = na * (w->nblocks - w->hit_blocks) + nm * w->n_needs;
    i64 rounds = w->n_steps - 1 > 1 ? w->n_steps - 1 : 1;
    for (i64 k = 0; k < rounds; k++) {
        i64 c = w->steps[k], end = k + 1 < w->n_steps ? w->steps[k + 1] : c;
        i64 passed = bisect_left(w->m_index, w->n_mamba, floordiv(c - 1, B));
        freed = passed ? nm * passed - w->m_kept : 0;
        i64 a_taken = 0;
        if (end >= 1) {
            a_taken = floordiv(end - 1, B) + 1 - w->hit_blocks;
            if (a_taken < 0) a_taken = 0;
            if (a_taken > w->nblocks - w->hit_blocks) a_taken = w->nblocks - w->hit_blocks;
        }
        if (avail + freed - na * a_taken - nm * bisect_right(w->m_needs, 0, w->n_needs, end) < 0) return 0;
    }
    return avail + freed - new_blocks >= 0;
}

/* the hit's blocks taken out of the free queue, or held once more */
static int touch_hits(Pool *p, Work *w) {
    for (i64 h = 0; h < w->n_hits; h++) {
        i64 f = w->hits[h];
        int ok;
        i64 s = oldest(p, w->ents_group[f], w->ents_key[f], &ok);
        Block *b = &p->blocks[s];
        if (b->queued) {
            b->queued = 0;
            p->queued--;
            b->stale++;
        } else {
            b->extra++;
        }
        w->slots[f] = s;
    }
    return 0;
}

/* the steps laid out as one sequence of takes (f) and frees (~f) */
static int lay_out(Pool *p, Work *w) {
    i64 B = p->block;
    int G = p->n_groups;
    Vec *ev = &w->events;
    for (i64 i = 0; i < w->n_mamba; i++) {
        w->held[i] = w->need[i] == NONE;
        w->freed[i] = 0;
    }
    i64 a_next = w->hit_blocks, m_next = 0, m_gone = 0, last_step = w->n_steps - 1;
    i64 rounds = last_step > 1 ? last_step : 1;
    w->n_rounds = rounds;
    if (!(w->bounds = (i64 *)arena_take(&p->arena, (size_t)rounds * sizeof(i64)))) return -1;
    for (i64 k = 0; k < rounds; k++) {
        i64 c = w->steps[k], end = k < last_step ? w->steps[k + 1] : c;
        i64 limit = floordiv(c - 1, B);
        if (m_gone < w->n_mamba && w->m_index[m_gone] < limit) {
            i64 nb = 0; /* remove_skipped_blocks: the batch, then tail first in each Mamba group */
            while (m_gone < w->n_mamba && w->m_index[m_gone] < limit) {
                i64 i = w->m_behind[m_gone++];
                if (w->held[i] && !w->freed[i]) {
                    w->tmp[nb++] = i;
                    w->freed[i] = 1;
                }
            }
            for (int g = 0; g < G; g++) {
                if (p->kinds[g] != 'm') continue;
                for (i64 b = nb - 1; b >= 0; b--)
                    if (vec_push(ev, ~(w->offset[g] + w->tmp[b])) < 0) return -1;
            }
        }
        i64 a_stop = floordiv(end - 1, B) + 1;
        if (a_stop > w->nblocks) a_stop = w->nblocks;
        if (a_stop < a_next) a_stop = a_next;
        i64 m_stop = bisect_right(w->m_needs, m_next, w->n_needs, end);
        if (m_stop > m_next) {
            for (i64 t = m_next; t < m_stop; t++) w->held[w->m_order[t]] = 1;
            for (int g = 0; g < G; g++) {
                i64 o = w->offset[g];
                if (p->kinds[g] == 'a') {
                    for (i64 b = a_next; b < a_stop; b++)
                        if (vec_push(ev, o + b) < 0) return -1;
                } else {
                    for (i64 t = m_next; t < m_stop; t++)
                        if (vec_push(ev, o + w->m_order[t]) < 0) return -1;
                }
            }
            m_next = m_stop;
        } else if (a_stop > a_next) {
            for (int g = 0; g < G; g++) {
                if (p->kinds[g] != 'a') continue;
                for (i64 b = a_next; b < a_stop; b++)
                    if (vec_push(ev, w->offset[g] + b) < 0) return -1;
            }
        }
        a_next = a_stop;
        w->bounds[k] = ev->n;
    }
    for (int g = 0; g < G; g++) { /* what no step reached (a request of one token) */
        i64 o = w->offset[g];
        if (p->kinds[g] == 'a') {
            for (i64 b = a_next; b < w->nblocks; b++)
                if (vec_push(ev, o + b) < 0) return -1;
        } else {
            for (i64 t = m_next; t < w->n_needs; t++)
                if (vec_push(ev, o + w->m_order[t]) < 0) return -1;
        }
    }
    w->bounds[rounds - 1] = ev->n;
    /* at the end: group by group, each tail first (KVCacheManager.free), what the steps did not free */
    for (int g = 0; g < G; g++) {
        i64 o = w->offset[g];
        if (p->kinds[g] == 'a') {
            for (i64 b = w->nblocks - 1; b >= 0; b--)
                if (vec_push(&w->last, ~(o + b)) < 0) return -1;
        } else {
            for (i64 i = w->n_mamba - 1; i >= 0; i--)
                if (!w->freed[i] && vec_push(&w->last, ~(o + i)) < 0) return -1;
        }
    }
    return 0;
}

/* what the request holds till it finishes, kept by its index (copied out of w, in one allocation) */
/* the most blocks events[start:n] take beyond what they surely free (a block caching nothing), at any point of
 * them (PyPool's _peak) */
static i64 peak(const i64 *events, i64 start, i64 n, const int *group) {
    i64 c = 0, most = 0;
    for (i64 i = start; i < n; i++) {
        if (events[i] >= 0) {
            if (++c > most) most = c;
        } else if (group[~events[i]] < 0) {
            c--;
        }
    }
    return most;
}

static int keep_running(Pool *p, Work *w, i64 request, int stepwise) {
    size_t nl = (size_t)w->last.n, ne = (size_t)w->n_ents;
    /* stepwise: the events past the first step, and the later steps' ends (relative to them) */
    size_t np = 0, nr = 0;
    if (stepwise && w->n_rounds > 1) {
        np = (size_t)(w->events.n - w->bounds[0]);
        nr = (size_t)(w->n_rounds - 1);
    }
    Running *r = (Running *)malloc(sizeof(Running) + (nl + 2 * ne + np + nr) * sizeof(i64) + ne * sizeof(int));
    if (!r) return -1;
    i64 *arrays = (i64 *)(r + 1);
    *r = (Running){(i64)nl, (i64)ne, arrays, arrays + nl, arrays + nl + ne, (int *)(arrays + nl + 2 * ne + np + nr),
                   (i64)np, (i64)nr, 0, 0, arrays + nl + 2 * ne, arrays + nl + 2 * ne + np};
    if (nr) {
        if (np) memcpy(r->pend, w->events.a + w->bounds[0], np * sizeof(i64));
        for (size_t k = 0; k < nr; k++) r->bounds[k] = w->bounds[k + 1] - w->bounds[0];
        r->most = peak(r->pend, 0, r->n_pend, w->ents_group);
        p->reserved += r->most;
    }
    if (nl) memcpy(r->last, w->last.a, nl * sizeof(i64));
    memcpy(r->slots, w->slots, ne * sizeof(i64));
    memcpy(r->keys, w->ents_key, ne * sizeof(i64));
    memcpy(r->group, w->ents_group, ne * sizeof(int));
    int fresh;
    Cell *c = table_slot(&p->running, request, &fresh);
    if (!c) {
        running_free(r);
        return -1;
    }
    if (!fresh) { /* admitted again while running (PyPool keeps the last admit's too) */
        Running *old = (Running *)(intptr_t)c->v1;
        p->reserved -= old->most;
        running_free(old);
    }
    c->v1 = (i64)(intptr_t)r;
    return 0;
}

static PyObject *Pool_admit(Pool *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "admit(request, hit, plan, stepwise=False)");
        return NULL;
    }
    long long request = AS_I64(args[0]), hit = AS_I64(args[1]);
    if (PyErr_Occurred()) return NULL;
    int stepwise = 0;
    if (nargs == 4 && (stepwise = PyObject_IsTrue(args[3])) < 0) return NULL;
    PyObject *plan = args[2], *result = NULL;
    Work w;
    work_start(p, &w);
    w.hit = (i64)hit;
    if (read_plan(p, plan, &w) < 0) goto fail;
    i64 queued = hits_of(p, &w);
    if (queued < 0) goto fail;
    i64 avail = p->fresh + p->queued - queued - p->reserved;
    /* the dry run can only fail when the free blocks are fewer than the new ones (frees only add) */
    if (avail < w.na * (w.nblocks - w.hit_blocks) + w.nm * w.n_needs && !fits(p, &w, avail)) {
        result = Py_False;
    } else {
        if (touch_hits(p, &w) < 0 || lay_out(p, &w) < 0) goto fail;
        i64 now = stepwise && w.n_rounds > 1 ? w.bounds[0] : w.events.n;
        if (run_events(p, w.events.a, now, w.slots, w.ents_key, w.ents_group) < 0 ||
            keep_running(p, &w, (i64)request, stepwise) < 0)
            goto fail;
        /* the blocks held or caching an entry: all but the fresh ones and the uncached ones in the queue */
        i64 used = p->num_blocks - 1 - p->fresh - p->uncached_queued;
        if (used > p->peak_blocks) p->peak_blocks = used;
        result = Py_True;
    }
    Py_INCREF(result);
    work_done(p, &w);
    return result;
fail:
    if (!PyErr_Occurred()) PyErr_NoMemory();
    work_done(p, &w);
    return NULL;
}

/* a stepwise request's later steps run up to its step-th (PyPool.advance) */
static int run_steps(Pool *p, Running *r, i64 step) {
    if (step > r->n_rounds) step = r->n_rounds;
    if (step <= r->done) return 0;
    i64 start = r->done ? r->bounds[r->done - 1] : 0, stop = r->bounds[step - 1];
    p->reserved -= r->most;
    r->most = 0;
    if (run_events(p, r->pend + start, stop - start, r->slots, r->keys, r->group) < 0) return -1;
    i64 used = p->num_blocks - 1 - p->fresh - p->uncached_queued;
    if (used > p->peak_blocks) p->peak_blocks = used;
    r->done = step;
    if (step < r->n_rounds) {
        r->most = peak(r->pend, stop, r->n_pend, r->group);
        p->reserved += r->most;
    }
    return 0;
}

static PyObject *Pool_advance(Pool *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "advance(request, step)");
        return NULL;
    }
    long long request = AS_I64(args[0]), step = AS_I64(args[1]);
    if (PyErr_Occurred()) return NULL;
    Cell *c = table_find(&p->running, (i64)request);
    if (c && run_steps(p, (Running *)(intptr_t)c->v1, (i64)step) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Pool_finish(Pool *p, PyObject *arg) {
    long long request = AS_I64(arg);
    if (request == -1 && PyErr_Occurred()) return NULL;
    Cell *c = table_find(&p->running, (i64)request);
    if (!c) {
        PyErr_Format(PyExc_KeyError, "block pool: request %lld is not running", request);
        return NULL;
    }
    Running *r = (Running *)(intptr_t)c->v1;
    table_remove(&p->running, c);
    int rc = run_steps(p, r, r->n_rounds);
    if (rc == 0) rc = run_events(p, r->last, r->n_last, r->slots, r->keys, r->group);
    running_free(r);
    if (rc < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- what a lookup reads ---- */

static int group_of(Pool *p, PyObject *o) {
    long g = PyLong_AsLong(o);
    if (g == -1 && PyErr_Occurred()) return -1;
    if (g < 0 || g >= p->n_groups) {
        PyErr_Format(PyExc_IndexError, "block pool: no group %ld", g);
        return -1;
    }
    return (int)g;
}

static PyObject *Pool_has(Pool *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "has(group, key)");
        return NULL;
    }
    int g = group_of(p, args[0]);
    if (g < 0) return NULL;
    long long key = AS_I64(args[1]);
    if (key == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(table_find(&p->cached[g], (i64)key) != NULL);
}

static PyObject *Pool_drop(Pool *p, PyObject *keys) {
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "drop(keys): a list of keys");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        long long key = AS_I64(PyList_GET_ITEM(keys, i));
        if (key == -1 && PyErr_Occurred()) return NULL;
        if (mark(p, (i64)key, DROPPED) < 0) return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *Pool_lost(Pool *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "lost(keys, start, stop): a list and two indexes");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(args[0]), start = PyLong_AsSsize_t(args[1]), stop = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (start < 0 || stop < 0) {
        PyErr_SetString(PyExc_ValueError, "lost: the indexes must be at least 0");
        return NULL;
    }
    if (stop > n) stop = n;
    if (p->n_pending && flush_marks(p) < 0) return PyErr_NoMemory();
    i64 bits = 0;
    for (Py_ssize_t i = start; i < stop && bits != (EVICTED | DROPPED); i++) {
        long long key = AS_I64(PyList_GET_ITEM(args[0], i));
        if (key == -1 && PyErr_Occurred()) return NULL;
        Cell *c = table_find(&p->marks, (i64)key);
        if (c) bits |= c->v1;
    }
    return Py_BuildValue("(OO)", bits & EVICTED ? Py_True : Py_False, bits & DROPPED ? Py_True : Py_False);
}

/* groups and keys of prefix / last_held; returns the group count, -1 on error */
static int groups_of(Pool *p, PyObject *list, int *out) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) > p->n_groups) {
        PyErr_SetString(PyExc_TypeError, "block pool: groups must be a list of group indexes");
        return -1;
    }
    int n = (int)PyList_GET_SIZE(list);
    for (int i = 0; i < n; i++)
        if ((out[i] = group_of(p, PyList_GET_ITEM(list, i))) < 0) return -1;
    return n;
}

static inline int all_hold(Pool *p, const int *gs, int ng, PyObject *k, int *err) {
    long long key = AS_I64(k);
    if (key == -1 && PyErr_Occurred()) {
        *err = 1;
        return 0;
    }
    for (int i = 0; i < ng; i++)
        if (!table_find(&p->cached[gs[i]], (i64)key)) return 0;
    return 1;
}

/* prefix's and last_held's arguments (groups, keys, a count): the groups into gs (at most 64), their count,
 * or -1 with an exception set */
static int lookup_args(Pool *p, PyObject *const *args, Py_ssize_t nargs, int *gs, PyObject **keys, Py_ssize_t *n) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "block pool: (groups, keys, a count) expected");
        return -1;
    }
    PyObject *groups = args[0];
    *keys = args[1];
    *n = PyLong_AsSsize_t(args[2]);
    if (*n == -1 && PyErr_Occurred()) return -1;
    if (p->n_groups > 64) {
        PyErr_SetString(PyExc_ValueError, "block pool: more than 64 groups");
        return -1;
    }
    int ng = groups_of(p, groups, gs);
    if (ng < 0) return -1;
    if (!PyList_Check(*keys)) {
        PyErr_SetString(PyExc_TypeError, "block pool: keys must be a list");
        return -1;
    }
    return ng;
}

static PyObject *Pool_prefix(Pool *p, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *keys;
    Py_ssize_t n;
    int gs[64];
    int ng = lookup_args(p, args, nargs, gs, &keys, &n);
    if (ng < 0) return NULL;
    if (n > PyList_GET_SIZE(keys)) n = PyList_GET_SIZE(keys);
    Py_ssize_t a = 0;
    int err = 0;
    while (a < n && all_hold(p, gs, ng, PyList_GET_ITEM(keys, a), &err)) a++;
    if (err) return NULL;
    return PyLong_FromSsize_t(a);
}

static PyObject *Pool_last_held(Pool *p, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *keys;
    Py_ssize_t reach;
    int gs[64];
    int ng = lookup_args(p, args, nargs, gs, &keys, &reach);
    if (ng < 0) return NULL;
    if (reach > PyList_GET_SIZE(keys)) {
        PyErr_SetString(PyExc_TypeError, "block pool: keys must be a list of at least reach keys");
        return NULL;
    }
    int err = 0;
    for (Py_ssize_t u = reach; u > 0; u--) {
        if (all_hold(p, gs, ng, PyList_GET_ITEM(keys, u - 1), &err)) return PyLong_FromSsize_t(u);
        if (err) return NULL;
    }
    return PyLong_FromLong(0);
}

/* ---- the type ---- */

static void Pool_dealloc(Pool *p) {
    if (p->running.cells) {
        for (size_t i = 0; i < p->running.cap; i++)
            if (p->running.cells[i].key != EMPTY) running_free((Running *)(intptr_t)p->running.cells[i].v1);
    }
    free(p->blocks);
    free(p->spare.a);
    table_free(&p->marks);
    table_free(&p->running);
    if (p->cached) {
        for (int g = 0; g < p->n_groups; g++) table_free(&p->cached[g]);
        free(p->cached);
    }
    for (i64 h = 0; h < p->n_holders; h++) free(p->holders[h].slots);
    free(p->holders);
    free(p->order.items);
    free(p->kinds);
    arena_free(&p->arena);
    free(p->events.a);
    free(p->last.a);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int Pool_init(Pool *p, PyObject *args, PyObject *kwds) {
    static char *names[] = {"num_blocks", "groups", "uncached_first", "block", NULL};
    long long num_blocks, block;
    const char *groups;
    Py_ssize_t n_groups;
    int uncached_first;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Ls#pL", names, &num_blocks, &groups, &n_groups, &uncached_first,
                                     &block))
        return -1;
    if (p->kinds) {
        PyErr_SetString(PyExc_RuntimeError, "block pool: already made");
        return -1;
    }
    if (num_blocks < 1 || block < 1) {
        PyErr_SetString(PyExc_ValueError, "block pool: num_blocks and block must be at least 1");
        return -1;
    }
    p->num_blocks = num_blocks;
    p->block = block;
    p->fresh = num_blocks - 1;
    p->uncached_first = uncached_first;
    p->n_groups = (int)n_groups;
    p->first_mamba = -1;
    p->free_holders = -1;
    p->kinds = (char *)malloc((size_t)n_groups + 1);
    p->cached = (Table *)calloc((size_t)(n_groups ? n_groups : 1), sizeof(Table));
    if (!p->kinds || !p->cached) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        if (groups[g] != 'a' && groups[g] != 'm') {
            PyErr_SetString(PyExc_ValueError, "block pool: groups are 'a' (attention) or 'm' (Mamba)");
            return -1;
        }
        p->kinds[g] = groups[g];
        if (groups[g] == 'm' && p->first_mamba < 0) p->first_mamba = (int)g;
        if (table_init(&p->cached[g], 1024) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    p->kinds[n_groups] = 0;
    if (table_init(&p->marks, 1024) < 0 || table_init(&p->running, 64) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *Pool_available(Pool *p, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(p->fresh + p->queued);
}

static PyObject *Pool_groups(Pool *p, void *closure) {
    (void)closure;
    return PyUnicode_FromStringAndSize(p->kinds, p->n_groups);
}

static PyMemberDef Pool_members[] = {
    {"num_blocks", T_LONGLONG, offsetof(Pool, num_blocks), READONLY, "blocks, with the null block"},
    {"block", T_LONGLONG, offsetof(Pool, block), READONLY, "the scheduler block, in tokens"},
    {"fresh", T_LONGLONG, offsetof(Pool, fresh), READONLY, "blocks never used yet"},
    {"evictions", T_LONGLONG, offsetof(Pool, evictions), READONLY, "cached blocks evicted"},
    {"states", T_LONGLONG, offsetof(Pool, states), READONLY, "keys the first Mamba group caches now"},
    {"peak_states", T_LONGLONG, offsetof(Pool, peak_states), READONLY, "the most states cached at once"},
    {"peak_blocks", T_LONGLONG, offsetof(Pool, peak_blocks), READONLY, "the most blocks held or caching at once"},
    {"uncached_queued", T_LONGLONG, offsetof(Pool, uncached_queued), READONLY,
     "blocks in the free queue caching nothing (before 0.24.0)"},
    {"reserved", T_LONGLONG, offsetof(Pool, reserved), READONLY,
     "the blocks the stepwise requests' later steps still take beyond what they free"},
    {NULL}};

static PyGetSetDef Pool_getset[] = {{"available", (getter)Pool_available, NULL, "fresh and queued blocks", NULL},
                                    {"groups", (getter)Pool_groups, NULL, "the groups' kinds", NULL},
                                    {NULL}};

static PyMethodDef Pool_methods[] = {
    {"has", (PyCFunction)(void (*)(void))Pool_has, METH_FASTCALL, "has(group, key): a block of group caches key"},
    {"prefix", (PyCFunction)(void (*)(void))Pool_prefix, METH_FASTCALL,
     "prefix(groups, keys, n): how many of the first n keys every group caches, from the left"},
    {"last_held", (PyCFunction)(void (*)(void))Pool_last_held, METH_FASTCALL,
     "last_held(groups, keys, reach): the last u <= reach whose key keys[u - 1] every group caches (0: none)"},
    {"drop", (PyCFunction)Pool_drop, METH_O, "drop(keys): the Mamba states the rules did not keep"},
    {"lost", (PyCFunction)(void (*)(void))Pool_lost, METH_FASTCALL,
     "lost(keys, start, stop): whether any of keys[start:stop] was evicted from a Mamba block, and dropped"},
    {"admit", (PyCFunction)(void (*)(void))Pool_admit, METH_FASTCALL,
     "admit(request, hit, plan, stepwise=False): run the plan (stepwise: its first step); False if it does not fit"},
    {"advance", (PyCFunction)(void (*)(void))Pool_advance, METH_FASTCALL,
     "advance(request, step): run a stepwise request's later steps up to its step-th"},
    {"finish", (PyCFunction)Pool_finish, METH_O, "finish(request): free what it still holds"},
    {NULL}};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hybridplan.engines.vllm._block_pool.BlockPool",
    .tp_basicsize = sizeof(Pool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "vLLM's block pool in C: BlockPool(num_blocks, groups, uncached_first, block), as PyPool",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pool_init,
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_methods = Pool_methods,
    .tp_members = Pool_members,
    .tp_getset = Pool_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_block_pool",
    .m_doc = "vLLM's block pool in C (hybridplan/engines/vllm/block_pool.py)",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__block_pool(void) {
    if (PyType_Ready(&PoolType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "BlockPool", (PyObject *)&PoolType) < 0) {
        Py_DECREF(&PoolType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
