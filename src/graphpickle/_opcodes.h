/*
 * How pickle opcodes lay out their arguments, for the C walks over a pickle's
 * opcodes: `core/_speedups.c` (a BYTEARRAY8 longer than the data) and
 * `determinism/_sets.c` (sets written in hash order). Both walk the opcodes
 * as the unpickler reads them, and stop where it would stop with an error.
 */
#ifndef GRAPHPICKLE_OPCODES_H
#define GRAPHPICKLE_OPCODES_H

#include <string.h>

/* How a pickle opcode's argument is laid out (see pickletools.py). Values 0-8
 * are a fixed number of bytes; the others are length-prefixed data or lines. */
enum {
    ARG_UNKNOWN = -1,
    ARG_LEN1 = 101, /* 1-byte length, then that many bytes */
    ARG_LEN4 = 104, /* 4-byte little-endian length (signed for BINSTRING and LONG4) */
    ARG_LEN8 = 108, /* 8-byte little-endian length */
    ARG_LINE = 120, /* text up to a newline */
    ARG_LINE2 = 121 /* two such lines (GLOBAL, INST) */
};

static signed char opcode_arg[256];

static void
init_opcode_args(void)
{
    memset(opcode_arg, ARG_UNKNOWN, sizeof(opcode_arg));
    static const char no_arg[] = "(.012NQRabd}el]ostu)";
    for (const char *c = no_arg; *c; c++) {
        opcode_arg[(unsigned char)*c] = 0;
    }
    static const unsigned char no_arg_binary[] = {
        0x81, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x97, 0x98};
    for (size_t i = 0; i < sizeof(no_arg_binary); i++) {
        opcode_arg[no_arg_binary[i]] = 0;
    }
    opcode_arg['K'] = opcode_arg['h'] = opcode_arg['q'] = opcode_arg[0x80] = opcode_arg[0x82] = 1;
    opcode_arg['M'] = opcode_arg[0x83] = 2;
    opcode_arg['J'] = opcode_arg['j'] = opcode_arg['r'] = opcode_arg[0x84] = 4;
    opcode_arg['G'] = opcode_arg[0x95] = 8; /* BINFLOAT, FRAME (its content is opcodes) */
    opcode_arg['U'] = opcode_arg['C'] = opcode_arg[0x8c] = opcode_arg[0x8a] = ARG_LEN1;
    opcode_arg['T'] = opcode_arg['B'] = opcode_arg['X'] = opcode_arg[0x8b] = ARG_LEN4;
    opcode_arg[0x8e] = opcode_arg[0x8d] = opcode_arg[0x96] = ARG_LEN8;
    static const char line_arg[] = "ILFSVPgp";
    for (const char *c = line_arg; *c; c++) {
        opcode_arg[(unsigned char)*c] = ARG_LINE;
    }
    opcode_arg['c'] = opcode_arg['i'] = ARG_LINE2;
}

static unsigned long long
read_le(const unsigned char *p, int size)
{
    unsigned long long value = 0;
    for (int i = size - 1; i >= 0; i--) {
        value = (value << 8) | p[i];
    }
    return value;
}

/* Skip one newline-terminated argument; NULL if there is no newline. */
static const unsigned char *
skip_line(const unsigned char *p, const unsigned char *end)
{
    const unsigned char *newline = memchr(p, '\n', (size_t)(end - p));
    return newline == NULL ? NULL : newline + 1;
}

/* The position after the opcode at p and its argument; NULL if the data ends
 * inside them or the byte at p is no pickle opcode (the unpickler would stop
 * there with an error). */
static const unsigned char *
skip_opcode(const unsigned char *p, const unsigned char *end)
{
    if (p >= end) {
        return NULL;
    }
    int kind = opcode_arg[*p];
    if (kind >= 0 && kind <= 8) { /* most opcodes: a fixed size */
        return end - p > kind ? p + 1 + kind : NULL;
    }
    if (kind == ARG_LEN1) { /* short strings and bytes */
        return end - p >= 2 && (size_t)(end - p - 2) >= p[1] ? p + 2 + p[1] : NULL;
    }
    unsigned char op = *p++;
    if (kind == ARG_LINE || kind == ARG_LINE2) {
        p = skip_line(p, end);
        if (p != NULL && kind == ARG_LINE2) {
            p = skip_line(p, end);
        }
        return p;
    }
    if (kind != ARG_LEN4 && kind != ARG_LEN8) {
        return NULL; /* ARG_UNKNOWN: no pickle opcode */
    }
    int size = kind - 100;
    if (end - p < size) {
        return NULL;
    }
    unsigned long long length = read_le(p, size);
    if ((op == 'T' || op == 0x8b) && (length & 0x80000000ULL)) { /* signed, negative */
        return NULL;
    }
    p += size;
    return length > (unsigned long long)(end - p) ? NULL : p + length;
}

#endif /* GRAPHPICKLE_OPCODES_H */
