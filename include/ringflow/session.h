/* ringflow/session.h - compile a graph once and run it many times.
 *
 * A session copies the graph it is given, so the graph may change or be freed
 * afterwards. Each distinct (feeds, fetches, targets) signature is compiled
 * once (placement, passes, pruning, partitioning into one part per device) and
 * cached. Several threads may call rf_session_run at once; each call is one
 * step with its own step id.
 *
 *   rf_session_options o;  rf_session_options_init(&o);  o.num_cpu_devices = 4;
 *   o.num_gpu_devices = 0;  (gpu:0..N-1 after the CPU devices; see below)
 *   rf_session *s;  rf_status *st = rf_session_new(g, &o, &s);
 *   rf_feed feed = {x, x_value};  rf_tensor *y_value;
 *   st = rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &y_value);
 *
 * GPU sessions may let steps return before their GPU work has run
 * (gpu_sync_on_finish 0), then wait once with rf_session_sync.
 *
 * Several processes (builds with MPI; docs/MULTIPROCESS.md): every process of
 * an MPI job builds the same whole-job graph, whose device names carry a task
 * part ("/task:1/cpu:0"; a name without one means this process's own device),
 * and makes the same sessions and runs in the same order. Each process runs
 * the nodes placed on its own task; collectives meet across processes.
 */
#ifndef RINGFLOW_SESSION_H
#define RINGFLOW_SESSION_H

#include "ringflow/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill with rf_session_options_init before setting fields; fields may be added
 * at the end in later versions. */
/* The longest collective_timeout_ms: 10^12 ms, about 31 years (deadlines
 * are kept in int64 nanoseconds). */
#define RF_COLLECTIVE_TIMEOUT_MS_MAX 1000000000000LL

