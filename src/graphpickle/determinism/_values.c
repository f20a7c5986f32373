/*
 * graphpickle.determinism._values: the last stage of deterministic dumps, in C
 * (`values.py` beside it is the reference, and says what the stage does).
 *
 * canonical_values(data) walks a protocol 4 or 5 pickle as the unpickler would,
 * keeping for each stack item what it is: an atom (its opcode in `data`, or
 * its bytes), a value (str, bytes, tuple, frozenset: an id in a table keyed by
 * content, a tuple's content being its items' ids), an object memoized at an
 * output index, or an object never memoized. The first memoized copy of a
 * value keeps its memo entry; a later copy, whose construction memoized
 * nothing, is cut from the output and replaced by a reference. The opcodes are
 * then framed anew into the result.
 *
 * The table is probed at random, and on a large payload most probes would wait
 * for memory: a second walk runs ahead of this one, computes each value's hash
 * from content alone and fetches its slot in time ("The walk ahead", below).
 * canonical_values_unless_sets(data) is the same walk that first answers what
 * `_sets.c`'s sets_to_sort would: it stops, with None, at a set or frozenset
 * of two or more members, so that deterministic dumps walk their payload once
 * on the common path.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "../_extension.h"
#include "../_opcodes.h"

/* skip_opcode (_opcodes.h), inline for the opcodes of a fixed size. */
static inline const unsigned char *
next_opcode(const unsigned char *p, const unsigned char *end)
{
    if (p < end) {
        int kind = opcode_arg[*p];
        if (kind >= 0 && kind <= 8 && end - p > kind) {
            return p + 1 + kind;
        }
    }
    return skip_opcode(p, end);
}

/* What a stack item is: kind in the low 2 bits, an id above them. An atom's
 * id is where its opcode is in the data, or (INLINE_ATOM set) the opcode and
 * its argument themselves, for the atoms of up to 4 bytes of argument (None,
 * booleans, EMPTY_TUPLE, BININT1, BININT2, BININT): equal atoms of those have
 * equal idents, compared without reading the data. */
enum { K_ATOM = 0, K_VALUE = 1, K_REF = 2, K_UNIQUE = 3 };
#define INLINE_ATOM (1ULL << 63)
#define MARK UINT64_MAX
#define FROZENSET_TYPE IDENT(K_UNIQUE, 0) /* builtins.frozenset, not memoized yet */
#define IDENT(kind, id) (((uint64_t)(id) << 2) | (kind))
#define KIND(ident) ((int)((ident) & 3))
#define ID(ident) ((Py_ssize_t)((ident) >> 2))
#define FRAME_TARGET (64 * 1024)
#define FRAME_SIZE_MIN 4
#define BEFORE_LARGE 2

/* The hash of a value's content: CPython's keyed hash of bytes (seeded like
 * str and bytes hashes, so content chosen to collide costs no more than it
 * does in a dict). Public from 3.14; the same function under its older name
 * before. */
#if PY_VERSION_HEX >= 0x030E0000
#define HASH_BYTES(p, n) Py_HashBuffer((p), (n))
#else
#define HASH_BYTES(p, n) _Py_HashBytes((p), (n))
#endif

/* A value met in the data, 16 bytes. A str or bytes is the opcode at `offset`
 * in the data; a tuple or frozenset its `meta >> 2` items, from `offset` in the
 * arena. The tag ('s', 'b', 't', 'z') is `"sbtz"[meta & 3]`. */
typedef struct {
    Py_ssize_t offset;
    uint32_t meta;
    uint32_t index; /* its output memo index + 1; 0 while not memoized */
} Value;

#define MAX_ITEMS (UINT32_MAX >> 2) /* a longer tuple is never merged */
#define MAX_MEMO UINT32_MAX          /* LONG_BINGET's indices have 4 bytes */

typedef struct {
    uint32_t hash;  /* where the slot's value belongs: hash & mask */
    uint32_t value; /* its id + 1, 0 for an empty slot */
} Slot;

typedef struct {
    uint64_t ident;
    Py_ssize_t start; /* where its construction starts in the output */
    Py_ssize_t memo;  /* output memo entries at that point */
} Entry;

/* An item of the walk ahead's stack (see "The walk ahead" below). */
typedef struct {
    uint64_t hash;
    uint64_t flags;
} AheadItem;

typedef struct {
    const unsigned char *p;
    AheadItem *stack;
    uint64_t *memo;             /* the hashes of what is memoized, */
    unsigned char *memo_flags;  /* and their flags */
    Py_ssize_t depth, stack_capacity, memo_count, memo_capacity, memo_flags_capacity;
    Py_ssize_t met; /* hashes handed over (see "The walk ahead") */
    int stopped;    /* at STOP, or at data that the walk behind refuses too */
    int no_memory;  /* stopped for want of memory */
} Ahead;

#define AHEAD 16 /* hashes the walk ahead keeps ready */
#define RING 64  /* (a power of two, above AHEAD) */

typedef struct {
    unsigned char *bytes;
    Py_ssize_t length, capacity;
} Buffer;

/* Where the output's frames end: `end`, an opcode boundary; `large`, a segment
 * of one opcode with 64 KiB or more of data, written outside frames (or
 * BEFORE_LARGE: a frame that ends only because such an opcode follows). */
typedef struct {
    Py_ssize_t end;
    Py_ssize_t large;
} Segment;

typedef struct {
    const unsigned char *data, *end;
    Buffer out, arena; /* the output's opcodes; the items of tuples */
    Entry *stack;
    Py_ssize_t depth, stack_capacity;
    uint64_t *old_memo;
    Py_ssize_t old_count, old_capacity;
    Value *values;
    Py_ssize_t value_count, value_capacity;
    Slot *slots; /* open addressing, probed by hash before any value is read */
    Py_ssize_t slot_mask;
    Segment *segments;
    Py_ssize_t segment_count, segment_capacity;
    Py_ssize_t frame_start; /* segment_start(), kept */
    Py_ssize_t written, unique;
    uint64_t frozenset_type; /* builtins.frozenset once memoized */
    int unless_sets;         /* stop at a set of two or more members (STEP_SETS) */
    Ahead ahead;
    uint64_t ring[RING];     /* the hashes from the walk ahead, by number */
    Py_ssize_t taken;        /* hashes taken from it */
} Walk;


