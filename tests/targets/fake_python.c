// SPDX-License-Identifier: Apache-2.0
/* A fake CPython 3.11 (issue 32): not an interpreter, but a process that
 * looks like one to leakwatch and forges what it reads. It exports
 * `_PyRuntime`, `Py_Version` (3.11) and `PyCode_Type`, keeps a thread state
 * under the interpreter's thread-specific key (_PyRuntime.gilstate's
 * autoTSSkey, a real pthread key), and points its current frame at frames
 * and code objects of its own making, laid out as 3.11's headers say
 * (core/symbols/python_runtime.cc has the offsets). Whatever it allocates
 * then carries those Python frames. See target_protocol.h for
 * "ready"/"go"; after "go" it answers "ok", then takes:
 *
 *   "codes N T"  makes N code objects (N at most 4096) that all share one
 *                location table of T bytes (at most 1 MiB), and from each,
 *                one frame deep at an instruction far into the table,
 *                allocates and keeps a 1000-byte block: N sites whose
 *                lines need the whole table read. The table says every
 *                instruction is on line firstlineno + 2 (`fake_code_I`,
 *                file `/srv/fake.py`, firstlineno 100 + I).
 *   "rotate R N" frees the blocks the last rotate kept, then allocates and
 *                keeps a 2048-byte block from each of N (at most 8192) new
 *                stacks of 64 forged frames each (stack J: the innermost
 *                frame at instruction J, J from R*N): the top sites rotate
 *   "exit"       exits
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "target_protocol.h"

/* The symbols leakwatch looks for. 3.11 keeps autoTSSkey at 592 of
 * _PyRuntime: {int initialized; pthread_key_t key}. */
__attribute__((used, aligned(64))) char _PyRuntime[4096];
__attribute__((used)) const unsigned long Py_Version = 0x030b04f0; /* 3.11.4 */
__attribute__((used, aligned(64))) char PyCode_Type[416];

enum {
  RUNTIME_AUTOTSS = 592,
  TS_CFRAME = 56,
  CFRAME_CURRENT = 8,
  FRAME_CODE = 32,
  FRAME_PREVIOUS = 48,
  FRAME_INSTR = 56,
  FRAME_IS_ENTRY = 68,
  FRAME_BYTES = 80,
  CODE_TYPE = 8,
  CODE_SIZE = 16, /* ob_size: code units */
  CODE_FIRSTLINENO = 72,
  CODE_FILENAME = 112,
  CODE_NAME = 120,
  CODE_QUALNAME = 128,
  CODE_LINETABLE = 136,
  CODE_BYTECODE = 184,
  CODE_BYTES = 256,
  STACK_FRAMES = 64,
  MAX_CODES = 4096,
  MAX_ROTATED = 8192,
};

static char tstate[128];
static char cframe[64];

static void put_u64(char *base, size_t off, uint64_t v) { memcpy(base + off, &v, 8); }
static void put_i32(char *base, size_t off, int32_t v) { memcpy(base + off, &v, 4); }

/* A compact ASCII str (3.11: length at 16, state at 32, data at 48). */
static char *make_str(const char *text) {
  size_t n = strlen(text);
  char *s = calloc(1, 48 + n + 1);
  if (s == NULL) lw_die("calloc");
  put_u64(s, 16, n);
  uint32_t state = (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7); /* kind 1, compact, ascii, ready */
  memcpy(s + 32, &state, 4);
  memcpy(s + 48, text, n);
  return s;
}

/* A bytes object of `len` bytes: a location table whose first entry puts
 * line firstlineno + 2 on its 8 code units and every later one adds 0
 * (entries of code 13, "no column": one byte, then the svarint delta). */
static char *make_table(size_t len) {
  char *b = calloc(1, 32 + len);
  if (b == NULL) lw_die("calloc");
  put_u64(b, 16, len);
  for (size_t i = 0; i + 1 < len; i += 2) {
    b[32 + i] = (char)(0x80 | (13 << 3) | 7);
    b[32 + i + 1] = (char)(i == 0 ? 4 : 0); /* svarint: 2 << 1 */
  }
  return b;
}

/* A code object of `units` code units (its bytecode is not there: nothing
 * reads it). */
static char *make_code(const char *name, int firstlineno, char *table, uint64_t units) {
  static char *filename;
  if (filename == NULL) filename = make_str("/srv/fake.py");
  char *c = calloc(1, CODE_BYTES);
  if (c == NULL) lw_die("calloc");
  put_u64(c, CODE_TYPE, (uint64_t)(uintptr_t)PyCode_Type);
  put_u64(c, CODE_SIZE, units);
  put_i32(c, CODE_FIRSTLINENO, firstlineno);
  put_u64(c, CODE_FILENAME, (uint64_t)(uintptr_t)filename);
  char *n = make_str(name);
  put_u64(c, CODE_NAME, (uint64_t)(uintptr_t)n);
  put_u64(c, CODE_QUALNAME, (uint64_t)(uintptr_t)n);
  put_u64(c, CODE_LINETABLE, (uint64_t)(uintptr_t)table);
  return c;
}