typedef struct rf_session_options {
  int num_cpu_devices; /* virtual CPU devices cpu:0..N-1; default 1, max 64 */
  int num_threads;     /* worker threads shared by all devices; 0: one per core
                          the process may run on (its CPU affinity: taskset,
                          cpusets and container limits count), divided by the
                          processes an MPI launcher started on this node when
                          it did not bind them (OMPI_COMM_WORLD_LOCAL_SIZE or
                          MPI_LOCALNRANKS), at least 1; at most 4096
                          (rf_session_new: INVALID_ARGUMENT beyond) */
  const char *default_device; /* for nodes with no device and no input
                                 with one (graph.h, rf_graph_push_device);
                                 default "cpu:0" */
  /* How long a collective waits for its participants (default 300000, 5
   * minutes): a device that never comes, and in a job a process that died
   * or stopped, fails the step with DEADLINE_EXCEEDED naming it within
   * this; in a job within this plus at most 2 s (1 s asking the missing
   * tasks whether they are alive where task 0 checks the collective, 2 s
   * when task 0 is the one gone or the step waits behind an earlier one:
   * docs/MULTIPROCESS.md), the message giving the timeout itself. In
   * 1..RF_COLLECTIVE_TIMEOUT_MS_MAX; another value fails rf_session_new
   * with INVALID_ARGUMENT. */
  int64_t collective_timeout_ms;
  /* GPU devices gpu:0..N-1 (default 0, max 64), listed after the CPU
   * devices. gpu:i runs on physical GPU i % (number of GPUs), each with its
   * own stream, so N may exceed the number of GPUs: gpu:0..7 on one GPU are
   * eight devices sharing its memory. Values computed on a GPU are copied to
   * host memory when fetched (every fetched tensor is a host tensor). With
   * N > 0 and no usable GPU (a build without CUDA, no device, no driver)
   * rf_session_new fails with FAILED_PRECONDITION "... no GPU: <reason>".
   * cuBLAS is opened when the first GPU device is made: if
   * libcublas.so.13 or libcublasLt.so.13 cannot be opened, rf_session_new
   * fails with UNAVAILABLE "gpu:0 (physical GPU 0): ... cuBLAS:
   * libcublas.so.13 could not be loaded (<the loader's reason>) ...". */
  int num_gpu_devices;
  /* Several processes (docs/MULTIPROCESS.md). RF_JOB_AUTO (default): the
   * session is one task of an MPI job when its graph names a task
   * ("/task:1/cpu:0") and MPI is initialised or the process was started by
   * an MPI launcher (mpirun, mpiexec, srun); otherwise it is one process,
   * task 0 of 1. RF_JOB_SINGLE: always one process. RF_JOB_MPI: always a
   * task of an MPI job (FAILED_PRECONDITION in builds without MPI). */
  int job;
  /* The job's processes: a pointer to an MPI_Comm (not owned; the session
   * duplicates it); NULL: MPI_COMM_WORLD. Task k is rank k of it. It must
   * stay valid until every process has come to every session made on it:
   * a session that timed out waiting for a late process still duplicates
   * it in the background when that process comes, in its turn. */
  const void *mpi_comm;
  /* GPU devices: whether a run waits for its steps' GPU work before it
   * returns (TensorFlow's sync_on_finish). 1 (default): it does; an error
   * of that work (a kernel fault, an NCCL error or timeout) is the run's.
   * 0: a step that succeeds returns once its GPU work is enqueued, so steps
   * pipeline on the GPUs (many launches, one wait, as in PyTorch); each
   * device's stream orders the next step's work after it, so results are
   * the same. Fetched values are still complete when returned (a fetch
   * waits for the stream that produced it). Runs with a feed placed on a
   * GPU device (its copy reads the caller's tensor), traced runs, failed
   * steps and steps with collectives across tasks still wait. An error
   * found after a step returned (an NCCL error or collective timeout, a
   * kernel fault) is reported by a later rf_session_run - which then
   * returns it instead of running its step - or by rf_session_sync. Ignored
   * by sessions without GPU devices. Any other value: INVALID_ARGUMENT
   * (also without GPU devices), as for the other switches. */
  int gpu_sync_on_finish;
  /* Graph dumps, for debugging: each compile (of a run's signature, or
   * rf_graph_lower) writes the graph before and after every phase (prune,
   * pre_placement, placement, post_placement, host_memory, task_split,
   * partition, post_partition) into this directory as JSON
   * (rf_graph_from_json loads it) and DOT, named
   *   <compile>_<nn>_<phase>_{before,after}.{json,dot}
   * (compile: a process-wide count, 6 digits; nn: the phase, 2 digits;
   * "task<k>_" first in a job of several processes); from placement on a
   * node's device is its assigned one. NULL (default): the environment
   * variable RF_DUMP_GRAPH_DIR, when set and not empty, names the
   * directory; "": no dumps, whatever the environment says. The directory
   * (and its parents) is made when missing. Dumps were asked for, so one
   * that cannot be made or written fails the compile - rf_session_run or
   * rf_graph_lower returns an error naming the path - rather than go
   * missing unnoticed. Copied by rf_session_new. */
  const char *dump_graph_dir;
  /* Gradient bucketing (docs/COLLECTIVES.md, "Buckets"): at compile time,
   * after placement, all-reduces that agree on dtype, reduction, wire dtype
   * and ordered device set, have one fully known shape and are joined by
   * no path in the step graph are fused into one all-reduce of at most this
   * many bytes per device (slices padded to 64 bytes), in the order their
   * inputs become ready; one larger than a bucket stays alone and closes the
   * bucket being filled, so the all-reduces before it meet without waiting
   * for the ones after it. On CPU devices an all-reduce of more than 4 KiB
   * whose input the bucket would have to copy in (not computed on its
   * device: a fed placeholder, a Const, a variable read, a tensor from
   * another device) stays unfused: the copy would cost more than fusing
   * saves. Results are bit-identical to unfused ones on CPU
   * devices and CUDA-kernel GPU groups. 0: no fusion. A value > 0 is the
   * size for every device kind. RF_BUCKET_BYTES_AUTO (-1, the default,
   * RF_DEFAULT_BUCKET_BYTES): by the all-reduce's devices (a fusable one
   * has devices of one kind), RF_DEFAULT_BUCKET_BYTES_CPU (1 MiB) on CPU
   * devices of one process, RF_DEFAULT_BUCKET_BYTES_CPU_JOB (4 MiB) on CPU
   * devices of several processes (a job's tasks) and
   * RF_DEFAULT_BUCKET_BYTES_GPU (25 MiB) on GPU devices. Any
   * other value < 0: INVALID_ARGUMENT. Each bucket's log line (info)
   * names the size it was filled to. In a job of several processes every
   * process fuses alike (decided on the whole job's graph). */
  int64_t collective_bucket_bytes;
  /* Wire dtype of float32 all-reduces, by name: NULL (default) or
   * "float32": none; "bfloat16" or "float16": each participant casts its
   * input to it and the result back to float32 (accuracy:
   * docs/PERFORMANCE.md). A name, so that options left zero never narrow.
   * An AllReduce's own comm_dtype attr ("auto", "float32", "bfloat16",
   * "float16"; rf_all_reduce_set_comm_dtype) overrides it. Any other
   * string: INVALID_ARGUMENT. Need not outlive rf_session_new. */
  const char *collective_comm_dtype;

  /* ---- TF32 matrix products and convolutions ----
   * GPU devices: 1 lets float32 matrix products (MatMul and BatchMatMul,
   * so also their gradients) use TF32 tensor cores (cuBLAS compute type
   * CUBLAS_COMPUTE_32F_FAST_TF32), and so the float32 convolutions that
   * cuDNN runs (Conv2D, its input and filter gradients and
   * _FusedConv2DBiasRelu: cuDNN's default math, which may pick TF32
   * algorithms): the inputs are rounded to 10 mantissa bits and the
   * products summed in float32, so a result may differ from the float32
   * one by up to about 2^-10 times the sum of |a_ik * b_kj| over its k
   * terms, for several times the speed on large products.
   * 0 (default): plain float32, as PyTorch's default for matrix products
   * (torch.backends.cuda.matmul.allow_tf32 = False; PyTorch's
   * torch.backends.cudnn.allow_tf32, for convolutions, defaults to True).
   * Other dtypes, and CPU devices (whose float32 products are float32),
   * ignore it. Any other value: INVALID_ARGUMENT. */
  int allow_tf32;
  /* ---- CUDA graphs of steps (issue 19) ----
   * GPU devices: 1 replays a step as one CUDA graph. The second run of a
   * (feeds, fetches, targets) signature whose feeds have the shapes of the
   * first is captured (its GPU work recorded once, collectives of virtual
   * GPUs included) and launched; later runs with those shapes copy the
   * feeds into the graph's buffers, launch it and copy the fetches out,
   * with results bit-identical to runs without it. A run with other feed
   * shapes runs without the graph (that shape repeated is captured in its
   * place). A step is never captured, and runs as without graphs, when it
   * has a CPU device, GPU devices on several physical GPUs, values passed
   * between devices (_Send/_Recv), collectives across tasks, a fetched
   * value made on the host, a feed in device memory, or when its capture
   * fails (Dropout is captured: each replay draws its own step's mask,
   * read from device memory the graph writes at launch); traced runs and
   * runs while another run of the session is under way are not captured
   * either. Each reason goes to the log sink (rf_set_log_callback, info:
   * "gpu graphs: ..."). Errors are reported as without graphs; a capture
   * whose step fails launches what it enqueued, as a run without graphs
   * would have run it, and is tried again on a later run. The memory a
   * graph's step used stays its own while the plan lives. A session keeps
   * at most 16 step graphs (one per (feeds, fetches, targets) that was
   * captured); other requests run without one (the log says so) until a
   * graph is dropped (its plan's shapes changed) or the session is freed. With
   * gpu_graphs 1 each GPU device's cuBLAS handle gets a 32 MiB workspace
   * of its own (device memory, freed with the session), so captured
   * products record no memory allocations.
   * 0: never. Default RF_DEFAULT_GPU_GRAPHS, or the environment variable
   * RF_GPU_GRAPHS when it is set to 0 or 1 (read by
   * rf_session_options_init; a value set in code wins); 0 and 1 are
   * ignored without GPU devices. Any other value, or RF_GPU_GRAPHS set to
   * anything else (non-empty), is INVALID_ARGUMENT from rf_session_new,
   * with GPU devices or not, as for the other switches ("session options:
   * gpu_graphs: RF_GPU_GRAPHS is 'x' (0 or 1)"). For finding faults of replayed
   * steps, the environment variable RF_GPU_GRAPH_DEBUG (comma-separated:
   * sync, serial, workspace; docs/PERFORMANCE.md) changes how they are
   * captured and launched, never their values; with gpu_graphs 1 and GPU
   * devices, another word in it makes rf_session_new fail with
   * INVALID_ARGUMENT ("RF_GPU_GRAPH_DEBUG: 'x' is not one of ..."). */
  int gpu_graphs;
  /* ---- multi-tensor optimizer updates (issue 19) ----
   * 1 (default): at compile time, after placement, the ApplyAdam,
   * ApplyAdamW and ApplyMomentum nodes of one op, dtype and device that
   * read the same scalar inputs (the same node outputs: beta powers, lr,
   * betas, epsilon, weight decay, momentum) and the same use_nesterov, whose
   * handles come straight from Variable nodes of that device, and that no
   * path of data or control edges joins, run as one internal node
   * (_MultiApplyAdam, _MultiApplyAdamW, _MultiApplyMomentum; at most 64
   * updates each): one kernel for all their tensors, one launch on a GPU.
   * Results are bit-identical to the updates run one by one, and the
   * variables keep their names (checkpoints see no difference). The
   * grouped updates are applied all or nothing together: a failed one
   * leaves every variable of its group as it was (see rf_variable).
   * AssignMul nodes of one dtype and device (Adam's beta powers), each of
   * its own variable and with no path between them, are grouped the same
   * way (_MultiAssignMul, whose outputs are their new values).
   * 0: each update runs as its own kernel. Any other value:
   * INVALID_ARGUMENT. */
  int group_optimizer_updates;
  /* ---- MatMul epilogues (issue 19) ----
   * Where a MatMul's bias, ReLU and bias gradient run inside the product
   * (passes/fuse_epilogues.c; docs/PERFORMANCE.md, "MatMul epilogues"). At
   * compile time, after placement, on the devices it names:
   * MatMul -> BiasAdd -> Relu becomes one _FusedMatMulBiasRelu node and
   * MatMul -> BiasAdd (when more than a Relu reads the sum) one
   * _FusedMatMulBias, for float16, bfloat16 and float32 products of rank 2
   * whose product feeds only the BiasAdd (the _ReluGrad nodes that read
   * the sum read the ReLU's output instead: the same mask); and a
   * _BiasAddGrad of a rank-2 gradient G together with the MatMul that
   * reduces G over the same rows (a weight gradient, x^T G) becomes one
   * _FusedMatMulBiasGrad. On GPU devices a fused node is one cuBLASLt
   * product with its epilogue (CUBLASLT_EPILOGUE_RELU_BIAS, _BIAS,
   * _BGRADA/_BGRADB): float32 results agree with the unfused kernels' to
   * float32 rounding of the sums, not bit for bit (the product's order of
   * summation differs). Where cuBLASLt offers no algorithm, and with the
   * environment variable RF_CUBLASLT_EPILOGUES=0, it runs the unfused
   * kernels one after the other (bit-identical to unfused), as fused nodes
   * on CPU devices always do. RF_MATMUL_EPILOGUES_AUTO (3, the default
   * after rf_session_options_init: float32 products on GPU devices; a
   * batch-128 MLP step on one GPU runs 5 kernels fewer than unfused),
   * RF_MATMUL_EPILOGUES_OFF (0: nothing fused), RF_MATMUL_EPILOGUES_GPU (1:
   * float32, float16 and bfloat16 products on GPU devices) or
   * RF_MATMUL_EPILOGUES_ALL (2: CPU devices too, for testing the rewrite).
   * float16 and bfloat16 products are left out of the default because training
   * in them on a GPU then no longer follows the CPU's unfused rounding within
   * the GPU tests' tolerances (session 11; docs/PERFORMANCE.md, "MatMul
   * epilogues"). Any other value: INVALID_ARGUMENT from rf_session_new (and
   * from rf_graph_lower). */
  int matmul_epilogues;
  /* ---- Convolution epilogues (issue 17, item 7) ----
   * Where a Conv2D's bias and ReLU run inside the convolution (the same
   * pass as matmul_epilogues; docs/PERFORMANCE.md, "Convolution
   * epilogues"). At compile time, after placement, on the devices it
   * names, Conv2D -> BiasAdd -> Relu becomes one _FusedConv2DBiasRelu node
   * when the convolution feeds only the BiasAdd and the sum only the Relu
   * and _ReluGrad nodes (which then read the ReLU's output: the same
   * mask). On GPU devices, for float32 convolutions that cuDNN takes, the
   * node is one cudnnConvolutionBiasActivationForward with the algorithm
   * Conv2D's search chose (same float32 results as the unfused kernels:
   * the bias is added to the convolution's float32 sum, then the ReLU);
   * elsewhere, and on CPU devices always, it runs Conv2D, BiasAdd and
   * Relu one after the other (bit-identical to unfused). In the backward
   * pass a MaxPoolGrad whose only reader is the _ReluGrad of the ReLU the
   * pool read becomes one _MaxPoolGradRelu (on GPU devices one kernel that
   * keeps the pool's gradient where the pool's input is positive; on CPU
   * devices the two kernels one after the other).
   * RF_CONV_EPILOGUES_OFF (0: nothing fused), RF_CONV_EPILOGUES_GPU (1, the
   * default after rf_session_options_init: on GPU devices; measured in
   * session 21 on an H100, the CNN's batch-1024 step 3.76 ms against 4.13-4.15
   * ms unfused, the same test accuracy; docs/PERFORMANCE.md, "Session 21")
   * or RF_CONV_EPILOGUES_ALL (2: CPU devices too, for testing the
   * rewrite). Any other value: INVALID_ARGUMENT from
   * rf_session_new (and from rf_graph_lower). */
  int conv_epilogues;
} rf_session_options;