/* Memory of 2 MiB or more comes from mmap, on pages of 2 MiB where the system
 * offers them (Linux's transparent huge pages, asked for by madvise): the table
 * of values is probed at random, and a probe then misses the TLB far less
 * often; the other arrays fault in 512 times fewer pages. Zeroed when new. */
#define HUGE_PAGE ((size_t)2 << 20)
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MREMAP_MAYMOVE)
#define HUGE_PAGES 1
#else
#define HUGE_PAGES 0
#endif

/* `old` (of `old_size` bytes, from this function, or NULL) resized to `size`
 * bytes; NULL on failure, with `old` left as it was. */
static void *
resize(void *old, size_t old_size, size_t size)
{
#if HUGE_PAGES
    if (size >= HUGE_PAGE) {
        void *p;
        if (old != NULL && old_size >= HUGE_PAGE) {
            p = mremap(old, old_size, size, MREMAP_MAYMOVE);
        }
        else {
            p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED && old != NULL) {
                memcpy(p, old, old_size);
                PyMem_Free(old);
            }
        }
        if (p == MAP_FAILED) {
            return NULL;
        }
        madvise(p, size, MADV_HUGEPAGE);
        return p;
    }
#endif
    (void)old_size;
    return PyMem_Realloc(old, size);
}

static void
release(void *p, size_t size)
{
#if HUGE_PAGES
    if (p != NULL && size >= HUGE_PAGE) {
        munmap(p, size);
        return;
    }
#endif
    (void)size;
    PyMem_Free(p);
}

static Slot *
new_slots(size_t count)
{
    Slot *slots = resize(NULL, 0, count * sizeof(Slot));
    if (slots != NULL && count * sizeof(Slot) < HUGE_PAGE) {
        memset(slots, 0, count * sizeof(Slot)); /* (mmap's pages are zeroed) */
    }
    return slots;
}

static int
grow(void **array, Py_ssize_t *capacity, Py_ssize_t needed, size_t item)
{
    if (needed <= *capacity) {
        return 0;
    }
    Py_ssize_t capacity2 = *capacity ? *capacity : 64;
    while (capacity2 < needed) {
        if (capacity2 > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)item) {
            PyErr_NoMemory();
            return -1;
        }
        capacity2 *= 2;
    }
    void *grown = resize(*array, (size_t)*capacity * item, (size_t)capacity2 * item);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *array = grown;
    *capacity = capacity2;
    return 0;
}

static int
append(Buffer *buffer, const void *bytes, Py_ssize_t length)
{
    if (grow((void **)&buffer->bytes, &buffer->capacity, buffer->length + length, 1) < 0) {
        return -1;
    }
    memcpy(buffer->bytes + buffer->length, bytes, (size_t)length);
    buffer->length += length;
    return 0;
}

static int
push(Walk *w, uint64_t ident, Py_ssize_t start, Py_ssize_t memo)
{
    if (grow((void **)&w->stack, &w->stack_capacity, w->depth + 1, sizeof(Entry)) < 0) {
        return -1;
    }
    w->stack[w->depth++] = (Entry){ident, start, memo};
    return 0;
}

static Py_ssize_t
segment_start(Walk *w)
{
    return w->segment_count ? w->segments[w->segment_count - 1].end : 0;
}

static int
end_segment(Walk *w, Py_ssize_t end, Py_ssize_t large)
{
    if (grow((void **)&w->segments, &w->segment_capacity, w->segment_count + 1, sizeof(Segment)) < 0) {
        return -1;
    }
    w->segments[w->segment_count++] = (Segment){end, large};
    w->frame_start = end;
    return 0;
}

/* After an opcode of `length` bytes was written: end the frame there if it
 * holds 64 KiB, or keep the opcode apart if it is that long itself. */
static inline int
after_opcode(Walk *w, Py_ssize_t length)
{
    if (length < FRAME_TARGET && w->out.length - w->frame_start < FRAME_TARGET) {
        return 0; /* (the common case) */
    }
    Py_ssize_t start = segment_start(w);
    if (length >= FRAME_TARGET) {
        Py_ssize_t op_start = w->out.length - length;
        if (op_start > start && end_segment(w, op_start, BEFORE_LARGE) < 0) {
            return -1;
        }
        return end_segment(w, w->out.length, 1);
    }
    return w->out.length - start >= FRAME_TARGET ? end_segment(w, w->out.length, 0) : 0;
}

/* Cut the output back to `length`, with the frames that ended past it. */
static void
truncate_output(Walk *w, Py_ssize_t length)
{
    w->out.length = length;
    while (w->segment_count && (w->segments[w->segment_count - 1].end > length ||
                                (w->segments[w->segment_count - 1].end == length &&
                                 w->segments[w->segment_count - 1].large == BEFORE_LARGE))) {
        w->segment_count--; /* (a frame ended for a large opcode that is cut) */
    }
    w->frame_start = segment_start(w);
}

static int
fail(const char *why)
{
    PyErr_Format(PyExc_ValueError, "canonical_values(): %s", why);
    return -1;
}

/* splitmix64's finalizer: spreads the bits of an item's ident. */
static inline uint64_t
mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t seed; /* keys the tuple hashes: made from the keyed bytes hash */

/* Hashes, which the walk ahead (below) computes, before the table is asked and
 * without it. Each item of the stack has a hash of its content: a str or bytes
 * by its bytes (keyed, as CPython hashes them), an atom by its opcode's bytes,
 * a tuple by its items' hashes in order, a frozenset by the hash of the
 * 1-tuple of the tuple of its members (FROZENSET and a call of
 * builtins.frozenset on that 1-tuple agree), builtins.frozenset by a constant,
 * any other object by where the data makes it; a memo reference has the hash
 * of what was memoized. A call is taken for frozenset's (hashed as the
 * frozenset) whenever its callable is builtins.frozenset (made by
 * STACK_GLOBAL, or a reference to it) and its argument a 1-tuple of a tuple:
 * whenever the walk behind makes a frozenset of a call, and sometimes when it
 * does not (when it takes one of them for an object of its own, which its
 * hash then merely names). So the items that the table takes for the same (one
 * object, equal atoms, values it found equal) have equal hashes, which is all
 * the table needs. */
