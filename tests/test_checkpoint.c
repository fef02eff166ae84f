/* tests/test_checkpoint.c - checkpoints (ringflow/checkpoint.h): round trips
 * for every dtype checked against the safetensors layout read independently
 * (jansson), atomic and hijack-proof writing (planted symlinks, paths past
 * PATH_MAX, write errors leave nothing behind), and a reader that rejects
 * every kind of hostile file with the documented code before allocating
 * what the file does not hold. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringflow/debug.h"
#include "testutil.h"

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/rf_ckpt_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
  return system(cmd) == 0 ? 0 : -1;
}

static char *path_in(const char *name) {
  static char buf[8][256];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 256, "%s/%s", dir, name);
  return p;
}

/* Entries of `d` other than . and .. */
static int count_entries(const char *d) {
  DIR *h = opendir(d);
  assert_non_null(h);
  int n = 0;
  for (struct dirent *e; (e = readdir(h));)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(h);
  return n;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(*n + 1);
  assert_int_equal(fread(p, 1, *n, f), *n);
  fclose(f);
  return p;
}

static const rf_dtype ALL[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                               RF_FLOAT64, RF_INT8,     RF_UINT8,
                               RF_INT32,   RF_INT64,    RF_BOOL};
static const char *const ST_NAMES[] = {"F16", "BF16", "F32", "F64", "I8",
                                       "U8",  "I32",  "I64", "BOOL"};
#define NALL (int)(sizeof ALL / sizeof ALL[0])

/* A checkpoint with one tensor per dtype (odd, scalar and empty shapes
 * among them), step 1234 and one metadata entry. */
static rf_checkpoint *sample(uint64_t *rng) {
  rf_checkpoint *c;
  assert_ok(rf_checkpoint_new(&c));
  const rf_shape shapes[] = {rf_shape_of(2, 3, 5), rf_shape_scalar(),
                             rf_shape_of(1, 7), rf_shape_of(2, 0, 4),
                             rf_shape_of(3, 2, 1, 3)};
  for (int i = 0; i < NALL; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer.%d/%s", i, rf_dtype_name(ALL[i]));
    rf_tensor *t = rf_test_random_tensor(rng, ALL[i], shapes[i % 5], -3, 3);
    assert_ok(rf_checkpoint_add(c, name, t));
    rf_tensor_release(t);
  }
  assert_ok(rf_checkpoint_set_step(c, 1234));
  assert_ok(rf_checkpoint_set_metadata(c, "model", "mlp 784-512-256-10"));
  return c;
}

/* The example of ringflow/checkpoint.h, as written there. */
static void header_example(void **state) {
  (void)state;
  char *cwd = getcwd(NULL, 0);
  assert_int_equal(chdir(dir), 0);
  rf_tensor *w_value;
  rf_shape ws = rf_shape_of(2, 784, 512);
  assert_ok(rf_tensor_new(RF_FLOAT32, &ws, NULL, &w_value));
  memset(rf_tensor_mutable_data(w_value), 0, rf_tensor_nbytes(w_value));
  rf_checkpoint *c;
  rf_checkpoint_new(&c);
  rf_checkpoint_add(c, "w", w_value);
  rf_checkpoint_set_step(c, 100);
  rf_status *st = rf_checkpoint_save(c, "model.safetensors");
  assert_ok(st);
  rf_checkpoint_free(c);
  st = rf_checkpoint_load("model.safetensors", &c);
  assert_ok(st);
  rf_tensor *w;
  rf_shape s = rf_shape_of(2, 784, 512);
  st = rf_checkpoint_get(c, "w", RF_FLOAT32, &s, RF_CHECKPOINT_FINITE, &w);
  assert_ok(st);
  assert_int_equal(rf_checkpoint_step(c), 100);
  rf_checkpoint_free(c);
  rf_tensor_release(w_value);
  assert_int_equal(chdir(cwd), 0);
  free(cwd);
}

static void round_trip_every_dtype(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  rf_checkpoint *c = sample(&rng), *back;
  const char *p = path_in("all.safetensors");
  assert_ok(rf_checkpoint_save(c, p));
  assert_ok(rf_checkpoint_load(p, &back));
  assert_int_equal(rf_checkpoint_count(back), NALL);
  assert_int_equal(rf_checkpoint_step(back), 1234);
  assert_string_equal(rf_checkpoint_metadata(back, "model"),
                      "mlp 784-512-256-10");
  for (int i = 0; i < NALL; i++) {
    rf_tensor *a = rf_checkpoint_tensor(c, i),
              *b = rf_checkpoint_tensor(back, i);
    assert_string_equal(rf_checkpoint_name(back, i), rf_checkpoint_name(c, i));
    assert_int_equal(rf_tensor_dtype(b), ALL[i]);
    rf_shape sa = rf_tensor_shape(a), sb = rf_tensor_shape(b);
    assert_true(rf_shape_equal(&sa, &sb));
    assert_int_equal(rf_tensor_nbytes(a), rf_tensor_nbytes(b));
    if (rf_tensor_nbytes(a))
      assert_memory_equal(rf_tensor_data(a), rf_tensor_data(b),
                          rf_tensor_nbytes(a));
  }
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0644);
  assert_int_equal(count_entries(dir), 1); /* no temporary file left */
  rf_checkpoint_free(back);
  rf_checkpoint_free(c);
}