enum {
  RF_MATMUL_EPILOGUES_OFF = 0,
  RF_MATMUL_EPILOGUES_GPU = 1,
  RF_MATMUL_EPILOGUES_ALL = 2,
  RF_MATMUL_EPILOGUES_AUTO = 3
};

enum {
  RF_CONV_EPILOGUES_OFF = 0,
  RF_CONV_EPILOGUES_GPU = 1,
  RF_CONV_EPILOGUES_ALL = 2
};

/* gpu_graphs after rf_session_options_init: on (RF_GPU_GRAPHS=0 in the
 * environment, gpu_graphs = 0 in code or `ringflow train --gpu-graphs off`
 * turn it off). On one H200 a replayed batch-128 MLP step on gpu:0 is 3.4x
 * faster (docs/PERFORMANCE.md, "CUDA graphs of steps"). It was off while
 * the training step on 4 or 8 virtual GPUs of one GPU faulted
 * (cudaErrorIllegalAddress); since the stream-ordering fix and a cuBLAS
 * workspace per device (given with gpu_graphs), scripts/gpu_graph_stress.sh
 * passed 24 of 24 runs. A step that cannot be captured runs as without
 * graphs, and results are the same bits either way (but for kernels that
 * differ from step to step anyway: a cuDNN filter gradient that adds with
 * atomics, docs/GPU_KERNELS.md). */