#define FROZENSET_MIX 0x2545f4914f6cdd1dULL
#define FROZENSET_TYPE_HASH 0x8cb92ba72f3d8dd7ULL /* builtins.frozenset, not memoized yet */
static uint64_t empty_tuple_hash; /* EMPTY_TUPLE: the hash of the tuple of no items */

static inline uint64_t
items_hash_start(Py_ssize_t n)
{
    return seed ^ mix((uint64_t)'t' + (uint64_t)n);
}

/* In order ((a, b) is not (b, a)), each item keyed by the seed before it is
 * mixed in: items chosen to collide would have to know the seed. */
static inline uint64_t
items_hash_add(uint64_t hash, uint64_t item)
{
    return mix(hash ^ mix(item + seed));
}

static inline uint64_t
frozenset_hash(uint64_t one_tuple)
{
    return mix(one_tuple ^ FROZENSET_MIX);
}

/* The hash of the tuple (tag 't') or frozenset ('z') of the `n` items whose
 * hashes are `stride` bytes apart from `hashes`. */
static inline uint64_t
items_hash(char tag, const uint64_t *hashes, Py_ssize_t n, size_t stride)
{
    uint64_t hash = items_hash_start(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        hash = items_hash_add(hash, *(const uint64_t *)((const char *)hashes + (size_t)i * stride));
    }
    return tag == 'z' ? frozenset_hash(items_hash_add(items_hash_start(1), hash)) : hash;
}

/* An atom's hash, from its opcode's bytes (from p to end): one to one for the
 * atoms of a fixed size, keyed for LONG1 and LONG4. */
static inline uint64_t
atom_hash(const unsigned char *p, const unsigned char *end)
{
    uint64_t argument = 0;
    switch (*p) {
    case ')':
        return empty_tuple_hash;
    case 'N': case 0x88: case 0x89:
        break;
    case 'K':
        argument = p[1];
        break;
    case 'M':
        argument = (uint64_t)p[1] | (uint64_t)p[2] << 8;
        break;
    case 'J':
        argument = read_le(p + 1, 4);
        break;
    case 'G':
        argument = read_le(p + 1, 8);
        break;
    default: /* LONG1, LONG4: any length */
        return (uint64_t)HASH_BYTES(p, end - p) ^ 0x9e3779b97f4a7c15ULL;
    }
    return mix(argument ^ mix((uint64_t)*p)); /* (the opcode tells the length) */
}

static inline uint64_t
object_hash(Py_ssize_t position)
{
    return mix((uint64_t)position ^ 0x632be59bd9b4e019ULL);
}

static inline uint64_t
string_hash(const unsigned char *bytes, Py_ssize_t length, char tag)
{
    return (uint64_t)HASH_BYTES(bytes, length) ^ (uint64_t)tag;
}

static inline uint32_t
slot_hash(uint64_t hash)
{
    return (uint32_t)(hash ^ (hash >> 32));
}

static void ahead(Walk *w, Py_ssize_t met);

/* The hash of the next str, bytes, tuple or frozenset made, or of the next
 * REDUCE (see "The walk ahead"): 0, or -1 with an error set. */
static int
take_hash(Walk *w, uint64_t *hash)
{
    Py_ssize_t k = w->taken++;
    if (!w->ahead.stopped) {
        ahead(w, k + 1 + AHEAD);
    }
    if (k >= w->ahead.met) { /* the walk ahead stopped at an opcode before this one */
        if (w->ahead.no_memory) {
            PyErr_NoMemory();
            return -1;
        }
        return fail("an opcode that the walk ahead refused");
    }
    *hash = w->ring[k & (RING - 1)];
    return 0;
}

static const unsigned char *
atom_end(Walk *w, uint64_t ident)
{
    return skip_opcode(w->data + ID(ident), w->end);
}

/* The ident of the atom whose opcode is at p (its argument up to next). */
static inline uint64_t
atom_ident(Walk *w, const unsigned char *p, const unsigned char *next)
{
    if (*p != 'G' && *p != 0x8a && *p != 0x8b) { /* (BINFLOAT, LONG1, LONG4: in the data) */
        uint64_t argument = next - p > 1 ? read_le(p + 1, (int)(next - p - 1)) : 0;
        return INLINE_ATOM | argument << 10 | (uint64_t)*p << 2 | K_ATOM;
    }
    return IDENT(K_ATOM, p - w->data);
}

static inline int
is_empty_tuple(uint64_t ident)
{
    return ident == (INLINE_ATOM | (uint64_t)')' << 2 | K_ATOM);
}

/* Whether two items of tuples are the same: one object, or equal atoms. */
static int
same_item(Walk *w, uint64_t a, uint64_t b)
{
    if (a == b) {
        return 1;
    }
    if (KIND(a) != K_ATOM || KIND(b) != K_ATOM || (a & INLINE_ATOM) || (b & INLINE_ATOM)) {
        return 0; /* (atoms written inline are equal only if their idents are) */
    }
    const unsigned char *p = w->data + ID(a), *q = w->data + ID(b);
    Py_ssize_t n = atom_end(w, a) - p;
    return n == atom_end(w, b) - q && memcmp(p, q, (size_t)n) == 0;
}

/* Where the str or bytes of the opcode at `op` keeps its bytes. */
static const unsigned char *
string_bytes(const unsigned char *op, Py_ssize_t *length)
{
    int size = *op == 0x8c || *op == 'C' ? 1 : *op == 'X' || *op == 'B' ? 4 : 8;
    *length = (Py_ssize_t)read_le(op + 1, size);
    return op + 1 + size;
}

static int
tag_code(char tag)
{
    return tag == 's' ? 0 : tag == 'b' ? 1 : tag == 't' ? 2 : 3;
}

