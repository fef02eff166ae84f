/* ringflow/checkpoint.h - named tensors on disk as safetensors
 * (https://huggingface.co/docs/safetensors), so PyTorch, JAX and NumPy read
 * what ringflow writes and ringflow reads what they write.
 *
 * A checkpoint is a list of named host tensors plus a step and string
 * metadata. The file: an 8-byte little-endian header length N, N bytes of
 * JSON ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
 * ..., "__metadata__": {"key": "value", ...}}, padded with spaces to a
 * multiple of 8), then the tensors' bytes, little-endian, row-major, in the
 * order they were added, with no gaps. ringflow adds two metadata keys:
 * "ringflow.step" (the step, decimal) and "ringflow.crc32" (zlib's CRC-32 of
 * the whole data section, 8 lowercase hex digits). Keys starting with
 * "ringflow." are reserved: rf_checkpoint_set_metadata refuses them and
 * rf_checkpoint_load skips those it does not know.
 *
 * dtypes: float16 F16, bfloat16 BF16, float32 F32, float64 F64, int8 I8,
 * uint8 U8, int32 I32, int64 I64, bool BOOL. Other safetensors dtypes (I16,
 * U16, U32, U64, F8_E4M3, F8_E5M2, ...) load as UNIMPLEMENTED.
 *
 *   rf_checkpoint *c;  rf_checkpoint_new(&c);
 *   rf_checkpoint_add(c, "w", w_value);  rf_checkpoint_set_step(c, 100);
 *   rf_status *st = rf_checkpoint_save(c, "model.safetensors");
 *   rf_checkpoint_free(c);
 *   st = rf_checkpoint_load("model.safetensors", &c);
 *   rf_tensor *w;  rf_shape s = rf_shape_of(2, 784, 512);
 *   st = rf_checkpoint_get(c, "w", RF_FLOAT32, &s, RF_CHECKPOINT_FINITE, &w);
 *   (w is borrowed from c: retain it to keep it past rf_checkpoint_free)
 */
#ifndef RINGFLOW_CHECKPOINT_H
#define RINGFLOW_CHECKPOINT_H

#include "ringflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest JSON header rf_checkpoint_load reads, in bytes (the limit of
 * the safetensors reference implementation). */
#define RF_CHECKPOINT_HEADER_MAX 100000000
/* The largest step a checkpoint holds: 2^53, exact in a float64 (JSON
 * readers, Python), and far enough from INT64_MAX that training on from it
 * cannot overflow. */
#define RF_CHECKPOINT_STEP_MAX ((int64_t)1 << 53)
/* The longest tensor name or metadata key, in bytes. */
#define RF_CHECKPOINT_NAME_MAX 1024

typedef struct rf_checkpoint rf_checkpoint;

/* An empty checkpoint with no step (rf_checkpoint_step gives -1). On error
 * (RESOURCE_EXHAUSTED) *out is untouched. */
RF_API rf_status *rf_checkpoint_new(rf_checkpoint **out);
/* Releases c and its references to its tensors; NULL is ignored. */
RF_API void rf_checkpoint_free(rf_checkpoint *c);

/* Appends tensor t under `name` (retained; the data is written by
 * rf_checkpoint_save, so nobody may write t meanwhile). INVALID_ARGUMENT for
 * NULL arguments, a name that is empty, longer than RF_CHECKPOINT_NAME_MAX,
 * not UTF-8, "__metadata__" or already in c, or a tensor of a dtype with no
 * safetensors name (resource); RESOURCE_EXHAUSTED. On error c is unchanged. */
RF_API rf_status *rf_checkpoint_add(rf_checkpoint *c, const char *name,
                                    rf_tensor *t);
/* Sets the step: 0..RF_CHECKPOINT_STEP_MAX, else INVALID_ARGUMENT and c is
 * unchanged. */
RF_API rf_status *rf_checkpoint_set_step(rf_checkpoint *c, int64_t step);
/* The step; -1 when none was set (or the file had none). */
RF_API int64_t rf_checkpoint_step(const rf_checkpoint *c);
/* Sets (or replaces) metadata key -> value, both copied. INVALID_ARGUMENT
 * for NULL arguments, an empty key, a key longer than
 * RF_CHECKPOINT_NAME_MAX or starting with "ringflow.", a key or value that
 * is not UTF-8; RESOURCE_EXHAUSTED.
 * On error c is unchanged. */
RF_API rf_status *rf_checkpoint_set_metadata(rf_checkpoint *c, const char *key,
                                             const char *value);
/* The value of metadata `key`, owned by c; NULL when absent. */
RF_API const char *rf_checkpoint_metadata(const rf_checkpoint *c,
                                          const char *key);
/* The i-th metadata key (in file order; the "ringflow." keys are not
 * listed), owned by c; NULL for i out of range. */
RF_API const char *rf_checkpoint_metadata_key(const rf_checkpoint *c, int i);

/* The number of tensors, and the i-th (0 <= i < count, in file order) name
 * and tensor, both owned by c (NULL for i out of range). */