#define RF_DEFAULT_GPU_GRAPHS 1

/* collective_bucket_bytes after rf_session_options_init: RF_BUCKET_BYTES_AUTO,
 * the size by device kind, as measured (docs/PERFORMANCE.md, "Gradient
 * buckets" and "Session 12: the default bucket size"):
 * - CPU devices, 1 MiB: the producers of a bucket's gradients write
 *   straight into it (no copy in), and 1-25 MiB buckets ran steps of 4-64
 *   KiB gradients alike (1.2-1.5x faster than unfused, 4 KiB ones 1.0-1.1x);
 *   of those the smallest lets a backward pass's first bucket start
 *   reducing while earlier layers compute.
 * - GPU devices, 25 MiB (PyTorch DDP's bucket_cap_mb): on 4 virtual GPUs of
 *   one H200, 256 gradients of 4 KiB-1 MiB took 3,102 us a step in 25 MiB
 *   buckets against 4,576 us in 1 MiB ones (session 11, call A), as every
 *   all-reduce there costs a launch and a meeting of the devices' streams. */
#define RF_BUCKET_BYTES_AUTO ((int64_t)-1)
#define RF_DEFAULT_BUCKET_BYTES RF_BUCKET_BYTES_AUTO
#define RF_DEFAULT_BUCKET_BYTES_CPU ((int64_t)1 << 20)
/* - CPU devices of several processes, 4 MiB: each all-reduce across
 *   processes costs a check and MPI's own latency; the MLP's 2.1 MB of
 *   gradients in one bucket instead of two trained 7-8% faster under
 *   `mpirun -np 4` on a 16-core host, and up to 4 MiB a collective runs on
 *   the calling thread (docs/MULTIPROCESS.md, "The direct path";
 *   docs/PERFORMANCE.md, "Session 22"). */