/* Whether value `v` has this key: a str or bytes the opcode at `key` in the
 * data writes, or (a tuple or frozenset) the `n` items at `key`. */
static int
same_value(Walk *w, const Value *v, char tag, const void *key, Py_ssize_t n)
{
    if ((int)(v->meta & 3) != tag_code(tag)) {
        return 0;
    }
    if (tag == 's' || tag == 'b') {
        Py_ssize_t length, length2;
        const unsigned char *mine = string_bytes(w->data + v->offset, &length);
        const unsigned char *theirs = string_bytes(key, &length2);
        return length == length2 && memcmp(mine, theirs, (size_t)length) == 0;
    }
    if ((Py_ssize_t)(v->meta >> 2) != n) {
        return 0;
    }
    const uint64_t *mine = (const uint64_t *)w->arena.bytes + v->offset, *items = key;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!same_item(w, mine[i], items[i])) {
            return 0;
        }
    }
    return 1;
}

/* Double the table of values (kept at most two thirds full). */
static int
grow_slots(Walk *w)
{
    Py_ssize_t mask = w->slot_mask * 2 + 1;
    Slot *slots = new_slots((size_t)mask + 1);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i <= w->slot_mask; i++) {
        if (w->slots[i].value) {
            size_t s = w->slots[i].hash & (size_t)mask;
            while (slots[s].value) {
                s = (s + 1) & (size_t)mask;
            }
            slots[s] = w->slots[i];
        }
    }
    release(w->slots, ((size_t)w->slot_mask + 1) * sizeof(Slot));
    w->slots = slots;
    w->slot_mask = mask;
    return 0;
}

/* The id of the value with this tag and key (see same_value: a str's opcode
 * at `offset` in the data, a new tuple's `n` items at `offset` in the arena),
 * added to the table if new: or -1. */
static Py_ssize_t
intern_value(Walk *w, char tag, uint64_t hash64, Py_ssize_t offset, Py_ssize_t n)
{
    const void *key = tag == 's' || tag == 'b' ? (const void *)(w->data + offset)
                                               : (const void *)((uint64_t *)w->arena.bytes + offset);
    uint32_t hash = slot_hash(hash64);
    size_t slot = hash & (size_t)w->slot_mask;
    for (;; slot = (slot + 1) & (size_t)w->slot_mask) {
        Py_ssize_t found = (Py_ssize_t)w->slots[slot].value - 1;
        if (found < 0) {
            break;
        }
        if (w->slots[slot].hash == hash && same_value(w, &w->values[found], tag, key, n)) {
            return found;
        }
    }
    if (w->value_count >= (Py_ssize_t)UINT32_MAX - 1) {
        return fail("too many values");
    }
    if (grow((void **)&w->values, &w->value_capacity, w->value_count + 1, sizeof(Value)) < 0) {
        return -1;
    }
    Py_ssize_t id = w->value_count++;
    w->values[id] = (Value){offset, (uint32_t)((uint32_t)n << 2 | (uint32_t)tag_code(tag)), 0};
    w->slots[slot] = (Slot){hash, (uint32_t)(id + 1)};
    if (w->value_count * 3 > w->slot_mask * 2 && grow_slots(w) < 0) {
        return -1;
    }
    return id;
}

/* The value (tag 't' or 'z') whose items are the last `n` idents in the arena:
 * its ident, the arena keeping them only if it is new; 0 on error. */
static uint64_t
value_of_items(Walk *w, char tag, Py_ssize_t n, uint64_t hash)
{
    Py_ssize_t offset = w->arena.length / 8 - n;
    if ((uint64_t)n > MAX_ITEMS) { /* never merged: an object of its own */
        w->arena.length = offset * 8;
        return IDENT(K_UNIQUE, ++w->unique);
    }
    Py_ssize_t id = intern_value(w, tag, hash, offset, n);
    if (id < 0) {
        return 0;
    }
    if (w->values[id].offset != offset) {
        w->arena.length = offset * 8; /* known already: its items are stored */
    }
    return IDENT(K_VALUE, id);
}

/* Replace the top `n` items by a tuple or frozenset of them (tag 't' or 'z'),
 * whose construction starts where the item `first` (or a mark) started. */
static int
make_value(Walk *w, char tag, Py_ssize_t n, Entry first)
{
    for (Py_ssize_t i = w->depth - n; i < w->depth; i++) {
        if (append(&w->arena, &w->stack[i].ident, 8) < 0) {
            return -1;
        }
    }
    uint64_t hash;
    if (take_hash(w, &hash) < 0) {
        return -1;
    }
    uint64_t ident = value_of_items(w, tag, n, hash);
    if (ident == 0) {
        return -1;
    }
    w->depth -= n;
    return push(w, ident, first.start, first.memo);
}

/* Whether `ident` is the str `text`. */
static int
is_str(Walk *w, uint64_t ident, const char *text)
{
    if (KIND(ident) != K_VALUE || (w->values[ID(ident)].meta & 3) != 0) {
        return 0;
    }
    Py_ssize_t length;
    const unsigned char *bytes = string_bytes(w->data + w->values[ID(ident)].offset, &length);
    return length == (Py_ssize_t)strlen(text) && memcmp(bytes, text, (size_t)length) == 0;
}

/* REDUCE of `callable` and `args`: the frozenset (a value) when it calls
 * builtins.frozenset on a tuple of members (as deterministic payloads write
 * sorted frozensets), whose hash is `hash`; an object of its own otherwise.
 * 0 on error. */