/* The file read by hand against the safetensors layout. */
static void file_is_safetensors(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(2);
  rf_checkpoint *c = sample(&rng);
  const char *p = path_in("layout.safetensors");
  assert_ok(rf_checkpoint_save(c, p));
  size_t n;
  unsigned char *f = read_bytes(p, &n);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)f[i] << (8 * i);
  assert_int_equal(hlen % 8, 0);
  json_error_t err;
  json_t *h = json_loadb((const char *)f + 8, hlen, 0, &err);
  assert_non_null(h);
  json_t *meta = json_object_get(h, "__metadata__");
  assert_string_equal(json_string_value(json_object_get(meta, "ringflow.step")),
                      "1234");
  assert_non_null(json_string_value(json_object_get(meta, "ringflow.crc32")));
  uint64_t at = 0;
  for (int i = 0; i < NALL; i++) {
    rf_tensor *t = rf_checkpoint_tensor(c, i);
    json_t *e = json_object_get(h, rf_checkpoint_name(c, i));
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "dtype")),
                        ST_NAMES[i]);
    json_t *off = json_object_get(e, "data_offsets");
    assert_int_equal(json_integer_value(json_array_get(off, 0)), at);
    at += rf_tensor_nbytes(t);
    assert_int_equal(json_integer_value(json_array_get(off, 1)), at);
    rf_shape s = rf_tensor_shape(t);
    json_t *sh = json_object_get(e, "shape");
    assert_int_equal(json_array_size(sh), s.rank);
    for (int d = 0; d < s.rank; d++)
      assert_int_equal(json_integer_value(json_array_get(sh, d)), s.dims[d]);
    if (rf_tensor_nbytes(t))
      assert_memory_equal(f + 8 + hlen + at - rf_tensor_nbytes(t),
                          rf_tensor_data(t), rf_tensor_nbytes(t));
  }
  assert_int_equal(8 + hlen + at, n);
  json_decref(h);
  free(f);
  rf_checkpoint_free(c);
}

static rf_checkpoint *small(float v) {
  rf_checkpoint *c;
  assert_ok(rf_checkpoint_new(&c));
  rf_tensor *t;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT32, v, &t));
  assert_ok(rf_checkpoint_add(c, "w", t));
  rf_tensor_release(t);
  return c;
}

static void assert_file_is(const char *p, const char *text) {
  size_t n;
  unsigned char *f = read_bytes(p, &n);
  f[n] = 0;
  assert_string_equal((char *)f, text);
  free(f);
}

/* A symlink planted at the target or at the old fixed temporary name is
 * replaced or left alone, never followed. */