#define RF_DEFAULT_BUCKET_BYTES_CPU_JOB ((int64_t)4 << 20)
#define RF_DEFAULT_BUCKET_BYTES_GPU ((int64_t)25 << 20)

enum { RF_JOB_AUTO = 0, RF_JOB_SINGLE = 1, RF_JOB_MPI = 2 };

RF_API void rf_session_options_init(rf_session_options *opts);

typedef struct rf_session rf_session;

/* A value for one output (a Placeholder's, or any node's) for one run. The
 * value must have the output's dtype and a shape compatible with the one
 * the graph inferred for it; resource outputs (variable handles) cannot be
 * fed. Otherwise rf_session_run fails with INVALID_ARGUMENT naming the node
 * and op. */
typedef struct rf_feed {
  rf_output output;
  rf_tensor *value; /* borrowed for the run; retained if kept */
} rf_feed;

/* Makes a session over a copy of g (opts NULL: defaults). On error *out is
 * untouched. The graph must hold no recorded error (rf_graph_status): one it
 * holds comes back with its own code, as rf_gradients returns it, prefixed
 * "rf_session_new: the graph holds an error: " (rf_graph_lower's:
 * "rf_graph_lower: ..."). Every node's requested device must be one the
 * session has: otherwise INVALID_ARGUMENT
 * naming the node, op and device and the session's devices ("node 'y'
 * (Identity) requests device cpu:9, but the session has cpu:0..cpu:3 (4
 * devices)"), before any run. An environment variable that switches a pass
 * or a CPU kernel (RF_BLAS_THREADS, RF_CPU_CONV, RF_CUBLASLT_EPILOGUES,
 * RF_CUBLASLT_SPLITK, RF_CUDNN_LAYOUT, RF_FLUSH_DENORMALS, RF_FOLD_CONSTANTS,
 * RF_FUSE_XENT_GRAD, RF_SINGLE_COLLECTIVES) set to a value that
 * docs/ARCHITECTURE.md ("Environment variables") does not accept is
 * INVALID_ARGUMENT naming it ("environment variable RF_FOLD_CONSTANTS='off':
 * expected 0 or 1 (or unset)"); empty counts as unset. A session of an MPI job
 * is made collectively: every process of the job calls rf_session_new, in
 * the same order, and each learns the others' device counts; a process
 * that does not come within collective_timeout_ms makes the others fail
 * with DEADLINE_EXCEEDED. If ringflow initialised MPI itself (nobody had),
 * it finalises it when the process exits; a program that initialised MPI
 * finalises it itself, after freeing its sessions, and must have asked for
 * MPI_THREAD_SERIALIZED or more (MPI_THREAD_MULTIPLE if it calls MPI while
 * sessions exist): ringflow's MPI calls come from a thread of its own (and a
 * second one only under MPI_THREAD_MULTIPLE). */