static uint64_t
reduced(Walk *w, uint64_t callable, uint64_t args, uint64_t hash)
{
    if ((callable != FROZENSET_TYPE && callable != w->frozenset_type) || KIND(args) != K_VALUE) {
        return IDENT(K_UNIQUE, ++w->unique);
    }
    const Value *call = &w->values[ID(args)];
    if ((call->meta & 3) != 2 || call->meta >> 2 != 1) { /* not a tuple of one item */
        return IDENT(K_UNIQUE, ++w->unique);
    }
    uint64_t members = ((const uint64_t *)w->arena.bytes)[call->offset];
    Py_ssize_t offset = 0, n = 0;
    if (KIND(members) == K_VALUE && (w->values[ID(members)].meta & 3) == 2) {
        offset = w->values[ID(members)].offset;
        n = w->values[ID(members)].meta >> 2;
    }
    else if (!is_empty_tuple(members)) {
        return IDENT(K_UNIQUE, ++w->unique);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t item = ((const uint64_t *)w->arena.bytes)[offset + i]; /* (read again: */
        if (append(&w->arena, &item, 8) < 0) {                       /* appending moves) */
            return 0;
        }
    }
    return value_of_items(w, 'z', n, hash);
}

/* The index of the innermost mark, or -1 (with the error set). */
static Py_ssize_t
find_mark(Walk *w)
{
    for (Py_ssize_t i = w->depth - 1; i >= 0; i--) {
        if (w->stack[i].ident == MARK) {
            return i;
        }
    }
    fail("no mark");
    return -1;
}

static int
pop_items(Walk *w, Py_ssize_t n)
{
    if (w->depth < n) {
        return fail("stack underflow");
    }
    for (Py_ssize_t i = w->depth - n; i < w->depth; i++) {
        if (w->stack[i].ident == MARK) {
            return fail("stack underflow");
        }
    }
    return 0;
}

static int
write_get(Walk *w, Py_ssize_t index)
{
    if (index > 0xFFFFFFFFLL) {
        return fail("memo too large");
    }
    if (grow((void **)&w->out.bytes, &w->out.capacity, w->out.length + 5, 1) < 0) {
        return -1;
    }
    /* written in place, byte by byte: an array on the stack copied out would
     * be read back wider than it was written, which stalls */
    unsigned char *get = w->out.bytes + w->out.length;
    if (index < 256) {
        get[0] = 'h';
        get[1] = (unsigned char)index;
        w->out.length += 2;
        return 0;
    }
    get[0] = 'j';
    for (int i = 0; i < 4; i++) {
        get[1 + i] = (unsigned char)(index >> (8 * i));
    }
    w->out.length += 5;
    return 0;
}

static int
memoize(Walk *w)
{
    if (w->depth == 0 || w->stack[w->depth - 1].ident == MARK) {
        return fail("MEMOIZE with nothing to memoize");
    }
    Entry *top = &w->stack[w->depth - 1];
    uint64_t ident = top->ident;
    if (grow((void **)&w->old_memo, &w->old_capacity, w->old_count + 1, sizeof(uint64_t)) < 0) {
        return -1;
    }
    if (KIND(ident) == K_VALUE) {
        Value *v = &w->values[ID(ident)];
        if (v->index > 0 && top->memo == w->written) { /* a copy: cut it */
            truncate_output(w, top->start);
            w->old_memo[w->old_count++] = ident;
            return write_get(w, (Py_ssize_t)v->index - 1);
        }
        if (w->written >= (Py_ssize_t)MAX_MEMO - 1) {
            return fail("memo too large");
        }
        if (v->index == 0) {
            v->index = (uint32_t)w->written + 1;
        }
        else { /* its construction memoized more: kept, as an object of its own */
            ident = top->ident = IDENT(K_REF, w->written);
        }
    }
    else {
        if (ident == FROZENSET_TYPE) {
            w->frozenset_type = IDENT(K_REF, w->written);
        }
        ident = top->ident = IDENT(K_REF, w->written);
    }
    w->old_memo[w->old_count++] = ident;
    w->written++;
    return append(&w->out, "\x94", 1);
}

static int
get(Walk *w, unsigned long long old, Py_ssize_t start)
{
    if (old >= (unsigned long long)w->old_count) {
        return fail("a memo index that is not set");
    }
    uint64_t ident = w->old_memo[old];
    Py_ssize_t index = KIND(ident) == K_REF ? ID(ident) : (Py_ssize_t)w->values[ID(ident)].index - 1;
    if (write_get(w, index) < 0) {
        return -1;
    }
    return push(w, ident, start, w->written);
}

/* The walk ahead. Most values of a large payload are met once, and the table
 * is then probed at a random slot that is rarely in the cache: a walk that
 * looked values up as it met them would wait for memory at each new one. So a
 * second walk over the same opcodes runs a few values ahead (AHEAD): it
 * computes the hashes (see "Hashes"), asks for each value's slot to be
 * fetched (__builtin_prefetch), and hands the hashes over through a ring, one
 * for each str and bytes opcode, TUPLE1-3, TUPLE, FROZENSET and REDUCE (the
 * hash of the frozenset that a REDUCE may make), in the order of the data: the
 * walk behind takes them in that order (take_hash), and computes none itself.
 * It decides nothing else and writes nothing else. It stops at STOP, and at
 * the first opcode that the walk behind refuses too, before handing its hash
 * over (if it had one). */
enum {
    AHEAD_MARK = 1,
    AHEAD_BUILTINS = 2,       /* the str "builtins" */
    AHEAD_FROZENSET_NAME = 4, /* the str "frozenset" */
    AHEAD_FROZENSET_TYPE = 8, /* builtins.frozenset */
    AHEAD_TUPLE = 16,         /* a tuple, or EMPTY_TUPLE */
    AHEAD_MEMBERS = 32,       /* a 1-tuple of a tuple: frozenset's arguments */
};

static int
ahead_push(Ahead *a, uint64_t hash, uint64_t flags)
{
    if (a->depth == a->stack_capacity) {
        Py_ssize_t capacity = a->stack_capacity ? a->stack_capacity * 2 : 64;
        AheadItem *stack = PyMem_Realloc(a->stack, (size_t)capacity * sizeof(AheadItem));
        if (stack == NULL) {
            a->no_memory = 1;
            return -1;
        }
        a->stack = stack;
        a->stack_capacity = capacity;
    }
    a->stack[a->depth++] = (AheadItem){hash, flags};
    return 0;
}

static Py_ssize_t
ahead_mark(Ahead *a)
{
    for (Py_ssize_t i = a->depth - 1; i >= 0; i--) {
        if (a->stack[i].flags & AHEAD_MARK) {
            return i;
        }
    }
    return -1;
}