static void planted_symlinks_are_not_followed(void **state) {
  (void)state;
  const char *victim = path_in("victim"), *target = path_in("t.ckpt");
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp", target);
  write_bytes(victim, "precious", 8);
  assert_int_equal(symlink(victim, tmp), 0);
  assert_int_equal(symlink(victim, target), 0);
  rf_checkpoint *c = small(1), *back;
  assert_ok(rf_checkpoint_save(c, target));
  assert_file_is(victim, "precious");
  struct stat sb;
  assert_int_equal(lstat(target, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(lstat(tmp, &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
  assert_ok(rf_checkpoint_load(target, &back));
  assert_int_equal(rf_checkpoint_count(back), 1);
  assert_int_equal(count_entries(dir), 3);
  rf_checkpoint_free(back);
  rf_checkpoint_free(c);
}

/* A path of more than PATH_MAX bytes (21 directories of 200 bytes) saves and
 * loads; a file name past NAME_MAX fails cleanly, creating nothing. */
static void long_paths(void **state) {
  (void)state;
  char comp[201];
  memset(comp, 'd', 200);
  comp[200] = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  size_t cap = 64 + 23 * 201;
  char *p = malloc(cap);
  snprintf(p, cap, "%s", dir);
  for (int i = 0; i < 21; i++) {
    assert_int_equal(mkdirat(fd, comp, 0700), 0);
    int next = openat(fd, comp, O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = next;
    strcat(p, "/");
    strcat(p, comp);
  }
  strcat(p, "/model.safetensors");
  assert_true(strlen(p) > 4096);
  rf_checkpoint *c = small(2), *back;
  assert_ok(rf_checkpoint_check_path(p));
  assert_ok(rf_checkpoint_save(c, p));
  assert_ok(rf_checkpoint_load(p, &back));
  assert_float_equal(rf_tensor_get(rf_checkpoint_tensor(back, 0), 0), 2, 0);
  rf_checkpoint_free(back);
  struct stat sb;
  assert_int_equal(fstatat(fd, "model.safetensors", &sb, 0), 0);
  /* a file name past NAME_MAX */
  char *bad = malloc(strlen(dir) + 400);
  snprintf(bad, strlen(dir) + 400, "%s/", dir);
  memset(bad + strlen(bad), 'f', 300);
  bad[strlen(dir) + 301] = 0;
  int before = count_entries(dir);
  assert_status(rf_checkpoint_save(c, bad), RF_INVALID_ARGUMENT, "at most");
  assert_int_equal(count_entries(dir), before);
  close(fd);
  free(bad);
  free(p);
  rf_checkpoint_free(c);
}

/* Errors of the directory part and of the target: each with its code, and
 * no file left behind. */
static void path_errors(void **state) {
  (void)state;
  rf_checkpoint *c = small(3);
  assert_status(rf_checkpoint_save(c, path_in("missing/x.ckpt")), RF_NOT_FOUND,
                "cannot open its directory");
  /* NULL is named as NULL, not as an empty path */
  assert_status(rf_checkpoint_check_path(NULL), RF_INVALID_ARGUMENT,
                "NULL path");
  assert_status(rf_checkpoint_check_path(""), RF_INVALID_ARGUMENT,
                "empty path");
  assert_status(rf_checkpoint_check_path(path_in("missing/x.ckpt")),
                RF_NOT_FOUND, "missing");
  write_bytes(path_in("file"), "x", 1);
  assert_status(rf_checkpoint_save(c, path_in("file/x.ckpt")), RF_NOT_FOUND,
                NULL);
  assert_int_equal(mkdir(path_in("sub"), 0700), 0);
  assert_status(rf_checkpoint_save(c, path_in("sub")), RF_INVALID_ARGUMENT,
                "names a directory");
  assert_status(rf_checkpoint_check_path(path_in("sub")), RF_INVALID_ARGUMENT,
                "names a directory");
  assert_status(rf_checkpoint_save(c, path_in("sub/")), RF_INVALID_ARGUMENT,
                "names a directory");
  assert_status(rf_checkpoint_save(c, ""), RF_INVALID_ARGUMENT, "empty");
  assert_int_equal(count_entries(path_in("sub")), 0);
  assert_ok(rf_checkpoint_check_path(path_in("sub/ok.ckpt")));
  assert_int_equal(count_entries(path_in("sub")), 0);
  if (geteuid() != 0) { /* root writes anywhere */
    assert_int_equal(chmod(path_in("sub"), 0500), 0);
    assert_status(rf_checkpoint_save(c, path_in("sub/x.ckpt")),
                  RF_PERMISSION_DENIED, "cannot create");
    assert_status(rf_checkpoint_check_path(path_in("sub/x.ckpt")),
                  RF_PERMISSION_DENIED, NULL);
    assert_int_equal(chmod(path_in("sub"), 0700), 0);
  }
  assert_int_equal(count_entries(path_in("sub")), 0);
  rf_checkpoint_free(c);
}

/* A write that fails half-way (the file size limit standing in for a full
 * disk) leaves the old file and no temporary one. */
static void failed_write_leaves_old_file(void **state) {
  (void)state;
  const char *p = path_in("old.ckpt");
  write_bytes(p, "old", 3);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &rl);
    rf_checkpoint *c;
    rf_tensor *t;
    rf_shape s = rf_shape_of(1, 100000);
    if (rf_checkpoint_new(&c) || rf_tensor_new(RF_FLOAT32, &s, NULL, &t))
      _exit(2);
    memset(rf_tensor_mutable_data(t), 0, rf_tensor_nbytes(t));
    rf_checkpoint_add(c, "big", t);
    rf_status *st = rf_checkpoint_save(c, p);
    int ok = rf_status_code(st) == RF_RESOURCE_EXHAUSTED &&
             strstr(rf_status_message(st), "write failed");
    if (!ok) fprintf(stderr, "got %s\n", rf_status_message(st));
    _exit(ok ? 0 : 1);
  }
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
  assert_file_is(p, "old");
  assert_int_equal(count_entries(dir), 1);
}

/* ---- hostile files ---- */

/* Writes 8-byte length + header (padded with spaces) + data. */
static void write_st(const char *p, const char *header, const void *data,
                     size_t n) {
  size_t h = strlen(header);
  unsigned char *f = malloc(8 + h + n + 1);
  for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(f + 8, header, h);
  if (n) memcpy(f + 8 + h, data, n);
  write_bytes(p, f, 8 + h + n);
  free(f);
}

static void assert_load_fails(const char *p, rf_code code, const char *sub) {
  rf_checkpoint *c = (rf_checkpoint *)0x1;
  assert_status(rf_checkpoint_load(p, &c), code, sub);
  assert_ptr_equal(c, (rf_checkpoint *)0x1);
}

static void hostile_headers(void **state) {
  (void)state;
  const char *p = path_in("h");
  float d[4] = {1, 2, 3, 4};
  static const struct {
    const char *header;
    size_t data;
    rf_code code;
    const char *sub;
  } cases[] = {
      {"not json", 16, RF_DATA_LOSS, "not valid JSON"},
      {"[1,2]", 16, RF_DATA_LOSS, "not a JSON object"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
       16, RF_DATA_LOSS, "duplicate"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, RF_DATA_LOSS,
       "needs dtype"},
      {"{\"a\":{\"dtype\":\"I16\",\"shape\":[8],\"data_offsets\":[0,16]}}", 16,
       RF_UNIMPLEMENTED, "'I16'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],"
       "\"data_offsets\":[0,16]}}",
       16, RF_UNIMPLEMENTED, "rank 9"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16,
       RF_DATA_LOSS, "need 12"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16,
       RF_DATA_LOSS, "bad dim"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,"
       "4611686018427387904],\"data_offsets\":[0,16]}}",
       16, RF_DATA_LOSS, "larger than the file"},
      /* empty, but its other dims past int64: named (was "larger than the
       * file" of a tensor of no bytes) */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4],"
       "\"data_offsets\":[0,0]}}",
       16, RF_DATA_LOSS, "nonzero dims multiply past INT64_MAX"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,32]}}", 16,
       RF_DATA_LOSS, "outside"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,4]}}", 16,
       RF_DATA_LOSS, "outside"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       16, RF_DATA_LOSS, "overlap or leave a gap"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16,
       RF_DATA_LOSS, "overlap or leave a gap"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16,
       RF_DATA_LOSS, "the file has 16"},
      {"{\"__metadata__\":{\"ringflow.step\":\"-5\"}}", 0, RF_DATA_LOSS,
       "step '-5'"},
      {"{\"__metadata__\":{\"ringflow.step\":\"9223372036854775807\"}}", 0,
       RF_DATA_LOSS, "not an integer in 0..9007199254740992"},
      {"{\"__metadata__\":{\"ringflow.step\":\"9007199254740993\"}}", 0,
       RF_DATA_LOSS, "step"},
      {"{\"__metadata__\":{\"ringflow.step\":\"012\"}}", 0, RF_DATA_LOSS,
       "step '012'"},
      {"{\"__metadata__\":{\"k\":1}}", 0, RF_DATA_LOSS, "not a string"},
      {"{\"__metadata__\":[]}", 0, RF_DATA_LOSS, "not an object"},
      /* 1.0f is 00 00 80 3f: byte 2 of the data is 0x80 */
      {"{\"a\":{\"dtype\":\"BOOL\",\"shape\":[16],\"data_offsets\":[0,16]}}",
       16, RF_DATA_LOSS, "bool tensor 'a' element 2 is 128, not 0 or 1"},
      {"{\"__metadata__\":{\"ringflow.crc32\":\"00000000\"},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
       16, RF_DATA_LOSS, "CRC mismatch"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4,
       RF_DATA_LOSS, "tensor 'a' has data_offsets that are not two integers"},
      /* a CRC not as ringflow writes it: named as such, not as corrupt */
      {"{\"__metadata__\":{\"ringflow.crc32\":\"6522DF69\"}}", 0, RF_DATA_LOSS,
       "ringflow.crc32 '6522DF69' is not 8 lowercase hex digits"},
      {"{\"__metadata__\":{\"ringflow.crc32\":\"123\"}}", 0, RF_DATA_LOSS,
       "'123' is not 8 lowercase hex digits"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    print_message("case %zu: %s\n", i, cases[i].header);
    write_st(p, cases[i].header, d, cases[i].data);
    assert_load_fails(p, cases[i].code, cases[i].sub);
  }
  /* a header from another writer, no CRC, spaces after it: loads */
  write_st(p,
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}"
           "     ",
           d, 16);
  rf_checkpoint *c;
  assert_ok(rf_checkpoint_load(p, &c));
  assert_int_equal(rf_checkpoint_step(c), -1);
  assert_float_equal(rf_tensor_get(rf_checkpoint_tensor(c, 0), 3), 4, 0);
  rf_checkpoint_free(c);
}

