/* kernels/cpu/activation_kernels.c - CPU kernels of the elementwise
 * activations Relu, Sigmoid, Tanh and their gradients _ReluGrad(dy, x),
 * _SigmoidGrad(y, dy), _TanhGrad(y, dy). float16 / bfloat16 compute in float
 * on blocks converted on the stack; float32 / float64 loops run straight over
 * the buffers. Relu passes NaN through (as max(x, 0) does in TensorFlow). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/half.h"
#include "kernels/cpu/nn_kernels.h"
#include "kernels/kernel.h"
#include "kernels/nn_prepare.h"

enum { BLOCK = 256 };

/* out[i] = f(a[i], b[i]); b is NULL for unary ops. Every op has f32 and
 * f64; the integer entries are all set (Relu, _ReluGrad) or all NULL. */
typedef struct ew_op {
  void (*f32)(float *out, const float *a, const float *b, int64_t n);
  void (*f64)(double *out, const double *a, const double *b, int64_t n);
  void (*i8)(int8_t *out, const int8_t *a, const int8_t *b, int64_t n);
  void (*i32)(int32_t *out, const int32_t *a, const int32_t *b, int64_t n);
  void (*i64)(int64_t *out, const int64_t *a, const int64_t *b, int64_t n);
  int64_t cost; /* cycles per element, roughly */
} ew_op;

#define DEFINE_UNARY(NAME, SUFFIX, T, EXPR)                            \
  static void NAME##_##SUFFIX(T *restrict out, const T *a, const T *b, \
                              int64_t n) {                             \
    (void)b;                                                           \
    for (int64_t i = 0; i < n; i++) {                                  \
      T x = a[i];                                                      \
      out[i] = (EXPR);                                                 \
    }                                                                  \
  }
#define DEFINE_BINARY(NAME, SUFFIX, T, EXPR)                           \
  static void NAME##_##SUFFIX(T *restrict out, const T *a, const T *b, \
                              int64_t n) {                             \
    for (int64_t i = 0; i < n; i++) {                                  \
      T x = a[i], y = b[i];                                            \
      out[i] = (EXPR);                                                 \
    }                                                                  \
  }

/* x: first input, y: second. */
// clang-format off
#define RELU(T) (x < 0 ? (T)0 : x)
#define RELU_GRAD(T) (y > 0 ? x : (T)0)
DEFINE_UNARY(relu, f32, float, RELU(float))
DEFINE_UNARY(relu, f64, double, RELU(double))
DEFINE_UNARY(relu, i8, int8_t, RELU(int8_t))
DEFINE_UNARY(relu, i32, int32_t, RELU(int32_t))
DEFINE_UNARY(relu, i64, int64_t, RELU(int64_t))
DEFINE_BINARY(relu_grad, f32, float, RELU_GRAD(float))
DEFINE_BINARY(relu_grad, f64, double, RELU_GRAD(double))
DEFINE_BINARY(relu_grad, i8, int8_t, RELU_GRAD(int8_t))
DEFINE_BINARY(relu_grad, i32, int32_t, RELU_GRAD(int32_t))
DEFINE_BINARY(relu_grad, i64, int64_t, RELU_GRAD(int64_t))
DEFINE_UNARY(sigmoid, f32, float, 1.0f / (1.0f + expf(-x)))
DEFINE_UNARY(sigmoid, f64, double, 1.0 / (1.0 + exp(-x)))
DEFINE_UNARY(tanh, f32, float, tanhf(x))
DEFINE_UNARY(tanh, f64, double, tanh(x))
/* (y, dy): x is the forward output, y the incoming gradient. */
DEFINE_BINARY(sigmoid_grad, f32, float, y * x * (1.0f - x))
DEFINE_BINARY(sigmoid_grad, f64, double, y * x * (1.0 - x))
DEFINE_BINARY(tanh_grad, f32, float, y * (1.0f - x * x))
DEFINE_BINARY(tanh_grad, f64, double, y * (1.0 - x * x))
// clang-format on

static const ew_op relu_op = {relu_f32, relu_f64, relu_i8,
                              relu_i32, relu_i64, 1};
static const ew_op relu_grad_op = {relu_grad_f32, relu_grad_f64, relu_grad_i8,
                                   relu_grad_i32, relu_grad_i64, 1};
static const ew_op sigmoid_op = {sigmoid_f32, sigmoid_f64, NULL,
                                 NULL,        NULL,        20};