RF_API rf_status *rf_session_new(const rf_graph *g,
                                 const rf_session_options *opts,
                                 rf_session **out);

/* Runs one step: computes `fetches` and runs `targets` (nodes of the graph the
 * session was made from, looked up by name; a session remembers its 8 latest
 * requests, so repeating one with the same nodes skips the lookup, never
 * the feed checks), with `feeds` replacing outputs.
 * On success outputs[i] holds a new reference to fetch i's value (one for
 * each fetch: a fetch repeated is released once per time it was asked for).
 * On error outputs is untouched and the message names the failing node and
 * op, and for an error of the step (a kernel's, a missing feed) the device
 * it ran on; a request refused before the step (a node not in the session's
 * graph, an output index out of range, a feed of another dtype or an
 * incompatible shape, an output fed twice) names the argument or node
 * (NOT_FOUND for a node not in the session's graph, INVALID_ARGUMENT for
 * the others: a NULL s, a negative count, or a NULL feeds, fetches,
 * outputs or targets with a count above 0 is "rf_session_run: outputs is
 * NULL (nfeeds 0, nfetches 2, ntargets 0)" and the like);
 * every device of the step has stopped when this returns, and the session
 * can run again (out of memory included: RESOURCE_EXHAUSTED); the step's
 * variable updates are each applied whole or not at all (see rf_variable). With
 * gpu_sync_on_finish 0 a step that succeeded may still run on the GPUs,
 * and the run may instead return an error of an earlier such step (its
 * own step then does not run; the error is reported once). */