/* Metadata keys follow rf_checkpoint_set_metadata's rules on load too (1..
 * RF_CHECKPOINT_NAME_MAX bytes): what can be read can be written again.
 * Refused keys are DATA_LOSS naming the file and the key, cut at
 * RF_STATUS_QUOTE_MAX bytes. */
static void metadata_keys_as_the_writer_takes_them(void **state) {
  (void)state;
  const char *p = path_in("meta");
  size_t longest = RF_CHECKPOINT_NAME_MAX;
  char *key = malloc(5001), *header = malloc(5100);
  /* empty key */
  write_st(p, "{\"__metadata__\":{\"\":\"v\"}}", NULL, 0);
  assert_load_fails(p, RF_DATA_LOSS, "metadata key '' is 0 bytes; 1..1024");
  rf_checkpoint *c = NULL;
  rf_status *st = rf_checkpoint_load(p, &c);
  assert_non_null(strstr(rf_status_message(st), p));
  rf_status_free(st);
  /* one byte too long, and far too long: the key is cut in the message */
  static const size_t lens[] = {RF_CHECKPOINT_NAME_MAX + 1, 5000};
  for (int i = 0; i < 2; i++) {
    size_t len = lens[i];
    memset(key, 'k', len);
    key[len] = '\0';
    snprintf(header, 5100, "{\"__metadata__\":{\"%s\":\"v\"}}", key);
    write_st(p, header, NULL, 0);
    char want[96];
    snprintf(want, sizeof want, "kkk... (%zu bytes)' is %zu bytes; 1..1024",
             len, len);
    st = rf_checkpoint_load(p, &c);
    assert_non_null(st);
    print_message("%s\n", rf_status_message(st));
    assert_int_equal(rf_status_code(st), RF_DATA_LOSS);
    assert_non_null(strstr(rf_status_message(st), want));
    assert_non_null(strstr(rf_status_message(st), p));
    assert_true(strlen(rf_status_message(st)) < 600);
    rf_status_free(st);
    /* rf_checkpoint_set_metadata refuses the same key */
    rf_checkpoint *w;
    assert_ok(rf_checkpoint_new(&w));
    assert_status(rf_checkpoint_set_metadata(w, key, "v"), RF_INVALID_ARGUMENT,
                  "1..1024");
    rf_checkpoint_free(w);
  }
  assert_null(c);
  /* the longest key loads, and saves and loads again */
  memset(key, 'k', longest);
  key[longest] = '\0';
  snprintf(header, 5100, "{\"__metadata__\":{\"%s\":\"v\"}}", key);
  write_st(p, header, NULL, 0);
  assert_ok(rf_checkpoint_load(p, &c));
  assert_string_equal(rf_checkpoint_metadata_key(c, 0), key);
  assert_ok(rf_checkpoint_save(c, p));
  rf_checkpoint_free(c);
  assert_ok(rf_checkpoint_load(p, &c));
  assert_string_equal(rf_checkpoint_metadata(c, key), "v");
  rf_checkpoint_free(c);
  free(header);
  free(key);
}