/* Whether the top `n` items are there, none of them a mark. */
static int
ahead_items(Ahead *a, Py_ssize_t n)
{
    if (a->depth < n) {
        return 0;
    }
    for (Py_ssize_t i = a->depth - n; i < a->depth; i++) {
        if (a->stack[i].flags & AHEAD_MARK) {
            return 0;
        }
    }
    return 1;
}

static inline void
ahead_met(Walk *w, uint64_t hash, int value)
{
    w->ring[w->ahead.met++ & (RING - 1)] = hash;
    if (value) {
        __builtin_prefetch(&w->slots[slot_hash(hash) & (size_t)w->slot_mask]);
    }
}

/* Replace the top `n` items by the tuple or frozenset of them. */
static int
ahead_value(Walk *w, char tag, Py_ssize_t n)
{
    Ahead *a = &w->ahead;
    AheadItem *items = &a->stack[a->depth - n];
    uint64_t hash = items_hash(tag, &items->hash, n, sizeof(AheadItem));
    uint64_t flags = tag == 't' ? AHEAD_TUPLE : 0;
    if (tag == 't' && n == 1 && (items->flags & AHEAD_TUPLE)) {
        flags |= AHEAD_MEMBERS;
    }
    a->depth -= n;
    ahead_met(w, hash, 1);
    return ahead_push(a, hash, flags);
}

static int
is_text(const unsigned char *bytes, Py_ssize_t length, const char *text)
{
    return length == (Py_ssize_t)strlen(text) && memcmp(bytes, text, (size_t)length) == 0;
}

/* One opcode of the walk ahead: 0, or -1 where it stops. */
static int
ahead_step(Walk *w, const unsigned char *p, const unsigned char *next)
{
    Ahead *a = &w->ahead;
    unsigned char op = *p;
    Py_ssize_t mark, n;
    switch (op) {
    case 0x95: /* FRAME */
    case 0x98: /* READONLY_BUFFER */
        return 0;
    case 0x94: /* MEMOIZE */
        if (a->depth == 0 || (a->stack[a->depth - 1].flags & AHEAD_MARK)) {
            return -1;
        }
        if (grow((void **)&a->memo, &a->memo_capacity, a->memo_count + 1, 8) < 0 ||
            grow((void **)&a->memo_flags, &a->memo_flags_capacity, a->memo_count + 1, 1) < 0) {
            PyErr_Clear(); /* (raised again by the walk behind, at its next hash) */
            a->no_memory = 1;
            return -1;
        }
        a->memo[a->memo_count] = a->stack[a->depth - 1].hash;
        a->memo_flags[a->memo_count++] = (unsigned char)a->stack[a->depth - 1].flags;
        return 0;
    case 'h': case 'j': {
        unsigned long long index = op == 'h' ? p[1] : read_le(p + 1, 4);
        if (index >= (unsigned long long)a->memo_count) {
            return -1;
        }
        return ahead_push(a, a->memo[index], a->memo_flags[index]);
    }
    case '(':
        return ahead_push(a, 0, AHEAD_MARK);
    case 0x8c: case 'X': case 0x8d: case 'C': case 'B': case 0x8e: {
        int size = op == 0x8c || op == 'C' ? 1 : op == 'X' || op == 'B' ? 4 : 8;
        char tag = op == 0x8c || op == 'X' || op == 0x8d ? 's' : 'b';
        const unsigned char *bytes = p + 1 + size;
        Py_ssize_t length = next - bytes;
        uint64_t hash = string_hash(bytes, length, tag), flags = 0;
        if (tag == 's') {
            flags = is_text(bytes, length, "builtins") ? AHEAD_BUILTINS
                  : is_text(bytes, length, "frozenset") ? AHEAD_FROZENSET_NAME : 0;
        }
        ahead_met(w, hash, 1);
        return ahead_push(a, hash, flags);
    }
    case 'N': case 0x88: case 0x89: case 'J': case 'K': case 'M': case 0x8a: case 0x8b: case 'G': case ')':
        return ahead_push(a, atom_hash(p, next), op == ')' ? AHEAD_TUPLE : 0);
    case ']': case '}': case 0x8f: case 0x96: case 0x97: case 'c': case 0x82: case 0x83: case 0x84: case 'P':
        return ahead_push(a, object_hash(p - w->data), 0);
    case 0x85: case 0x86: case 0x87: /* TUPLE1-3 */
        n = op - 0x84;
        return ahead_items(a, n) ? ahead_value(w, 't', n) : -1;
    case 't': case 0x91: /* TUPLE, FROZENSET */
        if ((mark = ahead_mark(a)) < 0) {
            return -1;
        }
        n = a->depth - mark - 1;
        if (ahead_value(w, op == 't' ? 't' : 'z', n) < 0) {
            return -1;
        }
        a->stack[mark] = a->stack[a->depth - 1];
        a->depth = mark + 1;
        return 0;
    case 'l': case 'd': case 'o': case 'i':
        if ((mark = ahead_mark(a)) < 0) {
            return -1;
        }
        a->stack[mark] = (AheadItem){object_hash(p - w->data), 0};
        a->depth = mark + 1;
        return 0;
    case 'R': case 0x81: case 0x92: case 0x93: case 'Q': {
        n = op == 0x92 ? 3 : op == 'Q' ? 1 : 2;
        if (!ahead_items(a, n)) {
            return -1;
        }
        AheadItem *top = &a->stack[a->depth - 1], made = {object_hash(p - w->data), 0};
        if (op == 0x93 && (top[-1].flags & AHEAD_BUILTINS) && (top->flags & AHEAD_FROZENSET_NAME)) {
            made = (AheadItem){FROZENSET_TYPE_HASH, AHEAD_FROZENSET_TYPE};
        }
        else if (op == 'R') {
            int frozenset = (top[-1].flags & AHEAD_FROZENSET_TYPE) && (top->flags & AHEAD_MEMBERS);
            if (frozenset) {
                made.hash = frozenset_hash(top->hash);
            }
            ahead_met(w, made.hash, frozenset);
        }
        a->depth -= n - 1;
        a->stack[a->depth - 1] = made;
        return 0;
    }
    case 'a': case 's': case 'b':
        n = op == 's' ? 2 : 1;
        if (!ahead_items(a, n)) {
            return -1;
        }
        a->depth -= n;
        return 0;
    case 'e': case 'u': case 0x90: case '1':
        if ((mark = ahead_mark(a)) < 0) {
            return -1;
        }
        a->depth = mark;
        return 0;
    case '0':
        if (a->depth == 0) {
            return -1;
        }
        a->depth--;
        return 0;
    }
    return -1; /* STOP, or an opcode the walk behind refuses */
}