RF_API rf_status *rf_session_run(rf_session *s, const rf_feed *feeds,
                                 int nfeeds, const rf_output *fetches,
                                 int nfetches, rf_node *const *targets,
                                 int ntargets, rf_tensor **outputs);

/* Waits until the GPU work of every step that has returned has run, then
 * returns the first error found after its step returned and not yet
 * reported (see gpu_sync_on_finish), or a failure of a device's stream
 * (NULL: none). Afterwards every variable update of those steps is done.
 * With gpu_sync_on_finish on, or without GPU devices, there is nothing to
 * wait for: it returns at once with NULL. Any thread; steps that start
 * while it waits are not waited for. NULL s: INVALID_ARGUMENT.
 *
 *   o.gpu_sync_on_finish = 0;  ...
 *   for (int i = 0; i < steps; i++)
 *     if ((st = rf_session_run(s, NULL, 0, NULL, 0, &train, 1, NULL))) break;
 *   if (!st) st = rf_session_sync(s);  (the steps' errors, if any) */
RF_API rf_status *rf_session_sync(rf_session *s);

/* Arms tracing: the next run records every kernel of its step (sends,
 * receives and collective participants included, one track per device) and
 * writes a Chrome trace (JSON; open it in Perfetto or chrome://tracing) to
 * `path` before it returns; a failure to write is that run's error, its
 * code from errno (NOT_FOUND: a missing directory; PERMISSION_DENIED;
 * RESOURCE_EXHAUSTED: disk full, a quota or a file size limit; UNKNOWN
 * otherwise, the message naming it), and a regular file cut short by it is
 * removed (a device such as /dev/full is left as it is).
 * Later runs are not traced. A run refused before its step (a bad feed, a
 * node not in the graph) leaves tracing armed for the next run; a step
 * that fails writes no trace (the run returns the step's error) and
 * disarms it. The path is copied. NULL s or path, or an empty path:
 * INVALID_ARGUMENT. */
RF_API rf_status *rf_session_trace_next_run(rf_session *s, const char *path);

/* Runs placement and the PRE/POST_PLACEMENT passes (bucketing by
 * opts->collective_bucket_bytes and collective lowering among them) on a copy
 * of g for a session with `opts`, without pruning, and returns the copy: every
 * node's device is then its assigned device. For looking at what a session
 * would run (`ringflow lower`). */
RF_API rf_status *rf_graph_lower(const rf_graph *g,
                                 const rf_session_options *opts,
                                 rf_graph **out);

/* Which task of its job the session is: *task in [0, *num_tasks); 0 of 1
 * for a session of one process. Either pointer may be NULL. */
RF_API void rf_session_task(const rf_session *s, int *task, int *num_tasks);

/* Which task of MPI_COMM_WORLD this process is, without making a session:
 * when MPI is initialised or the process was started by an MPI launcher
 * (MPI is then initialised for ringflow's use, as rf_session_new would),
 * its rank and size; otherwise, and in builds without MPI, 0 of 1. Errors
 * (FAILED_PRECONDITION) only when MPI cannot be initialised. */
RF_API rf_status *rf_job_tasks(int *task, int *num_tasks);

/* Ending a job after a process died. The library never exits or aborts
 * the process. When ringflow initialised MPI (the program had not), it
 * finalises MPI at exit only once every process of MPI_COMM_WORLD has
 * reached its own exit (a barrier, since MPI_Finalize waits for every
 * process and would hang on a dead one); after a collective across
 * processes failed with DEADLINE_EXCEEDED (and none over every task has
 * completed since) it waits at most 3 s for that, then leaves MPI
 * unfinalised and lets the process exit with the program's own status. A
 * program that initialised MPI itself finalises it itself: after such a
 * DEADLINE_EXCEEDED it should call MPI_Abort, or exit without
 * MPI_Finalize, instead. rf_session_free does not wait for a process that a
 * timed-out collective of the session was waiting for. At exit ringflow
 * leaves the job of every session still alive; freeing such a session
 * later (from an exit handler that runs after ringflow's) only frees its
 * memory; such a session must not be run then. */

/* Frees the session; no run may be in progress. GPU work of pipelined
 * steps (gpu_sync_on_finish 0) is waited for first, and an error it left
 * unreported is dropped (call rf_session_sync first to see it). NULL is
 * ignored. */
RF_API void rf_session_free(rf_session *s);

#ifdef __cplusplus
}
#endif
#endif