/* Every prefix of a valid file, and every single flipped data byte, is
 * refused. */
static void truncated_and_corrupt(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(3);
  rf_checkpoint *c = sample(&rng);
  const char *p = path_in("whole"), *q = path_in("cut");
  assert_ok(rf_checkpoint_save(c, p));
  rf_checkpoint_free(c);
  size_t n;
  unsigned char *f = read_bytes(p, &n);
  for (size_t len = 0; len < n; len += 1 + len / 16) {
    write_bytes(q, f, len);
    assert_load_fails(q, RF_DATA_LOSS, NULL);
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)f[i] << (8 * i);
  for (size_t at = 8 + hlen; at < n; at += 7) {
    f[at] ^= 0x10;
    write_bytes(q, f, n);
    assert_load_fails(q, RF_DATA_LOSS, "CRC mismatch");
    f[at] ^= 0x10;
  }
  /* trailing bytes */
  unsigned char *g = malloc(n + 3);
  memcpy(g, f, n);
  memset(g + n, 0, 3);
  write_bytes(q, g, n + 3);
  assert_load_fails(q, RF_DATA_LOSS, "after its header");
  free(g);
  free(f);
}

/* The old format, and files that are not regular: refused at once. */
static void old_format_and_special_files(void **state) {
  (void)state;
  const unsigned char old[32] = {'R', 'F', 'C', 'K', 'P', 'T', 0, 1, 1};
  write_bytes(path_in("old"), old, sizeof old);
  assert_load_fails(path_in("old"), RF_DATA_LOSS, "old format");
  assert_load_fails("/dev/zero", RF_INVALID_ARGUMENT, "not a regular file");
  assert_load_fails(dir, RF_INVALID_ARGUMENT, "not a regular file");
  assert_int_equal(mkfifo(path_in("fifo"), 0600), 0);
  assert_load_fails(path_in("fifo"), RF_INVALID_ARGUMENT, "not a regular file");
  assert_load_fails(path_in("none"), RF_NOT_FOUND, "cannot open");
  write_bytes(path_in("tiny"), "abc", 3);
  assert_load_fails(path_in("tiny"), RF_DATA_LOSS, "too short");
}