RF_API int rf_checkpoint_count(const rf_checkpoint *c);
RF_API const char *rf_checkpoint_name(const rf_checkpoint *c, int i);
RF_API rf_tensor *rf_checkpoint_tensor(const rf_checkpoint *c, int i);

/* Value checks for rf_checkpoint_get (floating dtypes; others pass):
 * FINITE, no NaN or infinity; NONNEGATIVE, no element below zero. */
#define RF_CHECKPOINT_FINITE 1
#define RF_CHECKPOINT_NONNEGATIVE 2

/* The tensor named `name`, checked: *out is borrowed from c. dtype
 * (RF_DTYPE_INVALID: any) and shape (NULL: any) must match exactly, and
 * every element must pass `checks` (RF_CHECKPOINT_*, or 0). Errors (*out
 * untouched): INVALID_ARGUMENT for NULL c, name or out, a dtype that is
 * neither a dtype nor RF_DTYPE_INVALID, checks holding other bits;
 * NOT_FOUND when there is no such tensor; INVALID_ARGUMENT for a dtype or
 * shape mismatch ("'w' is float64 [3]; expected float32 [2,3]"; an unknown
 * dim, which matches no tensor's, is written '?': "[?,3]"), or a value that
 * fails a check, naming the tensor, the first bad element's index and its
 * value ("'v' element 7 is -0.5; expected >= 0"). */
RF_API rf_status *rf_checkpoint_get(const rf_checkpoint *c, const char *name,
                                    rf_dtype dtype, const rf_shape *shape,
                                    unsigned checks, rf_tensor **out);

/* Writes c to `path` atomically: a new file with a random name in path's
 * directory (created with O_EXCL and O_NOFOLLOW, mode 0600, so nothing
 * planted there is followed or overwritten), the data, fsync, mode 0644,
 * rename over path, fsync of the directory. path is replaced as a name: if
 * it is a symlink the link is replaced, never what it points to. A reader
 * sees the old file or the new one, never a part. Paths of any length work
 * (directories are opened one component at a time); a component longer
 * than the file system allows fails with INVALID_ARGUMENT. On error the
 * temporary file is removed, path is unchanged, and the code says why:
 * INVALID_ARGUMENT (NULL or empty path, path names a directory, a device,
 * a FIFO or a socket, a header - names, shapes and metadata as JSON - past
 * RF_CHECKPOINT_HEADER_MAX bytes, which no reader would take; a bool
 * tensor holding a byte other than 0 or 1, which rf_checkpoint_load
 * refuses),
 * NOT_FOUND (a directory of path is missing or not a directory),
 * PERMISSION_DENIED (the directory is not writable, read-only file system),
 * RESOURCE_EXHAUSTED (disk full, out of memory), DATA_LOSS (an I/O error
 * while writing or syncing), UNKNOWN (another errno; the message names it).
 * Not thread-safe against another save to the same path. */
RF_API rf_status *rf_checkpoint_save(const rf_checkpoint *c, const char *path);

/* Checks that rf_checkpoint_save(c, path) can create its file: path's
 * directory exists and a file can be created in it (one is made and
 * removed), and path is not a directory, device, FIFO or socket. Returns
 * what that save would return (the codes above), so a program can check
 * before it works. */
RF_API rf_status *rf_checkpoint_check_path(const char *path);

/* Reads a safetensors file into a new checkpoint (*out; free with
 * rf_checkpoint_free). Reads are bounded by the file: the header length is
 * checked against RF_CHECKPOINT_HEADER_MAX and the file's size before the
 * header is read, every tensor's data_offsets against its shape and dtype
 * (overflow-checked) and the data section, and then only the declared bytes
 * are read, straight into the tensors, so memory stays proportional to the
 * file. When "ringflow.crc32" is present the data's CRC-32 must match
 * (files from other writers have none and load unchecked). On error *out is
 * untouched: NOT_FOUND (no such file), PERMISSION_DENIED, INVALID_ARGUMENT
 * (NULL arguments, path is not a regular file: a directory, a device such
 * as /dev/zero, a FIFO), DATA_LOSS (truncated or corrupt: header length
 * past the file or past RF_CHECKPOINT_HEADER_MAX, JSON that is not a
 * safetensors header, duplicate names, offsets that overlap, leave gaps,
 * pass the end or disagree with shape x dtype size, a shape whose nonzero
 * dims multiply past INT64_MAX (dtype.h), trailing bytes, CRC
 * mismatch or a "ringflow.crc32" that is not 8 lowercase hex digits, a
 * "ringflow.step" that is not 0..RF_CHECKPOINT_STEP_MAX, a
 * tensor name or metadata key that is empty or longer than
 * RF_CHECKPOINT_NAME_MAX - what rf_checkpoint_add and
 * rf_checkpoint_set_metadata refuse - named in the message, and the old
 * ringflow format, named as such), UNIMPLEMENTED (a dtype ringflow
 * lacks, rank above RF_MAX_RANK), RESOURCE_EXHAUSTED (out of memory). */
RF_API rf_status *rf_checkpoint_load(const char *path, rf_checkpoint **out);

#ifdef __cplusplus
}
#endif
#endif