static void set_frame(char *frame, char *code, uint64_t lasti, char *previous, int entry) {
  memset(frame, 0, FRAME_BYTES);
  put_u64(frame, FRAME_CODE, (uint64_t)(uintptr_t)code);
  put_u64(frame, FRAME_PREVIOUS, (uint64_t)(uintptr_t)previous);
  put_u64(frame, FRAME_INSTR, (uint64_t)(uintptr_t)code + CODE_BYTECODE + lasti);
  frame[FRAME_IS_ENTRY] = (char)entry;
}

static void set_current(char *frame) { put_u64(cframe, CFRAME_CURRENT, (uint64_t)(uintptr_t)frame); }

LW_SITE static void *forged_block(size_t size) {
  void *p = malloc(size);
  if (p == NULL) lw_die("malloc");
  memset(p, 1, size);
  return p;
}

static void ok(void) { lw_write_all(1, "ok\n", 3); }

static void **kept;
static size_t n_kept;

/* "codes N T" */
static void codes(unsigned n, size_t table_bytes) {
  char *table = make_table(table_bytes);
  /* The instruction: as far into the table as it covers (8 units, 16
   * bytes of bytecode, per 2-byte entry). */
  const uint64_t lasti = (table_bytes / 2 - 1) * 16;
  static char frame[FRAME_BYTES];
  kept = realloc(kept, (n_kept + n) * sizeof *kept);
  if (kept == NULL) lw_die("realloc");
  for (unsigned i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "fake_code_%u", i);
    set_current(NULL); /* the code object's own blocks carry no forged frame */
    char *code = make_code(name, 100 + (int)i, table, lasti / 2 + 8);
    set_frame(frame, code, lasti, NULL, 1);
    set_current(frame);
    kept[n_kept++] = forged_block(1000);
  }
  set_current(NULL);
}

/* "rotate R N": 64 frames of 64 code objects made once. */
static void rotate(unsigned r, unsigned n) {
  static char *stack_codes[STACK_FRAMES];
  static char frames[STACK_FRAMES][FRAME_BYTES];
  static void *rotated[MAX_ROTATED];
  static unsigned n_rotated;
  static char *table;
  if (table == NULL) table = make_table(4096);
  for (int f = 0; f < STACK_FRAMES; f++) {
    if (stack_codes[f] != NULL) continue;
    char name[32];
    snprintf(name, sizeof name, "rotating_%d", f);
    stack_codes[f] = make_code(name, 10 + f, table, 1u << 20);
  }
  for (unsigned i = 0; i < n_rotated; i++) free(rotated[i]);
  n_rotated = 0;
  for (unsigned j = r * n; j < r * n + n; j++) {
    for (int f = STACK_FRAMES - 1; f >= 0; f--)
      set_frame(frames[f], stack_codes[f], f == 0 ? 2 * (uint64_t)j : 2, f + 1 < STACK_FRAMES ? frames[f + 1] : NULL,
                f == STACK_FRAMES - 1);
    set_current(frames[0]);
    rotated[n_rotated++] = forged_block(2048);
  }
  set_current(NULL);
}

int main(void) {
  pthread_key_t key;
  if (pthread_key_create(&key, NULL) != 0 || key >= 32) lw_die("pthread_key_create (a key below 32)");
  if (pthread_setspecific(key, tstate) != 0) lw_die("pthread_setspecific");
  put_u64(tstate, TS_CFRAME, (uint64_t)(uintptr_t)cframe);
  const int initialized = 1;
  const unsigned key_value = (unsigned)key;
  memcpy(_PyRuntime + RUNTIME_AUTOTSS, &initialized, 4);
  memcpy(_PyRuntime + RUNTIME_AUTOTSS + 4, &key_value, 4);
  free(malloc(1)); /* the arena exists before "ready" */
  if (lw_ready_wait_go() != 0) return 0;
  ok();
  char line[64];
  while (lw_read_line(line, sizeof line) == 0) {
    unsigned a = 0, b = 0;
    size_t t = 0;
    if (sscanf(line, "codes %u %zu", &a, &t) == 2 && a <= MAX_CODES && t >= 2 && t <= (1u << 20)) {
      codes(a, t);
      ok();
    } else if (sscanf(line, "rotate %u %u", &a, &b) == 2 && b <= MAX_ROTATED) {
      rotate(a, b);
      ok();
    } else if (strcmp(line, "exit") == 0) {
      break;
    } else {
      lw_write_all(1, "bad\n", 4);
    }
  }
  for (size_t i = 0; i < n_kept; i++) free(kept[i]);
  return 0;
}