/* Sizes a file declares but does not hold are refused before anything that
 * size is allocated: under an address-space limit (builds without ASan) an
 * allocation would fail with RESOURCE_EXHAUSTED instead of DATA_LOSS. */
static void reads_are_bounded_by_the_file(void **state) {
  (void)state;
  const char *p = path_in("bomb"), *s = path_in("sparse");
  /* a header length of 99,999,992 in a 64-byte file */
  unsigned char f[64] = {0};
  uint64_t h = 99999992;
  for (int i = 0; i < 8; i++) f[i] = (unsigned char)(h >> (8 * i));
  write_bytes(p, f, sizeof f);
  /* a 4 GiB tensor declared by a header in a sparse file 1 GiB long */
  const char *hdr =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1073741824],"
      "\"data_offsets\":[0,4294967296]}}";
  write_st(s, hdr, NULL, 0);
  assert_int_equal(truncate(s, 8 + (off_t)strlen(hdr) + (1 << 30)), 0);
  pid_t pid = fork();
  if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    struct rlimit rl = {(rlim_t)512 << 20, (rlim_t)512 << 20};
    setrlimit(RLIMIT_AS, &rl);
#endif
    rf_checkpoint *c;
    rf_status *a = rf_checkpoint_load(p, &c), *b = rf_checkpoint_load(s, &c);
    int ok = rf_status_code(a) == RF_DATA_LOSS &&
             strstr(rf_status_message(a), "past the file") &&
             rf_status_code(b) == RF_DATA_LOSS &&
             strstr(rf_status_message(b), "larger than the file");
    if (!ok)
      fprintf(stderr, "%s\n%s\n", rf_status_message(a), rf_status_message(b));
    _exit(ok ? 0 : 1);
  }
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
}

/* ---- what the trainer checks on load ---- */

