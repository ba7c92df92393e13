/* A table of 64-bit keys to two 64-bit values, in C, for the replay's native code (the vLLM block pool,
 * hybridplan/engines/vllm/_block_pool.c; the ideal cache, hybridplan/replay/_speedups.c): open addressing,
 * linear probing, backward-shift deletion, grown at half full. -1 marks an empty cell, so -1 is no key.
 */
#ifndef HYBRIDPLAN_TABLE_H
#define HYBRIDPLAN_TABLE_H

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

/* a Python int as a 64-bit value (for the files that include Python.h): PyLong_AsLong where long is 64 bits,
 * since it reads the digits directly, where PyLong_AsLongLong takes a value of more than one digit (every hash)
 * through a byte array at a few times the cost; both raise OverflowError past 64 bits */
#if LONG_MAX == INT64_MAX
#define AS_I64(x) PyLong_AsLong(x)
#else
#define AS_I64(x) PyLong_AsLongLong(x)
#endif

typedef int64_t i64;
#define EMPTY ((i64)-1)

typedef struct {
    i64 key, v1, v2;
} Cell;

/* an array of ``*cap`` items of ``size`` bytes, ``n`` of them used, with room for one more: the same array, or
 * one moved with its capacity doubled (from ``first`` when it has none) when it is full; NULL when out of memory,
 * the array and ``*cap`` then as they were */
static inline void *room_for_one(void *items, i64 n, i64 *cap, size_t size, i64 first) {
    if (n < *cap) return items;
    i64 grown = *cap ? *cap * 2 : first;
    void *moved = realloc(items, (size_t)grown * size);
    if (moved) *cap = grown;
    return moved;
}

typedef struct {
    Cell *cells;
    size_t cap, n; /* cap a power of two */
} Table;

static inline size_t mix(i64 key) {
    uint64_t x = (uint64_t)key;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (size_t)x;
}

static inline int table_init(Table *t, size_t cap) {
    t->cap = cap;
    t->n = 0;
    t->cells = (Cell *)malloc(cap * sizeof(Cell));
    if (!t->cells) return -1;
    for (size_t i = 0; i < cap; i++) t->cells[i].key = EMPTY;
    return 0;
}

static inline void table_free(Table *t) {
    free(t->cells);
    t->cells = NULL;
    t->cap = t->n = 0;
}

static inline Cell *table_find(const Table *t, i64 key) {
    size_t mask = t->cap - 1, i = mix(key) & mask;
    for (;;) {
        Cell *c = &t->cells[i];
        if (c->key == key) return c;
        if (c->key == EMPTY) return NULL;
        i = (i + 1) & mask;
    }
}

static inline int table_grow(Table *t) {
    Cell *old = t->cells;
    size_t old_cap = t->cap;
    if (table_init(t, old_cap * 2) < 0) {
        t->cells = old;
        t->cap = old_cap;
        return -1;
    }
    size_t mask = t->cap - 1;
    for (size_t j = 0; j < old_cap; j++) {
        if (old[j].key == EMPTY) continue;
        size_t i = mix(old[j].key) & mask;
        while (t->cells[i].key != EMPTY) i = (i + 1) & mask;
        t->cells[i] = old[j];
        t->n++;
    }
    free(old);
    return 0;
}

/* the cell of ``key``, made (values 0, *fresh = 1) when absent; NULL when out of memory */
static inline Cell *table_slot(Table *t, i64 key, int *fresh) {
    if ((t->n + 1) * 2 > t->cap && table_grow(t) < 0) return NULL;
    size_t mask = t->cap - 1, i = mix(key) & mask;
    for (;;) {
        Cell *c = &t->cells[i];
        if (c->key == key) {
            *fresh = 0;
            return c;
        }
        if (c->key == EMPTY) {
            c->key = key;
            c->v1 = c->v2 = 0;
            t->n++;
            *fresh = 1;
            return c;
        }
        i = (i + 1) & mask;
    }
}

static inline void table_remove(Table *t, Cell *c) {
    size_t mask = t->cap - 1, i = (size_t)(c - t->cells), j = i;
    t->n--;
    for (;;) {
        j = (j + 1) & mask;
        Cell *d = &t->cells[j];
        if (d->key == EMPTY) break;
        size_t home = mix(d->key) & mask;
        /* d may move to i when its home is not in (i, j] cyclically */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            t->cells[i] = *d;
            i = j;
        }
    }
    t->cells[i].key = EMPTY;
}

#endif