/* Walk ahead until `met` values are met, or the walk ahead stops. */
static void
ahead(Walk *w, Py_ssize_t met)
{
    Ahead *a = &w->ahead;
    while (a->met < met) {
        const unsigned char *next = next_opcode(a->p, w->end);
        if (next == NULL || ahead_step(w, a->p, next) < 0) {
            a->stopped = 1;
            return;
        }
        a->p = next;
    }
}

#define STEP_STOP 1
#define STEP_SETS 2 /* (only with unless_sets) */

/* One opcode (at p, its argument up to next): 0, STEP_STOP at STOP, STEP_SETS
 * at a set of two or more members when the walk is to stop there, -1 on error. */
static int
step(Walk *w, const unsigned char *p, const unsigned char *next)
{
    unsigned char op = *p;
    Py_ssize_t start = w->out.length;
    switch (op) {
    case 0x95: /* FRAME: framed anew */
        return 0;
    case 0x94:
        return memoize(w);
    case 'h':
        return get(w, p[1], start);
    case 'j':
        return get(w, read_le(p + 1, 4), start);
    }
    Py_ssize_t length = next - p;
    if (grow((void **)&w->out.bytes, &w->out.capacity, w->out.length + length + 16, 1) < 0) {
        return -1;
    }
    if (length <= 16 && w->end - p >= 16) { /* one copy of a constant size: no call */
        memcpy(w->out.bytes + w->out.length, p, 16);
    }
    else {
        memcpy(w->out.bytes + w->out.length, p, (size_t)length);
    }
    w->out.length += length;
    Py_ssize_t mark;
    switch (op) {
    case '.':
        return w->depth == 1 && w->stack[0].ident != MARK ? STEP_STOP : fail("STOP with a stack of other than one item");
    case '(':
        return push(w, MARK, start, w->written);
    case 0x8c: case 'X': case 0x8d: case 'C': case 'B': case 0x8e: { /* str, bytes */
        char tag = op == 0x8c || op == 'X' || op == 0x8d ? 's' : 'b';
        uint64_t hash;
        if (take_hash(w, &hash) < 0) {
            return -1;
        }
        Py_ssize_t id = intern_value(w, tag, hash, p - w->data, 0);
        return id < 0 ? -1 : push(w, IDENT(K_VALUE, id), start, w->written);
    }
    case 'N': case 0x88: case 0x89: case 'J': case 'K': case 'M': case 0x8a: case 0x8b: case 'G': case ')':
        return push(w, atom_ident(w, p, next), start, w->written);
    case ']': case '}': case 0x8f: case 0x96: case 0x97: case 'c': case 0x82: case 0x83: case 0x84: case 'P':
        return push(w, IDENT(K_UNIQUE, ++w->unique), start, w->written);
    case 0x85: case 0x86: case 0x87: { /* TUPLE1-3 */
        Py_ssize_t n = op - 0x84;
        if (pop_items(w, n) < 0) {
            return -1;
        }
        return make_value(w, 't', n, w->stack[w->depth - n]);
    }
    case 't': case 0x91: { /* TUPLE, FROZENSET */
        if ((mark = find_mark(w)) < 0) {
            return -1;
        }
        Entry first = w->stack[mark];
        Py_ssize_t n = w->depth - mark - 1;
        if (op == 0x91 && n >= 2 && w->unless_sets) {
            return STEP_SETS;
        }
        if (make_value(w, op == 't' ? 't' : 'z', n, first) < 0) {
            return -1;
        }
        w->stack[mark] = w->stack[w->depth - 1]; /* the value in the mark's place */
        w->depth = mark + 1;
        return 0;
    }
    case 'l': case 'd': case 'o': case 'i': /* LIST, DICT, OBJ, INST */
        if ((mark = find_mark(w)) < 0) {
            return -1;
        }
        w->stack[mark].ident = IDENT(K_UNIQUE, ++w->unique);
        w->depth = mark + 1;
        return 0;
    case 'R': case 0x81: case 0x92: case 0x93: case 'Q': { /* REDUCE & co */
        Py_ssize_t n = op == 0x92 ? 3 : op == 'Q' ? 1 : 2;
        if (pop_items(w, n) < 0) {
            return -1;
        }
        uint64_t ident = IDENT(K_UNIQUE, ++w->unique), hash;
        Entry *top = &w->stack[w->depth - 1];
        if (op == 0x93 && is_str(w, top[-1].ident, "builtins") && is_str(w, top->ident, "frozenset")) {
            ident = FROZENSET_TYPE;
        }
        else if (op == 'R' && (take_hash(w, &hash) < 0 ||
                               (ident = reduced(w, top[-1].ident, top->ident, hash)) == 0)) {
            return -1;
        }
        w->depth -= n - 1;
        w->stack[w->depth - 1].ident = ident;
        return 0;
    }
    case 'a': case 's': case 'b': case 'e': case 'u': case 0x90: { /* fill the object below */
        if (op == 'e' || op == 'u' || op == 0x90) {
            if ((mark = find_mark(w)) < 0) {
                return -1;
            }
            if (op == 0x90 && w->depth - mark - 1 >= 2 && w->unless_sets) {
                return STEP_SETS;
            }
            w->depth = mark;
        }
        else {
            Py_ssize_t n = op == 's' ? 2 : 1;
            if (pop_items(w, n) < 0) {
                return -1;
            }
            w->depth -= n;
        }
        if (w->depth == 0 || w->stack[w->depth - 1].ident == MARK ||
            KIND(w->stack[w->depth - 1].ident) == K_VALUE) {
            return fail("an opcode that fills no object");
        }
        return 0;
    }
    case '0': /* POP: an item, or the mark */
        if (w->depth == 0) {
            return fail("POP of an empty stack");
        }
        w->depth--;
        return 0;
    case '1': /* POP_MARK */
        if ((mark = find_mark(w)) < 0) {
            return -1;
        }
        w->depth = mark;
        return 0;
    case 0x98: /* READONLY_BUFFER */
        return w->depth > 0 && w->stack[w->depth - 1].ident != MARK ? 0 : fail("READONLY_BUFFER with no buffer");
    }
    PyErr_Format(PyExc_ValueError, "canonical_values(): opcode 0x%02x is not written by protocol 4 or 5", op);
    return -1;
}