static void get_checks_names_shapes_values(void **state) {
  (void)state;
  rf_checkpoint *c;
  assert_ok(rf_checkpoint_new(&c));
  float v[6] = {0.5f, 1, 2, 3, 4, 5};
  rf_shape s = rf_shape_of(2, 2, 3);
  rf_tensor *t;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, v, &t));
  assert_ok(rf_checkpoint_add(c, "good", t));
  rf_tensor_release(t);
  v[4] = NAN;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, v, &t));
  assert_ok(rf_checkpoint_add(c, "nan", t));
  rf_tensor_release(t);
  v[4] = 4;
  v[2] = -INFINITY;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, v, &t));
  assert_ok(rf_checkpoint_add(c, "inf", t));
  rf_tensor_release(t);
  v[2] = 2;
  v[5] = -0.25f;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, v, &t));
  assert_ok(rf_checkpoint_add(c, "v", t));
  rf_tensor_release(t);
  const char *p = path_in("vals");
  assert_ok(rf_checkpoint_save(c, p));
  rf_checkpoint_free(c);
  assert_ok(rf_checkpoint_load(p, &c));
  rf_tensor *out = NULL;
  unsigned all = RF_CHECKPOINT_FINITE | RF_CHECKPOINT_NONNEGATIVE;
  assert_ok(rf_checkpoint_get(c, "good", RF_FLOAT32, &s, all, &out));
  assert_float_equal(rf_tensor_get(out, 5), 5, 0);
  out = NULL;
  assert_status(
      rf_checkpoint_get(c, "nan", RF_FLOAT32, &s, RF_CHECKPOINT_FINITE, &out),
      RF_INVALID_ARGUMENT, "'nan' element 4 is nan");
  assert_status(
      rf_checkpoint_get(c, "inf", RF_FLOAT32, &s, RF_CHECKPOINT_FINITE, &out),
      RF_INVALID_ARGUMENT, "'inf' element 2 is -inf");
  assert_ok(
      rf_checkpoint_get(c, "v", RF_FLOAT32, &s, RF_CHECKPOINT_FINITE, &out));
  out = NULL;
  assert_status(rf_checkpoint_get(c, "v", RF_FLOAT32, &s, all, &out),
                RF_INVALID_ARGUMENT, "'v' element 5 is -0.25; expected >= 0");
  /* -inf with only the sign check: refused as negative, not as infinite */
  assert_status(rf_checkpoint_get(c, "inf", RF_FLOAT32, &s,
                                  RF_CHECKPOINT_NONNEGATIVE, &out),
                RF_INVALID_ARGUMENT, "'inf' element 2 is -inf; expected >= 0");
  rf_shape unknown = rf_shape_unknown();
  assert_status(rf_checkpoint_get(c, "good", RF_FLOAT32, &unknown, 0, &out),
                RF_INVALID_ARGUMENT,
                "'good' is float32 [2,3]; expected float32 of unknown rank");
  /* A shape filled in by hand with a rank past RF_MAX_RANK: refused, and
   * its message reads no dim past the struct's (it printed what followed
   * it on the stack). */
  rf_shape wild;
  memset(&wild, 0, sizeof wild);
  wild.rank = 100;
  assert_status(rf_checkpoint_get(c, "good", RF_FLOAT32, &wild, 0, &out),
                RF_INVALID_ARGUMENT,
                "'good' is float32 [2,3]; expected float32 of rank 100 "
                "(ranks are 0..8)");
  wild.rank = -7;
  assert_status(rf_checkpoint_get(c, "good", RF_FLOAT32, &wild, 0, &out),
                RF_INVALID_ARGUMENT, "expected float32 of rank -7");
  rf_shape other = rf_shape_of(1, 6);
  assert_status(rf_checkpoint_get(c, "good", RF_FLOAT32, &other, 0, &out),
                RF_INVALID_ARGUMENT,
                "'good' is float32 [2,3]; expected "
                "float32 [6]");
  assert_status(rf_checkpoint_get(c, "good", RF_FLOAT64, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "expected float64");
  assert_status(rf_checkpoint_get(c, "absent", RF_FLOAT32, &s, 0, &out),
                RF_NOT_FOUND, "no tensor 'absent'");
  assert_null(out);
  rf_checkpoint_free(c);
}

/* A bool byte other than 0 or 1 (written through rf_tensor_mutable_data)
 * is refused by the save, as the load would refuse the file: nothing is
 * written. */
static void bool_bytes_refused_at_save(void **state) {
  (void)state;
  rf_checkpoint *c;
  assert_ok(rf_checkpoint_new(&c));
  rf_shape s = rf_shape_of(1, (int64_t)5);
  rf_tensor *t;
  assert_ok(rf_tensor_new(RF_BOOL, &s, NULL, &t));
  unsigned char *b = rf_tensor_mutable_data(t);
  memset(b, 1, 5);
  b[3] = 2;
  assert_ok(rf_checkpoint_add(c, "flags", t));
  char *p = path_in("b.safetensors");
  assert_status(rf_checkpoint_save(c, p), RF_INVALID_ARGUMENT,
                "bool tensor 'flags' element 3 is 2, not 0 or 1");
  assert_int_equal(count_entries(dir), 0);
  rf_checkpoint_free(c);
  b[3] = 0; /* t was retained, not copied: now it saves and loads */
  assert_ok(rf_checkpoint_new(&c));
  assert_ok(rf_checkpoint_add(c, "flags", t));
  assert_ok(rf_checkpoint_save(c, p));
  rf_checkpoint_free(c);
  assert_ok(rf_checkpoint_load(p, &c));
  rf_checkpoint_free(c);
  rf_tensor_release(t);
}