static const ew_op tanh_op = {tanh_f32, tanh_f64, NULL, NULL, NULL, 20};
static const ew_op sigmoid_grad_op = {
    sigmoid_grad_f32, sigmoid_grad_f64, NULL, NULL, NULL, 2};
static const ew_op tanh_grad_op = {tanh_grad_f32, tanh_grad_f64, NULL,
                                   NULL,          NULL,          2};

typedef struct ew {
  const ew_op *op;
  rf_dtype dtype;
  const void *a, *b; /* b NULL for unary ops */
  void *out;
} ew;

static void to_float(const uint16_t *s, float *d, int64_t n, bool bf16) {
  for (int64_t i = 0; i < n; i++) d[i] = bf16 ? rf__bf2f(s[i]) : rf__h2f(s[i]);
}

static void from_float(const float *s, uint16_t *d, int64_t n, bool bf16) {
  for (int64_t i = 0; i < n; i++) d[i] = bf16 ? rf__f2bf(s[i]) : rf__f2h(s[i]);
}

/* float16 / bfloat16: through float, BLOCK elements at a time. */
static void run_half(const ew *p, int64_t b, int64_t e) {
  bool bf16 = p->dtype == RF_BFLOAT16;
  float fa[BLOCK], fb[BLOCK], fo[BLOCK];
  for (int64_t i = b; i < e; i += BLOCK) {
    int64_t n = e - i < BLOCK ? e - i : BLOCK;
    to_float((const uint16_t *)p->a + i, fa, n, bf16);
    if (p->b) to_float((const uint16_t *)p->b + i, fb, n, bf16);
    p->op->f32(fo, fa, p->b ? fb : NULL, n);
    from_float(fo, (uint16_t *)p->out + i, n, bf16);
  }
}

#define AT(p, T, i) ((p) ? (const T *)(p) + (i) : NULL)

static void run_ew(void *arg, int64_t b, int64_t e) {
  const ew *p = arg;
  int64_t n = e - b;
  switch (p->dtype) {
    case RF_FLOAT32:
      p->op->f32((float *)p->out + b, AT(p->a, float, b), AT(p->b, float, b),
                 n);
      break;
    case RF_FLOAT64:
      p->op->f64((double *)p->out + b, AT(p->a, double, b), AT(p->b, double, b),
                 n);
      break;
    case RF_INT8:
      p->op->i8((int8_t *)p->out + b, AT(p->a, int8_t, b), AT(p->b, int8_t, b),
                n);
      break;
    case RF_INT32:
      p->op->i32((int32_t *)p->out + b, AT(p->a, int32_t, b),
                 AT(p->b, int32_t, b), n);
      break;
    case RF_INT64:
      p->op->i64((int64_t *)p->out + b, AT(p->a, int64_t, b),
                 AT(p->b, int64_t, b), n);
      break;
    default: run_half(p, b, e); break;
  }
}

/* Runs op over the node's one or two inputs (of one dtype and shape). */
static rf_status *elementwise(rf__kernel_ctx *ctx, const ew_op *op) {
  const rf_tensor *a = ctx->inputs[0];
  const rf_tensor *b = ctx->num_inputs > 1 ? ctx->inputs[1] : NULL;
  /* An op has all three integer loops or none (Relu, _ReluGrad: all). */
  RF_CHECK(rf__activation_prepare(ctx, op->i8 != NULL, "CPU"));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a->dtype, &a->shape, &out));
  ew p = {op, a->dtype, a->data, b ? b->data : NULL, out->data};
  rf__kernel_parallel_for(ctx, a->num_elements, op->cost, run_ew, &p);
  return NULL;
}

static rf_status *relu_compute(rf__kernel_ctx *c) {
  return elementwise(c, &relu_op);
}
static rf_status *sigmoid_compute(rf__kernel_ctx *c) {
  return elementwise(c, &sigmoid_op);
}
static rf_status *tanh_compute(rf__kernel_ctx *c) {
  return elementwise(c, &tanh_op);
}
static rf_status *relu_grad_compute(rf__kernel_ctx *c) {
  return elementwise(c, &relu_grad_op);
}
static rf_status *sigmoid_grad_compute(rf__kernel_ctx *c) {
  return elementwise(c, &sigmoid_grad_op);
}
static rf_status *tanh_grad_compute(rf__kernel_ctx *c) {
  return elementwise(c, &tanh_grad_op);
}

static const rf__kernel_def defs[] = {RF_ACTIVATION_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_activation_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