/* The output after the 2 bytes of PROTO, framed (see after_opcode): its size
 * (write == NULL), or written to `write`. */
static Py_ssize_t
frame(Walk *w, unsigned char *write)
{
    Py_ssize_t total = 0, start = 0;
    for (Py_ssize_t i = 0; i <= w->segment_count; i++) {
        Segment segment = i < w->segment_count ? w->segments[i] : (Segment){w->out.length, 0};
        Py_ssize_t size = segment.end - start;
        int header = segment.large != 1 && size >= FRAME_SIZE_MIN;
        if (write != NULL) {
            if (header) {
                write[total] = 0x95;
                for (int k = 0; k < 8; k++) {
                    write[total + 1 + k] = (unsigned char)((unsigned long long)size >> (8 * k));
                }
            }
            memcpy(write + total + 9 * header, w->out.bytes + start, (size_t)size);
        }
        total += 9 * header + size;
        start = segment.end;
    }
    return total;
}

static PyObject *
walk(PyObject *data, int unless_sets)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *p = view.buf, *end = p + view.len;
    PyObject *result = NULL;
    Walk w = {.data = p, .end = end, .slot_mask = 255, .frozenset_type = FROZENSET_TYPE,
              .unless_sets = unless_sets};
    w.ahead.p = p + 2;
    w.slots = new_slots(256);
    if (w.slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (view.len < 2 || p[0] != 0x80 || (p[1] != 4 && p[1] != 5)) {
        fail("it reads protocol 4 and 5 pickles only");
        goto done;
    }
    if (grow((void **)&w.out.bytes, &w.out.capacity, view.len, 1) < 0) { /* about its size */
        goto done;
    }
    int status = 0;
    for (p += 2; status == 0;) {
        const unsigned char *next = next_opcode(p, end);
        if (next == NULL) {
            fail("the pickle ends inside an opcode, or has no STOP");
            goto done;
        }
        Py_ssize_t before = w.out.length;
        status = step(&w, p, next);
        if (status >= 0 && after_opcode(&w, w.out.length > before ? w.out.length - before : 0) < 0) {
            goto done;
        }
        p = next;
    }
    if (status < 0) {
        goto done;
    }
    if (status == STEP_SETS) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (p != end) {
        fail("data after STOP");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, frame(&w, NULL) + 2);
    if (result != NULL) {
        unsigned char *bytes = (unsigned char *)PyBytes_AS_STRING(result);
        memcpy(bytes, view.buf, 2);
        frame(&w, bytes + 2);
    }
done:
    release(w.out.bytes, (size_t)w.out.capacity);
    release(w.arena.bytes, (size_t)w.arena.capacity);
    release(w.stack, (size_t)w.stack_capacity * sizeof(Entry));
    release(w.segments, (size_t)w.segment_capacity * sizeof(Segment));
    release(w.old_memo, (size_t)w.old_capacity * sizeof(uint64_t));
    PyMem_Free(w.ahead.stack);
    release(w.ahead.memo, (size_t)w.ahead.memo_capacity * 8);
    release(w.ahead.memo_flags, (size_t)w.ahead.memo_flags_capacity);
    release(w.values, (size_t)w.value_capacity * sizeof(Value));
    release(w.slots, ((size_t)w.slot_mask + 1) * sizeof(Slot));
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
canonical_values(PyObject *module, PyObject *data)
{
    return walk(data, 0);
}

/* What sets_to_sort (_sets.c) would say first: None if the data writes a set
 * or frozenset of two or more members itself (ADDITEMS or FROZENSET; the walk
 * stops there), else canonical_values(data). One walk instead of two on the
 * common path of deterministic dumps. */
static PyObject *
canonical_values_unless_sets(PyObject *module, PyObject *data)
{
    return walk(data, 1);
}

static PyMethodDef values_methods[] = {
    {"canonical_values", canonical_values, METH_O,
     PyDoc_STR("canonical_values(data): the pickle with each equal immutable value written once.")},
    {"canonical_values_unless_sets", canonical_values_unless_sets, METH_O,
     PyDoc_STR("canonical_values_unless_sets(data): None if the pickle writes a set of 2+ members "
               "itself, else canonical_values(data).")},
    {NULL, NULL, 0, NULL},
};

static int
init_tables(void)
{
    init_opcode_args();
    seed = (uint64_t)HASH_BYTES("graphpickle", 11);
    empty_tuple_hash = items_hash('t', NULL, 0, 0);
    return 0;
}

static int tables_ready;

static int
values_exec(PyObject *module)
{
    if (once(&tables_ready, init_tables) < 0) {
        return -1;
    }
    return add_version(module, 2); /* VERSION: checked by values.py */
}

GRAPHPICKLE_MODULE_SLOTS(values_slots, values_exec, GRAPHPICKLE_GIL_NOT_USED);

static struct PyModuleDef values_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "graphpickle.determinism._values",
    .m_doc = "The last stage of deterministic dumps, in C: each equal value written once.",
    .m_size = 0,
    .m_methods = values_methods,
    .m_slots = values_slots,
};

PyMODINIT_FUNC
PyInit__values(void)
{
    return PyModuleDef_Init(&values_module);
}