static void argument_errors(void **state) {
  (void)state;
  rf_checkpoint *c = small(1);
  rf_tensor *t = rf_checkpoint_tensor(c, 0), *r;
  assert_status(rf_checkpoint_add(c, "w", t), RF_INVALID_ARGUMENT,
                "already holds a tensor named 'w'");
  assert_status(rf_checkpoint_add(c, "", t), RF_INVALID_ARGUMENT, "1..1024");
  assert_status(rf_checkpoint_add(c, "__metadata__", t), RF_INVALID_ARGUMENT,
                "reserved");
  assert_status(rf_checkpoint_add(c, "x", NULL), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_checkpoint_add(c, "bad\xff", t), RF_INVALID_ARGUMENT,
                "not UTF-8");
  assert_status(rf_checkpoint_set_metadata(c, "k", "\xc3"), RF_INVALID_ARGUMENT,
                "not UTF-8");
  rf_shape sc = rf_shape_scalar();
  assert_ok(rf_tensor_new(RF_RESOURCE, &sc, NULL, &r));
  assert_status(rf_checkpoint_add(c, "r", r), RF_INVALID_ARGUMENT,
                "resource cannot be saved");
  rf_tensor_release(r);
  assert_int_equal(rf_checkpoint_count(c), 1);
  assert_status(rf_checkpoint_set_step(c, -5), RF_INVALID_ARGUMENT, "-5");
  assert_status(rf_checkpoint_set_step(c, INT64_MAX), RF_INVALID_ARGUMENT,
                "not in 0..");
  assert_int_equal(rf_checkpoint_step(c), -1);
  assert_ok(rf_checkpoint_set_step(c, RF_CHECKPOINT_STEP_MAX));
  assert_status(rf_checkpoint_set_metadata(c, "ringflow.step", "1"),
                RF_INVALID_ARGUMENT, "reserved");
  assert_ok(rf_checkpoint_set_metadata(c, "k", "1"));
  assert_ok(rf_checkpoint_set_metadata(c, "k", "2"));
  assert_string_equal(rf_checkpoint_metadata(c, "k"), "2");
  assert_null(rf_checkpoint_metadata(c, "none"));
  assert_string_equal(rf_checkpoint_metadata_key(c, 0), "k");
  assert_null(rf_checkpoint_metadata_key(c, 1));
  assert_null(rf_checkpoint_name(c, 1));
  assert_null(rf_checkpoint_tensor(c, -1));
  assert_status(rf_checkpoint_save(c, NULL), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_checkpoint_load(NULL, &c), RF_INVALID_ARGUMENT, NULL);
  /* A header no reader would take (past RF_CHECKPOINT_HEADER_MAX): refused
   * before the file is touched. */
  char *huge = malloc((size_t)RF_CHECKPOINT_HEADER_MAX + 1);
  assert_non_null(huge);
  memset(huge, 'x', RF_CHECKPOINT_HEADER_MAX);
  huge[RF_CHECKPOINT_HEADER_MAX] = '\0';
  assert_ok(rf_checkpoint_set_metadata(c, "big", huge));
  free(huge);
  const char *p = path_in("huge_header");
  unlink(p);
  assert_status(rf_checkpoint_save(c, p), RF_INVALID_ARGUMENT,
                "readers take at most 100000000");
  assert_int_equal(access(p, F_OK), -1);
  rf_checkpoint_free(c);
  rf_checkpoint_free(NULL);
}

/* Every allocation failure of a save and a load returns RESOURCE_EXHAUSTED
 * and leaks nothing. */
static void allocation_failures(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(4);
  const char *p = path_in("oom");
  int failures = 0;
  for (int64_t k = 1;; k++) {
    rf_default_allocator_trim();
    int64_t live = rf_debug_live_allocations();
    rf_debug_fail_allocation_after(k);
    rf_checkpoint *c = NULL, *back = NULL;
    rf_status *st = rf_checkpoint_new(&c);
    for (int i = 0; i < 3 && !st; i++) {
      char name[8];
      snprintf(name, sizeof name, "t%d", i);
      rf_shape s = rf_shape_of(1, 5);
      rf_tensor *t;
      st = rf_tensor_new(RF_FLOAT32, &s, NULL, &t);
      if (!st) {
        for (int j = 0; j < 5; j++)
          rf_tensor_set(t, j, rf_test_uniform(&rng, 0, 1));
        st = rf_checkpoint_add(c, name, t);
        rf_tensor_release(t);
      }
    }
    if (!st) st = rf_checkpoint_set_metadata(c, "m", "v");
    if (!st) st = rf_checkpoint_save(c, p);
    if (!st) st = rf_checkpoint_load(p, &back);
    rf_debug_fail_allocation_after(0);
    rf_checkpoint_free(back);
    rf_checkpoint_free(c);
    rf_default_allocator_trim();
    assert_int_equal(rf_debug_live_allocations(), live);
    if (!st) break;
    assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
    rf_status_free(st);
    failures++;
  }
  assert_true(failures > 5);
  assert_int_equal(count_entries(dir), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(header_example, setup, teardown),
      cmocka_unit_test_setup_teardown(round_trip_every_dtype, setup, teardown),
      cmocka_unit_test_setup_teardown(file_is_safetensors, setup, teardown),
      cmocka_unit_test_setup_teardown(planted_symlinks_are_not_followed, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(long_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(path_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(failed_write_leaves_old_file, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(hostile_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(metadata_keys_as_the_writer_takes_them,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(truncated_and_corrupt, setup, teardown),
      cmocka_unit_test_setup_teardown(old_format_and_special_files, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(reads_are_bounded_by_the_file, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(get_checks_names_shapes_values, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(bool_bytes_refused_at_save, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(argument_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(allocation_failures, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
