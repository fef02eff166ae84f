/* tools/train.c - `ringflow train`: data-parallel training of an MLP (or
 * with --model cnn, cnn.h's convolutional network) on
 * Fashion-MNIST across virtual CPU devices (or GPUs), with progress, test
 * accuracy after each epoch, a check that every replica holds the same
 * parameters, and --check: the same steps on one device for comparison.
 * Under mpirun every process trains its --devices' replicas of one job-wide
 * graph on its rows of each global batch (train_job.c); task 0 prints and
 * runs --check's single-device reference. */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devices.h"
#include "idx.h"
#include "cnn.h"
#include "mlp.h"
#include "options.h"
#include "prefetch.h"
#include "stop_signal.h"
#include "tools.h"
#include "train_job.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

/* The training or test set: rows [first, first + n) of xt (N, dim) and yt
 * (N), which hold the training rows, then the test rows (the devices' copy
 * with --feed indices); x and y point at the set's own. */
typedef struct dataset {
  int n, dim, first;
  float *x;   /* n * dim, scaled to [0, 1] */
  int32_t *y; /* n */
  rf_tensor *xt, *yt;
} dataset;

/* --feed: where a step's rows come from (parse_options' feed_choices). */
typedef enum feed_mode { FEED_AUTO, FEED_INDICES, FEED_BATCHES } feed_mode;

typedef struct options {
  tool_devices devices;
  int epochs, batch, max_steps, warmup, save_every;
  double lr, collective_timeout; /* seconds */
  int optimizer;                 /* optimizer_kind */
  double dropout;                /* the CNN's dense layer's rate */
  double weight_decay, momentum; /* AdamW's, momentum's */
  uint64_t seed;
  sync_mode sync;
  model_kind model;
  feed_mode feed;
  bool check, quiet, constant_lr, bench, allow_nonfinite, tf32;
  const char *data_dir, *save, *load, *graph_dir, *trace;
  int bucket_mb, comm_dtype; /* -1: the library's default; comm_choices */
  int gpu_graphs;            /* graph_choices: the session's default, off, on */
  int group_updates;         /* graph_choices: the session's default, off, on */
  int epilogues;             /* epilogue_choices: RF_MATMUL_EPILOGUES_* */
  int conv_epilogues;        /* conv_choices: RF_CONV_EPILOGUES_* */
  int filter_format;         /* filter_choices: 1 OHWI */
} options;

static void dataset_free(dataset *d) {
  rf_tensor_release(d->xt);
  rf_tensor_release(d->yt);
}

/* "DIR/PREFIX-KIND.gz", or "DIR/PREFIX-KIND" when only that file (the
 * data gunzipped) exists; malloc'ed (--data may be of any length), or
 * NULL. */
static char *split_path(const char *dir, const char *prefix, const char *kind) {
  int len = snprintf(NULL, 0, "%s/%s-%s.gz", dir, prefix, kind);
  char *p = len < 0 ? NULL : malloc((size_t)len + 1);
  if (!p) return NULL;
  snprintf(p, (size_t)len + 1, "%s/%s-%s.gz", dir, prefix, kind);
  if (access(p, F_OK) != 0) {
    p[len - 3] = '\0';
    if (access(p, F_OK) != 0) p[len - 3] = '.'; /* neither: name the .gz */
  }
  return p;
}

/* Reads DIR/PREFIX-{images,labels}-* (gzipped or not: split_path): at least
 * one image, each of `dim` pixels (28x28 for the model), labels 0..9. On
 * error im and lb hold nothing. */
static rf_status *load_split(const char *dir, const char *prefix, int dim,
                             idx_array *im, idx_array *lb) {
  char *ipath = split_path(dir, prefix, "images-idx3-ubyte"),
       *lpath = split_path(dir, prefix, "labels-idx1-ubyte");
  rf_status *st = ipath && lpath
                      ? idx_read_rank(ipath, (size_t)1 << 30, 3, im)
                      : rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) st = idx_read_rank(lpath, (size_t)1 << 26, 1, lb);
  if (!st) st = idx_check_labelled(im, ipath, lb, lpath, 10);
  if (!st && im->dims[0] == 0) /* no step, no accuracy */
    st = rf_status_new(RF_INVALID_ARGUMENT, "%s holds no images", ipath);
  /* 28x28 exactly: the CNN reads each row as a 28x28 image. */
  if (!st && (im->dims[1] != 28 || im->dims[2] != 28 ||
              im->dims[1] * im->dims[2] != dim))
    st = rf_status_new(RF_INVALID_ARGUMENT,
                       "%s: images are %lldx%lld; the model takes 28x28 (%d "
                       "inputs)",
                       ipath, (long long)im->dims[1], (long long)im->dims[2],
                       dim);
  if (st) {
    idx_free(im);
    idx_free(lb);
  }
  free(ipath);
  free(lpath);
  return st;
}

/* The training set from im[0], lb[0] and the test set from im[1], lb[1]
 * (load_split's), in one pair of tensors (dataset). */
static rf_status *make_datasets(const idx_array *im, const idx_array *lb,
                                int dim, dataset *train, dataset *test) {
  int n = (int)(im[0].dims[0] + im[1].dims[0]);
  rf_shape xs = rf_shape_of(2, n, dim), ys = rf_shape_of(1, n);
  rf_tensor *xt, *yt;
  RF_TOOL_CHECK(rf_tensor_new(RF_FLOAT32, &xs, NULL, &xt));
  rf_status *st = rf_tensor_new(RF_INT32, &ys, NULL, &yt);
  if (st) {
    rf_tensor_release(xt);
    return st;
  }
  float *x = rf_tensor_mutable_data(xt);
  int32_t *y = rf_tensor_mutable_data(yt);
  dataset *sets[2] = {train, test};
  for (int k = 0, first = 0; k < 2; first += sets[k]->n, k++) {
    dataset *d = sets[k];
    *d = (dataset){.n = (int)im[k].dims[0],
                   .dim = dim,
                   .first = first,
                   .x = x + (size_t)first * dim,
                   .y = y + first,
                   .xt = rf_tensor_retain(xt),
                   .yt = rf_tensor_retain(yt)};
    for (size_t i = 0; i < im[k].size; i++) d->x[i] = im[k].data[i] / 255.0f;
    for (size_t i = 0; i < lb[k].size; i++) d->y[i] = lb[k].data[i];
  }
  rf_tensor_release(xt);
  rf_tensor_release(yt);
  return NULL;
}

/* Rows idx[0..rows) of d into new x/y tensors, x shaped xs (rows first: the
 * model's input placeholder). With the data on the devices (data_rows) *x
 * gets the rows' indices in the devices' copy instead, and *y NULL. */
static rf_status *batch_tensors(const trainer *t, const dataset *d,
                                const int *idx, rf_shape xs, rf_tensor **x,
                                rf_tensor **y) {
  int rows = (int)xs.dims[0];
  rf_shape ys = rf_shape_of(1, rows);
  if (t->cfg.data_rows) {
    *y = NULL;
    RF_TOOL_CHECK(rf_tensor_new(RF_INT32, &ys, NULL, x));
    int32_t *p = rf_tensor_mutable_data(*x);
    for (int r = 0; r < rows; r++) p[r] = d->first + idx[r];
    return NULL;
  }
  rf_status *st = rf_tensor_new(RF_FLOAT32, &xs, NULL, x);
  if (st) return st;
  st = rf_tensor_new(RF_INT32, &ys, NULL, y);
  if (st) {
    rf_tensor_release(*x);
    return st;
  }
  float *px = rf_tensor_mutable_data(*x);
  int32_t *py = rf_tensor_mutable_data(*y);
  for (int r = 0; r < rows; r++) {
    memcpy(px + (size_t)r * d->dim, d->x + (size_t)idx[r] * d->dim,
           sizeof(float) * (size_t)d->dim);
    py[r] = d->y[idx[r]];
  }
  return NULL;
}

/* The rows of every replica of this process from the global batch idx: all
 * or none. */
static rf_status *replica_batches(const trainer *t, const dataset *d,
                                  const int *idx, rf_tensor **x,
                                  rf_tensor **y) {
  int rows = t->cfg.device_batch;
  rf_shape xs = rf_output_shape(t->m.rep[t->first].x);
  for (int i = 0; i < t->nlocal; i++) {
    rf_status *st =
        batch_tensors(t, d, idx + (t->first + i) * rows, xs, &x[i], &y[i]);
    if (!st) continue;
    while (i-- > 0) {
      rf_tensor_release(x[i]);
      rf_tensor_release(y[i]);
    }
    return st;
  }
  return NULL;
}

static rf_status *feed_batches(void *arg, const int *idx, rf_tensor **x,
                               rf_tensor **y) {
  const struct feeder *f = arg;
  return replica_batches(f->t, f->data, idx, x, y);
}

/* Feeds of replica r's batch_tensors x and y (y NULL: x holds indices);
 * returns how many. */
static int input_feeds(const mlp_replica *r, rf_tensor *x, rf_tensor *y,
                       rf_feed *feeds) {
  if (!y) {
    feeds[0] = (rf_feed){r->idx, x};
    return 1;
  }
  feeds[0] = (rf_feed){r->x, x};
  feeds[1] = (rf_feed){r->y, y};
  return 2;
}

/* Starts building the batches of the training set d on a helper thread while
 * each step runs (train_step's next_idx). Without a thread, steps build their
 * own. */
static void trainer_prefetch(trainer *t, const dataset *d) {
  t->feed = (struct feeder){t, d};
  t->pf = prefetch_new(feed_batches, &t->feed, t->nlocal);
}

/* Assigns every replica's params and optimizer slots from
 * state[0..slots][p], and Adam's beta powers for a run that goes on from
 * step `step` (mlp.h: power_init; a checkpoint keeps only the step). */
static rf_status *assign_state(trainer *t,
                               rf_tensor *state[3][2 * MLP_MAX_LAYERS],
                               int64_t step) {
  static rf_feed feeds[MLP_MAX_DEVICES * (6 * MLP_MAX_LAYERS + 2)];
  int nf = 0;
  rf_tensor *power[2] = {NULL, NULL};
  bool adam = t->cfg.optimizer != OPT_MOMENTUM;
  if (adam) RF_TOOL_CHECK(mlp_beta_powers(&t->cfg, step, power));
  for (int d = t->first; d < t->first + t->nlocal; d++) {
    for (int k = 0; k <= mlp_num_slots(&t->cfg); k++)
      for (int p = 0; p < t->m.num_params; p++)
        feeds[nf++] = (rf_feed){t->m.rep[d].init[k][p], state[k][p]};
    for (int k = 0; k < 2 && adam; k++)
      feeds[nf++] = (rf_feed){t->m.rep[d].power_init[k], power[k]};
  }
  rf_status *st =
      rf_session_run(t->s, feeds, nf, NULL, 0, &t->m.init_op, 1, NULL);
  rf_tensor_release(power[0]);
  rf_tensor_release(power[1]);
  return st;
}

/* job: this process's replicas (NULL: all of them, one process). */
static rf_status *trainer_init(trainer *t, const mlp_config *cfg, uint64_t seed,
                               const rf_session_options *opts,
                               const train_job *job) {
  memset(t, 0, sizeof *t);
  t->cfg = *cfg;
  t->job = job && job->ntasks > 1;
  t->first = t->job ? job->first : 0;
  t->nlocal = t->job ? job->nlocal : cfg->num_devices;
  RF_TOOL_CHECK(mlp_build(cfg, &t->m));
  RF_TOOL_CHECK(rf_session_new(t->m.g, opts, &t->s));
  rf_tensor *state[3][2 * MLP_MAX_LAYERS];
  RF_TOOL_CHECK(mlp_initial_values(cfg, seed, state[0]));
  rf_status *st = mlp_zero_moments(cfg, state[1]);
  int nslots = mlp_num_slots(cfg);
  if (!st) {
    for (int k = 2; k <= nslots; k++)
      for (int p = 0; p < t->m.num_params; p++)
        state[k][p] = rf_tensor_retain(state[1][p]);
    st = assign_state(t, state, 0);
    for (int k = 1; k <= nslots; k++)
      for (int p = 0; p < t->m.num_params; p++) rf_tensor_release(state[k][p]);
  }
  for (int p = 0; p < t->m.num_params; p++) rf_tensor_release(state[0][p]);
  return st;
}

/* Writes replica 0's params, optimizer slots and step count as safetensors
 * (ringflow/checkpoint.h: atomic, fsynced). Every process of a job runs it
 * (sharded moments are all-gathered); `write` says whether this one writes
 * the file. */
static rf_status *trainer_save(trainer *t, const char *path, bool write) {
  int np = t->m.num_params, ns = mlp_num_slots(&t->cfg);
  /* Sharded moments come from all-gathers, which need every replica's
   * participant: fetch the other replicas' copies too, and drop them. */
  int nrep = t->cfg.sync == SYNC_SHARDED ? t->nlocal : 1;
  int n = np + ns * np * nrep;
  rf_output *fetches = malloc(sizeof *fetches * (size_t)n);
  rf_tensor **out = calloc((size_t)n, sizeof *out);
  rf_checkpoint *c = NULL;
  rf_status *st = fetches && out
                      ? rf_checkpoint_new(&c)
                      : rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  for (int p = 0; p < np && !st; p++) {
    fetches[p] = t->m.rep[t->first].params[p];
    for (int r = 0; r < nrep; r++)
      for (int k = 0; k < ns; k++)
        fetches[np + (r * ns + k) * np + p] =
            t->m.rep[t->first + r].moments[k][p];
  }
  if (!st) st = rf_session_run(t->s, NULL, 0, fetches, n, NULL, 0, out);
  /* out[k * np + p]: kind k (param, slots) of param p, as mlp_state_name */
  for (int i = 0; i < (1 + ns) * np && !st; i++) {
    char name[32];
    mlp_state_name(&t->cfg, i / np, i % np, name, sizeof name);
    st = rf_checkpoint_add(c, name, out[i]);
  }
  if (!st) st = rf_checkpoint_set_step(c, t->step);
  if (!st && write) st = rf_checkpoint_save(c, path);
  for (int i = 0; i < n && out; i++) rf_tensor_release(out[i]);
  rf_checkpoint_free(c);
  free(fetches);
  free(out);
  return st;
}

/* --optimizer's and --model's values (also named in messages) */
static const char *const optimizer_choices[] = {[OPT_ADAM] = "adam",
                                                [OPT_ADAMW] = "adamw",
                                                [OPT_MOMENTUM] = "momentum",
                                                NULL};
static const char *const model_choices[] = {
    [MODEL_MLP] = "mlp", [MODEL_CNN] = "cnn", NULL};

/* Whether checkpoint c holds the CNN's first filter in the layout cfg does
 * not use (a checkpoint of the other --filter-format). */
static bool other_filter_layout(const rf_checkpoint *c, const mlp_config *cfg) {
  if (cfg->model != MODEL_CNN) return false;
  rf_shape other = cnn_param_shape(0, !cfg->ohwi);
  for (int i = 0; i < rf_checkpoint_count(c); i++)
    if (strcmp(rf_checkpoint_name(c, i), "W0") == 0) {
      rf_shape s = rf_tensor_shape(rf_checkpoint_tensor(c, i));
      return rf_shape_equal(&s, &other);
    }
  return false;
}

/* Restores a checkpoint after checking it fits the model exactly (names,
 * dtypes, shapes, the optimizer's slots) and holds a state training can go
 * on from: finite parameters and slots, second moments >= 0, a step (0..2^53,
 * which the reader checks); on any mismatch nothing is assigned. */
static rf_status *trainer_load(trainer *t, const char *path) {
  rf_checkpoint *c;
  RF_TOOL_CHECK(rf_checkpoint_load(path, &c));
  int np = t->m.num_params, nk = 1 + mlp_num_slots(&t->cfg);
  rf_tensor *state[3][2 * MLP_MAX_LAYERS];
  rf_status *st = NULL;
  if (rf_checkpoint_count(c) != nk * np) {
    /* which tensor tells the models apart: one only the file has, else one
     * only this model has */
    char extra[32] = "", missing[32] = "";
    for (int i = 0; i < rf_checkpoint_count(c) && !extra[0]; i++) {
      const char *have = rf_checkpoint_name(c, i);
      bool known = false;
      for (int k = 0; k < nk && !known; k++)
        for (int p = 0; p < np && !known; p++) {
          char name[32];
          mlp_state_name(&t->cfg, k, p, name, sizeof name);
          known = strcmp(name, have) == 0;
        }
      if (!known) snprintf(extra, sizeof extra, "%.24s", have);
    }
    for (int k = 0; k < nk && !extra[0] && !missing[0]; k++)
      for (int p = 0; p < np && !missing[0]; p++) {
        char name[32];
        mlp_state_name(&t->cfg, k, p, name, sizeof name);
        bool found = false;
        for (int i = 0; i < rf_checkpoint_count(c) && !found; i++)
          found = strcmp(rf_checkpoint_name(c, i), name) == 0;
        if (!found) snprintf(missing, sizeof missing, "%s", name);
      }
    st = rf_status_new(
        RF_INVALID_ARGUMENT,
        "holds %d tensors; this model (--model %s, --optimizer %s) has %d%s%s%s"
        ": a checkpoint of another --model or --optimizer?",
        rf_checkpoint_count(c), model_choices[t->cfg.model],
        optimizer_choices[t->cfg.optimizer], nk * np,
        extra[0]     ? " (the file holds '"
        : missing[0] ? " (it lacks '"
                     : "",
        extra[0] ? extra : missing, extra[0] || missing[0] ? "')" : "");
  } else if (rf_checkpoint_step(c) < 0)
    st = rf_status_new(RF_INVALID_ARGUMENT,
                       "has no step (metadata ringflow.step)");
  for (int k = 0; k < nk && !st; k++)
    for (int p = 0; p < np && !st; p++) {
      char name[32];
      mlp_state_name(&t->cfg, k, p, name, sizeof name);
      rf_shape want = rf_output_shape(t->m.rep[0].params[p]);
      unsigned checks =
          RF_CHECKPOINT_FINITE | (k == 2 ? RF_CHECKPOINT_NONNEGATIVE : 0);
      st = rf_checkpoint_get(c, name, RF_FLOAT32, &want, checks, &state[k][p]);
    }
  if (st) { /* name the file once: the library's message names the tensor */
    bool other = other_filter_layout(c, &t->cfg);
    rf_status *w = rf_status_new(
        rf_status_code(st), "%s: %s%s%s", path, rf_status_message(st),
        other ? "; its convolution filters are in the other layout: load it "
                "with --filter-format "
              : "",
        other ? (t->cfg.ohwi ? "hwio" : "ohwi") : "");
    rf_status_free(st);
    st = w;
  }
  if (!st) st = assign_state(t, state, rf_checkpoint_step(c));
  if (!st) t->step = rf_checkpoint_step(c);
  rf_checkpoint_free(c);
  return st;
}

static void trainer_free(trainer *t) {
  prefetch_free(t->pf);
  rf_session_free(t->s);
  mlp_free(&t->m);
}

/* With cfg.data_rows: copies d's tensors (every row, training and test)
 * into each of this process's replicas' variables, on their devices (CPU
 * devices keep a reference to d's, shared; a GPU device copies them). */
static rf_status *trainer_load_data(trainer *t, const dataset *d) {
  rf_feed feeds[2 * MLP_MAX_DEVICES];
  int nf = 0;
  for (int i = t->first; i < t->first + t->nlocal; i++) {
    feeds[nf++] = (rf_feed){t->m.rep[i].data_init[0], d->xt};
    feeds[nf++] = (rf_feed){t->m.rep[i].data_init[1], d->yt};
  }
  return rf_session_run(t->s, feeds, nf, NULL, 0, &t->m.data_op, 1, NULL);
}

/* trainer_init, then the data sets onto the devices (--feed indices, auto)
 * or the batch prefetcher (batches). When the copies do not fit (out of
 * memory), --feed auto says so on stderr and feeds batches: cfg->data_rows
 * becomes 0. Not in a job of several processes, whose graphs must agree. */
static rf_status *trainer_start(trainer *t, mlp_config *cfg, const options *o,
                                const rf_session_options *so,
                                const train_job *job, const dataset *d,
                                bool lead) {
  cfg->data_rows =
      o->feed == FEED_BATCHES ? 0 : (int)rf_tensor_num_elements(d->yt);
  rf_status *st = trainer_init(t, cfg, o->seed, so, job);
  if (!st && cfg->data_rows) st = trainer_load_data(t, d);
  bool alone = !job || job->ntasks <= 1;
  if (st && cfg->data_rows && o->feed == FEED_AUTO && alone &&
      rf_status_code(st) == RF_RESOURCE_EXHAUSTED) {
    if (lead)
      fprintf(stderr,
              "ringflow train: the data set does not fit on the devices "
              "(%s); feeding each step's batch from host memory instead\n",
              rf_status_message(st));
    rf_status_free(st);
    trainer_free(t);
    cfg->data_rows = 0;
    st = trainer_init(t, cfg, o->seed, so, job);
  }
  if (!st && !cfg->data_rows) trainer_prefetch(t, d);
  return st;
}

/* The CNN's dropout switch (mlp.h: training) of this process's replicas,
 * fed `on` into feeds[*nf ..]; nothing without dropout. *flag: a new
 * reference the caller releases (NULL when none was needed). */
static rf_status *feed_training(const trainer *t, bool on, rf_feed *feeds,
                                int *nf, rf_tensor **flag) {
  *flag = NULL;
  if (!t->m.rep[t->first].training.node) return NULL;
  RF_TOOL_CHECK(rf_tensor_new_scalar(RF_BOOL, on, flag));
  for (int i = 0; i < t->nlocal; i++)
    feeds[(*nf)++] = (rf_feed){t->m.rep[t->first + i].training, *flag};
  return NULL;
}

/* One step on the global batch idx[0 .. devices*device_batch), of which this
 * process feeds its replicas' rows; *loss gets the mean loss over the global
 * batch. next_idx (or NULL): the next step's batch, which t's prefetcher
 * builds meanwhile; it must stay unchanged until that step. */
static rf_status *train_step(trainer *t, const dataset *d, const int *idx,
                             const int *next_idx, double lr, double *loss) {
  int nd = t->nlocal;
  rf_tensor *x[MLP_MAX_DEVICES], *y[MLP_MAX_DEVICES], *lrt, *on;
  rf_feed feeds[4 * MLP_MAX_DEVICES];
  rf_output fetches[MLP_MAX_DEVICES];
  rf_tensor *losses[MLP_MAX_DEVICES];
  t->step++; /* Adam's beta powers: the step advances them on the devices */
  rf_status *st = rf_tensor_new_scalar(RF_FLOAT32, lr, &lrt);
  if (st) return st;
  if (!t->pf || !prefetch_take(t->pf, idx, &st, x, y))
    st = replica_batches(t, d, idx, x, y);
  if (st) { /* out of memory, here or on the prefetch thread */
    rf_status *why =
        rf_status_new(rf_status_code(st), "the input batch of step %lld: %s",
                      (long long)t->step, rf_status_message(st));
    rf_status_free(st);
    st = why;
  }
  int made = st ? 0 : nd, nf = 0;
  if (!st && next_idx && t->pf) prefetch_start(t->pf, next_idx);
  for (int i = 0; i < made; i++) {
    mlp_replica *r = &t->m.rep[t->first + i];
    nf += input_feeds(r, x[i], y[i], &feeds[nf]);
    feeds[nf++] = (rf_feed){r->lr, lrt};
    fetches[i] = r->loss;
  }
  /* Across processes the mean comes from an all-reduce of every loss. */
  int nfetch = t->job ? 1 : nd;
  if (t->job) fetches[0] = t->m.rep[t->first].loss_avg;
  rf_status *fst = feed_training(t, true, feeds, &nf, &on);
  if (!st)
    st = fst;
  else
    rf_status_free(fst);
  if (!st)
    st = rf_session_run(t->s, feeds, nf, fetches, nfetch, &t->m.train_op, 1,
                        losses);
  if (!st) {
    double sum = 0;
    for (int i = 0; i < nfetch; i++) {
      sum += rf_tensor_get(losses[i], 0);
      rf_tensor_release(losses[i]);
    }
    *loss = sum / nfetch;
  }
  for (int i = 0; i < made; i++) {
    rf_tensor_release(x[i]);
    rf_tensor_release(y[i]);
  }
  rf_tensor_release(lrt);
  rf_tensor_release(on);
  return st;
}

/* Test rows right, data-parallel over this process's replicas (the job adds
 * the processes' counts up). The last global batch is padded with row 0 and
 * only its real rows are counted. */
static rf_status *evaluate(trainer *t, const dataset *d, int64_t *right) {
  int nd = t->nlocal, rows = t->cfg.device_batch;
  int per_step = t->cfg.num_devices * rows, skip = t->first * rows;
  rf_shape xs = rf_output_shape(t->m.rep[t->first].x);
  int64_t correct = 0;
  int *idx = malloc(sizeof(int) * (size_t)per_step);
  if (!idx) return rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  rf_status *st = NULL;
  for (int start = 0; start < d->n && !st; start += per_step) {
    int valid = d->n - start < per_step ? d->n - start : per_step;
    for (int i = 0; i < per_step; i++) idx[i] = i < valid ? start + i : 0;
    rf_tensor *x[MLP_MAX_DEVICES], *y[MLP_MAX_DEVICES], *out[MLP_MAX_DEVICES];
    rf_feed feeds[3 * MLP_MAX_DEVICES];
    rf_output fetches[MLP_MAX_DEVICES];
    rf_tensor *off = NULL;
    int made = 0, nf = 0;
    for (; made < nd && !st; made++)
      st =
          batch_tensors(t, d, idx + skip + made * rows, xs, &x[made], &y[made]);
    if (st) made--;
    for (int i = 0; i < made; i++) {
      nf += input_feeds(&t->m.rep[t->first + i], x[i], y[i], &feeds[nf]);
      fetches[i] = t->m.rep[t->first + i].correct;
    }
    if (!st) st = feed_training(t, false, feeds, &nf, &off);
    if (!st) st = rf_session_run(t->s, feeds, nf, fetches, nd, NULL, 0, out);
    rf_tensor_release(off);
    for (int i = 0; !st && i < nd; i++) {
      const int32_t *ok = rf_tensor_data(out[i]);
      for (int r = 0; r < rows; r++)
        if (skip + i * rows + r < valid) correct += ok[r];
      rf_tensor_release(out[i]);
    }
    for (int i = 0; i < made; i++) {
      rf_tensor_release(x[i]);
      rf_tensor_release(y[i]);
    }
  }
  free(idx);
  if (!st) *right = correct;
  return st;
}

/* Largest difference between this process's replicas' parameters (0 when
 * bit-identical); *params gets the first one's (np new references). */
static rf_status *replica_spread(trainer *t, double *spread,
                                 rf_tensor **params) {
  int nd = t->nlocal, np = t->m.num_params;
  rf_output fetches[MLP_MAX_DEVICES * 2 * MLP_MAX_LAYERS];
  rf_tensor *out[MLP_MAX_DEVICES * 2 * MLP_MAX_LAYERS];
  for (int d = 0; d < nd; d++)
    for (int p = 0; p < np; p++)
      fetches[d * np + p] = t->m.rep[t->first + d].params[p];
  RF_TOOL_CHECK(rf_session_run(t->s, NULL, 0, fetches, nd * np, NULL, 0, out));
  double worst = 0;
  for (int d = 1; d < nd; d++)
    for (int p = 0; p < np; p++)
      if (memcmp(rf_tensor_data(out[d * np + p]), rf_tensor_data(out[p]),
                 rf_tensor_nbytes(out[p])) != 0)
        for (int64_t i = 0; i < rf_tensor_num_elements(out[p]); i++) {
          double diff = fabs(rf_tensor_get(out[d * np + p], i) -
                             rf_tensor_get(out[p], i));
          if (diff > worst || diff != diff) worst = diff;
        }
  for (int p = 0; p < np; p++) params[p] = out[p];
  for (int i = np; i < nd * np; i++) rf_tensor_release(out[i]);
  *spread = worst;
  return NULL;
}

static rf_status *max_param_diff(trainer *a, trainer *b, double *diff) {
  int np = a->m.num_params;
  rf_tensor *pa[2 * MLP_MAX_LAYERS], *pb[2 * MLP_MAX_LAYERS];
  RF_TOOL_CHECK(rf_session_run(a->s, NULL, 0, a->m.rep[a->first].params, np,
                               NULL, 0, pa));
  RF_TOOL_CHECK(
      rf_session_run(b->s, NULL, 0, b->m.rep[0].params, np, NULL, 0, pb));
  double worst = 0;
  for (int p = 0; p < np; p++) {
    for (int64_t i = 0; i < rf_tensor_num_elements(pa[p]); i++) {
      double d = fabs(rf_tensor_get(pa[p], i) - rf_tensor_get(pb[p], i));
      if (d > worst) worst = d;
    }
    rf_tensor_release(pa[p]);
    rf_tensor_release(pb[p]);
  }
  *diff = worst;
  return NULL;
}

/* The training graph as built and as a session runs it (after placement and
 * collective lowering). */
static rf_status *write_graphs(trainer *t, const rf_session_options *o,
                               const char *dir, bool write, bool say) {
  rf_graph *lowered; /* every process of a job lowers (collectively) */
  RF_TOOL_CHECK(rf_graph_lower(t->m.g, o, &lowered));
  rf_status *st =
      write ? tool_write_dot(t->m.g, dir, "train_before_lowering", say) : NULL;
  if (!st && write)
    st = tool_write_dot(lowered, dir, "train_after_lowering", say);
  rf_graph_free(lowered);
  return st;
}

static const char *const sync_choices[] = {
    [SYNC_ALLREDUCE] = "allreduce",
    [SYNC_REDUCE_BROADCAST] = "reduce-broadcast",
    [SYNC_SHARDED] = "sharded",
    NULL};
static const char *const schedule_choices[] = {"cosine", "constant", NULL};
static const char *const comm_choices[] = {"fp32", "bf16", "fp16", NULL};
static const char *const graph_choices[] = {"default", "off", "on", NULL};
/* In RF_MATMUL_EPILOGUES_* order. */
static const char *const epilogue_choices[] = {"off", "gpu", "all", "auto",
                                               NULL};
/* In RF_CONV_EPILOGUES_* order. */
static const char *const conv_choices[] = {"off", "gpu", "all", NULL};
static const char *const filter_choices[] = {"hwio", "ohwi", NULL};
static const char *const comm_dtypes[] = {"float32", "bfloat16", "float16"};
static const char *const feed_choices[] = {[FEED_AUTO] = "auto",
                                           [FEED_INDICES] = "indices",
                                           [FEED_BATCHES] = "batches",
                                           NULL};

/* 0: parsed; otherwise the command's exit code (TOOL_HELP_SHOWN: 0). */
static int parse_options(int argc, char **argv, options *o) {
  *o = (options){.data_dir = DEFAULT_DATA,
                 .epochs = 5,
                 .batch = 128,
                 .lr = 1e-3,
                 .weight_decay = 0.01,
                 .momentum = 0.9,
                 .dropout = 0.5,
                 .collective_timeout = 60,
                 .seed = 1,
                 .sync = SYNC_ALLREDUCE,
                 .warmup = 10,
                 .epilogues = RF_MATMUL_EPILOGUES_AUTO,
                 .conv_epilogues = RF_CONV_EPILOGUES_GPU,
                 .filter_format = 1,
                 .bucket_mb = -1};
  char why[64];
  tool_devices_parse("cpu:0-3", &o->devices, why, sizeof why);
  int sync = SYNC_ALLREDUCE, schedule = 0, model = MODEL_MLP, feed = FEED_AUTO;
  bool steps_given = false, lr_given = false, wd_given = false,
       momentum_given = false, dropout_given = false, filter_given = false,
       warmup_given = false, conv_given = false, epochs_given = false,
       schedule_given = false;
  const tool_opt opts[] = {
      TOOL_DEVICES("devices", &o->devices,
                   "the devices to train on, one replica each (default "
                   "cpu:0-3)"),
      TOOL_CHOICE("model", &model, "M",
                  "the network (default mlp: 784-512-256-10; cnn: conv "
                  "5x5x32, max pool 2x2, conv 5x5x64, max pool 2x2, dense "
                  "1024 with --dropout, dense 10, on 28x28x1 images)",
                  model_choices),
      TOOL_CHOICE("sync", &sync, "MODE",
                  "how the replicas combine gradients (default allreduce): "
                  "an all-reduce; a reduce then a broadcast; or sharded: a "
                  "reduce-scatter, the optimizer on each device's rows of the "
                  "parameters, an all-gather (one update in all)",
                  sync_choices),
      TOOL_INT("epochs", &o->epochs, "N",
               "passes over the training set (default 5)", 1, 100000,
               .given = &epochs_given),
      TOOL_INT("batch", &o->batch, "N",
               "global batch size (default 128), divisible by the device "
               "count and at most the training set's rows",
               1, 1 << 20),
      TOOL_REAL("lr", &o->lr, "X",
                "learning rate (default 0.001; 0.1 with --optimizer "
                "momentum)",
                0, INFINITY, .given = &lr_given),
      TOOL_CHOICE("optimizer", &o->optimizer, "O",
                  "the update every device applies (default adam: "
                  "TensorFlow's Adam, beta1 0.9, beta2 0.999, epsilon 1e-7; "
                  "adamw: PyTorch's AdamW, the same with decoupled "
                  "--weight-decay; momentum: SGD with --momentum, "
                  "TensorFlow's ApplyMomentum)",
                  optimizer_choices),
      TOOL_REAL("weight-decay", &o->weight_decay, "X",
                "AdamW's decoupled weight decay (default 0.01, PyTorch's)", 0,
                INFINITY, .given = &wd_given, .min_included = true),
      TOOL_REAL("momentum", &o->momentum, "X",
                "the momentum of --optimizer momentum (default 0.9; 0: "
                "plain SGD)",
                0, 1, .given = &momentum_given, .min_included = true),
      TOOL_CHOICE("schedule", &schedule, "S",
                  "the learning rate over the run (default cosine: decays "
                  "to 0; constant: --lr throughout)",
                  schedule_choices, .given = &schedule_given),
      TOOL_UINT64("seed", &o->seed, "N",
                  "initialisation and shuffling seed (default 1)"),
      TOOL_INT("steps", &o->max_steps, "N",
               "stop after N steps (default: all of --epochs; with --bench, "
               "100)",
               1, 1 << 30, .given = &steps_given),
      TOOL_REAL("collective-timeout", &o->collective_timeout, "SECONDS",
                "how long a collective waits for its participants (in other "
                "processes too) before the run fails naming who is missing; "
                "a process of the job that died or stopped is reported within "
                "it (default 60)",
                0, 86400),
      TOOL_REAL("dropout", &o->dropout, "RATE",
                "--model cnn: the dense 1024 layer's dropout rate while "
                "training (default 0.5; 0: none; with --check 0, the only "
                "rate it takes: its one device cannot draw the replicas' "
                "per-device masks)",
                0, 0.99, .given = &dropout_given, .min_included = true),
      TOOL_FLAG("check", &o->check,
                "also train on one device and report the largest "
                "differences"),
      TOOL_STRING("data", &o->data_dir, "DIR",
                  "the Fashion-MNIST IDX files "
                  "{train,t10k}-{images-idx3,labels-idx1}-ubyte, each "
                  "gzipped (.gz) or not (default " DEFAULT_DATA ")"),
      TOOL_CHOICE("feed", &feed, "MODE",
                  "where each step's rows come from (the same rows and "
                  "results either way, except the CNN's dropout masks: "
                  "dropout's random key counts session runs, and the "
                  "upload is one). indices: the training and test "
                  "sets are copied once onto every device (220 MB each; "
                  "CPU devices share the host's copy) and a step sends "
                  "only its rows' indices, gathered on the device; "
                  "batches: a step's images and labels are copied from "
                  "host memory; auto (default): indices, or batches with a "
                  "line on stderr when the copies do not fit in device "
                  "memory (in an MPI job that is an error)",
                  feed_choices),
      TOOL_STRING("save", &o->save, "FILE",
                  "write parameters and optimizer state as safetensors at "
                  "the end (replacing FILE atomically); its directory is "
                  "checked at start-up"),
      TOOL_INT("save-every", &o->save_every, "N",
               "with --save, also save every N steps (default 0: only at "
               "the end; each save is a session run, which the CNN's "
               "dropout key counts: later masks differ)",
               0, 1 << 30),
      TOOL_STRING("load", &o->load, "FILE",
                  "start from a checkpoint written by --save: parameters, "
                  "optimizer state and step, and the batches go on after "
                  "that step (--epochs and --steps count this run's steps): "
                  "--steps K --save FILE, then --load FILE --steps M, trains "
                  "as --steps K+M does, bit-identically with --schedule "
                  "constant (cosine decays over each run) and without "
                  "dropout (its key counts session runs)"),
      TOOL_STRING("graph-dir", &o->graph_dir, "DIR",
                  "write the training graph before and after lowering as DOT "
                  "(and SVG with Graphviz)"),
      TOOL_STRING("trace", &o->trace, "FILE",
                  "write a Chrome trace (Perfetto) of one training step"),
      TOOL_FLAG("bench", &o->bench,
                "time training alone: --warmup steps, then --steps timed "
                "steps at a constant --lr; prints samples_per_sec=<x> "
                "batch=<b> devices=<n> ... feed=<indices|batches>"),
      TOOL_INT("warmup", &o->warmup, "N",
               "untimed steps before a --bench (default 10; only with "
               "--bench)",
               0, 1 << 30, .given = &warmup_given),
      TOOL_FLAG("allow-nonfinite", &o->allow_nonfinite,
                "keep training after a NaN or infinite loss (default: stop "
                "with an error naming the step)"),
      TOOL_FLAG("quiet", &o->quiet,
                "no per-step progress, and no notices of --trace, "
                "--save-every or --graph-dir; the summary lines (the first "
                "line, one per "
                "epoch, --load's, --check's, the final --save's, --bench's) "
                "and errors are still printed"),
      TOOL_FLAG("tf32", &o->tf32,
                "let float32 matrix products and cuDNN's convolutions on GPU "
                "devices use TF32 tensor cores (rf_session_options."
                "allow_tf32: faster, about 3 decimal digits per input; "
                "default off, as PyTorch's matrix products; CPU devices "
                "ignore it)"),
      TOOL_INT("bucket-mb", &o->bucket_mb, "N",
               "fuse independent gradient all-reduces into buckets of up to "
               "N MiB on every device kind (0: one all-reduce per gradient; "
               "default: 1 on CPU devices, 4 on CPU devices of several "
               "processes (mpirun), 25 on GPU devices; only --sync "
               "allreduce has all-reduces to fuse: N > 0 with another --sync "
               "is a usage error)",
               0, 1 << 20),
      TOOL_CHOICE("comm-dtype", &o->comm_dtype, "T",
                  "the dtype gradients travel in with --sync allreduce: fp32 "
                  "(default), or bf16 or fp16, cast back to fp32 after the "
                  "all-reduce",
                  comm_choices),
      TOOL_CHOICE("gpu-graphs", &o->gpu_graphs, "S",
                  "GPU devices: replay each training step as one CUDA graph "
                  "(on), or run its kernels one by one (off); default: the "
                  "session's default (rf_session_options.gpu_graphs: on, "
                  "or RF_GPU_GRAPHS from the environment)",
                  graph_choices),
      TOOL_CHOICE("group-updates", &o->group_updates, "S",
                  "run the optimizer updates of a device as one multi-tensor "
                  "update (on) or one update per parameter (off); default: "
                  "the session's default (on: "
                  "rf_session_options.group_optimizer_updates)",
                  graph_choices),
      TOOL_CHOICE("matmul-epilogues", &o->epilogues, "S",
                  "run each MatMul's bias, ReLU and bias gradient inside the "
                  "product as one fused node: float32 products on GPU "
                  "devices (auto, the default), no device (off), every "
                  "dtype's on GPU devices (gpu: one cuBLASLt product each) "
                  "or every device (all; on CPU the unfused kernels one "
                  "after the other) (rf_session_options.matmul_epilogues)",
                  epilogue_choices),
      TOOL_CHOICE(
          "conv-epilogues", &o->conv_epilogues, "S",
          "--model cnn: run each Conv2D's bias and ReLU inside the "
          "convolution, "
          "and each MaxPoolGrad with the ReLU's gradient, as one "
          "fused node on no device (off), GPU devices (gpu, the "
          "default: one cuDNN call each in float32, one pool "
          "gradient kernel) or every device (all; on CPU the unfused kernels "
          "one after the other) (rf_session_options.conv_epilogues)",
          conv_choices, .given = &conv_given),
      TOOL_CHOICE("filter-format", &o->filter_format, "F",
                  "the CNN's convolution filters, parameters W0 and W1: "
                  "ohwi (default), (out, kh, kw, in), the layout cuDNN "
                  "reads without a transpose; or hwio, (kh, kw, in, out), "
                  "TensorFlow's (Conv2D's filter_format; a --load "
                  "checkpoint must have the same layout: those saved "
                  "before this option existed are hwio)",
                  filter_choices, .given = &filter_given),
  };
  const tool_cmd cmd = {
      "train",
      "usage: ringflow train [options]\n"
      "  trains an MLP (784-512-256-10) or a CNN (--model cnn) data-parallel\n"
      "  on Fashion-MNIST, one replica on each of --devices; after each\n"
      "  epoch it prints the test accuracy and whether the replicas'\n"
      "  parameters are bit-identical.\n"
      "  Under mpirun every process trains its --devices' replicas of one\n"
      "  job-wide graph; task 0 prints.\n"
      "options:\n",
      "RF_LOG=debug|info|warn|error prints ringflow's log messages\n"
      "(placement, lowering, collectives, timeouts) to stderr;\n"
      "RF_DUMP_GRAPH_DIR=DIR writes each compile's graph before and after\n"
      "every phase.\n",
      opts, (int)(sizeof opts / sizeof *opts)};
  char *pos[1];
  int npos, rc = tool_parse(&cmd, argc, argv, pos, 0, &npos);
  if (rc) return rc;
  o->sync = (sync_mode)sync;
  o->model = (model_kind)model;
  o->feed = (feed_mode)feed;
  o->constant_lr = schedule == 1;
  if (o->bench && (o->check || o->trace || o->save))
    return tool_usage_error(
        &cmd, "--bench times training alone: no --check, --trace or --save");
  if (o->bench && (epochs_given || schedule_given))
    return tool_usage_error(&cmd,
                            "--bench times --steps steps at a constant --lr: "
                            "no --epochs or --schedule");
  if (o->bench && !steps_given) o->max_steps = 100;
  if (wd_given && o->optimizer != OPT_ADAMW)
    return tool_usage_error(&cmd, "--weight-decay needs --optimizer adamw");
  if (momentum_given && o->optimizer != OPT_MOMENTUM)
    return tool_usage_error(&cmd, "--momentum needs --optimizer momentum");
  if (!lr_given && o->optimizer == OPT_MOMENTUM) o->lr = 0.1;
  if (dropout_given && o->model != MODEL_CNN)
    return tool_usage_error(&cmd, "--dropout needs --model cnn");
  if (filter_given && o->model != MODEL_CNN)
    return tool_usage_error(&cmd, "--filter-format needs --model cnn");
  if (dropout_given && o->check && o->dropout > 0)
    return tool_usage_error(&cmd,
                            "--check trains without dropout (its one device "
                            "cannot draw the replicas' masks): no --dropout "
                            "above 0");
  if (o->check) o->dropout = 0;
  if (warmup_given && !o->bench)
    return tool_usage_error(&cmd, "--warmup needs --bench");
  if (conv_given && o->model != MODEL_CNN)
    return tool_usage_error(&cmd, "--conv-epilogues needs --model cnn");
  if (o->save_every && !o->save)
    return tool_usage_error(&cmd, "--save-every needs --save FILE");
  /* Only --sync allreduce all-reduces gradients; elsewhere a narrowing
   * wire dtype would be silently ignored. */
  if (o->comm_dtype > 0 && o->sync != SYNC_ALLREDUCE)
    return tool_usage_error(&cmd, "--comm-dtype %s needs --sync allreduce",
                            comm_choices[o->comm_dtype]);
  /* Only all-reduces fuse into buckets: elsewhere a size would be ignored. */
  if (o->bucket_mb > 0 && o->sync != SYNC_ALLREDUCE)
    return tool_usage_error(&cmd, "--bucket-mb %d needs --sync allreduce",
                            o->bucket_mb);
  return 0;
}

/* --trace FILE can be written: its directory exists and takes files,
 * checked before training rather than at step 10. */
static rf_status *check_trace_path(const char *path) {
  if (strlen(path) >= PATH_MAX)
    return rf_status_new(RF_INVALID_ARGUMENT,
                         "--trace: cannot write the trace to %s: %s", path,
                         strerror(ENAMETOOLONG));
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  struct stat sb;
  bool found = stat(dir, &sb) == 0;
  if (!found && errno == ENAMETOOLONG) /* a part past NAME_MAX */
    return rf_status_new(RF_INVALID_ARGUMENT,
                         "--trace: cannot write the trace to %s: %s", path,
                         strerror(ENAMETOOLONG));
  if (!found || !S_ISDIR(sb.st_mode))
    return rf_status_new(RF_NOT_FOUND,
                         "--trace: cannot write the trace to %s: no "
                         "directory %s",
                         path, dir);
  if (access(dir, W_OK | X_OK) != 0)
    return rf_status_new(RF_PERMISSION_DENIED,
                         "--trace: cannot write the trace to %s: %s: %s", path,
                         dir, strerror(errno));
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    return rf_status_new(RF_INVALID_ARGUMENT, "--trace: %s is a directory",
                         path);
  return NULL;
}

/* Cosine decay from --lr to 0 over the run (--schedule constant keeps it):
 * the last epochs settle instead of bouncing around the optimum. */
static double scheduled_lr(const options *o, int64_t step, int64_t total) {
  if (o->constant_lr || total <= 1) return o->lr;
  return o->lr * 0.5 * (1.0 + cos(M_PI * (double)step / (double)total));
}

/* A NaN or infinite loss: the parameters are garbage from here on, so stop
 * (every process of a job sees the same all-reduced loss and stops at the
 * same step), unless --allow-nonfinite. */
static rf_status *check_loss(const options *o, const trainer *t, double loss) {
  if (isfinite(loss) || o->allow_nonfinite) return NULL;
  return rf_status_new(RF_OUT_OF_RANGE,
                       "non-finite loss: the loss is %s at step %lld; "
                       "stopped, nothing saved (--allow-nonfinite trains on)",
                       isnan(loss) ? "nan"
                       : loss > 0  ? "inf"
                                   : "-inf",
                       (long long)t->step);
}

#define LCG_A 6364136223846793005ULL
#define LCG_C 1442695040888963407ULL

/* The shuffling LCG's state `steps` steps after `state` (steps mod 2^64, its
 * period), in O(log steps): the map x -> a x + c squared bit by bit. */
static uint64_t lcg_skip(uint64_t state, uint64_t steps) {
  uint64_t a = LCG_A, c = LCG_C, ta = 1, tc = 0; /* taken: x -> ta x + tc */
  for (; steps; steps >>= 1) {
    if (steps & 1) {
      ta *= a;
      tc = tc * a + c;
    }
    c *= a + 1;
    a *= a;
  }
  return ta * state + tc;
}

/* idx[0..n): the training rows in epoch `epoch`'s order (0 first), a
 * function of the seed and the epoch alone: 0..n-1 shuffled (Fisher-Yates)
 * by the seed's LCG stream from its draw epoch x (n - 1). So a run that goes
 * on from a checkpoint's step has the batches the run that wrote it would
 * have had next. */
static void epoch_order(int *idx, int n, uint64_t seed, int64_t epoch) {
  uint64_t state = lcg_skip(seed * 2654435761u + 1,
                            (uint64_t)epoch * (uint64_t)(n > 0 ? n - 1 : 0));
  for (int i = 0; i < n; i++) idx[i] = i;
  for (int i = n - 1; i > 0; i--) {
    state = state * LCG_A + LCG_C;
    int j = (int)((state >> 33) % (uint64_t)(i + 1));
    int tmp = idx[i];
    idx[i] = idx[j];
    idx[j] = tmp;
  }
}

/* --bench: o->warmup untimed steps, then o->max_steps timed ones over the
 * same shuffled batches as training, at a constant learning rate and without
 * evaluation; prints one machine-readable line (bench/train_vs_pytorch.py). */
/* --bench; *stopped: the signal that stopped it between steps (nothing
 * printed then but the stop line), else 0. */
static rf_status *bench(trainer *t, const dataset *d, const options *o,
                        int *idx, int *stopped) {
  int per_epoch = d->n / o->batch;
  double start = now_seconds(), loss = 0;
  for (int i = 0; i < o->warmup + o->max_steps; i++) {
    if ((*stopped = stop_signal_requested())) {
      tool_flush();
      fprintf(
          stderr,
          "ringflow: train: stopped by %s after %d of %d steps "
          "(--bench: %s)\n",
          *stopped == SIGINT ? "SIGINT" : "SIGTERM", i,
          o->warmup + o->max_steps,
          i <= o->warmup ? "in the warm-up, nothing timed" : "nothing printed");
      return NULL;
    }
    /* from a --load checkpoint's step on, as training goes on */
    int s = (int)(t->step % per_epoch);
    if (i == 0 || s == 0) epoch_order(idx, d->n, o->seed, t->step / per_epoch);
    if (i == o->warmup) start = now_seconds();
    bool next = s + 1 < per_epoch && i + 1 < o->warmup + o->max_steps;
    RF_TOOL_CHECK(train_step(t, d, idx + (size_t)s * o->batch,
                             next ? idx + (size_t)(s + 1) * o->batch : NULL,
                             o->lr, &loss));
    RF_TOOL_CHECK(check_loss(o, t, loss));
  }
  double secs = now_seconds() - start;
  if (tool_task <= 0)
    printf(
        "samples_per_sec=%.1f batch=%d devices=%d steps=%d seconds=%.3f "
        "loss=%.4f feed=%s\n",
        (double)o->max_steps * o->batch / secs, o->batch, t->cfg.num_devices,
        o->max_steps, secs, loss, t->cfg.data_rows ? "indices" : "batches");
  return NULL;
}

static const char *const sync_names[] = {
    [SYNC_ALLREDUCE] = "all-reduce",
    [SYNC_REDUCE_BROADCAST] = "reduce+broadcast",
    [SYNC_SHARDED] = "reduce-scatter + sharded update + all-gather"};

/* End of an epoch: test accuracy and whether the replicas agree (across
 * processes, through collectives). */
static rf_status *end_epoch(trainer *t, const dataset *test, double *acc,
                            double *spread) {
  int64_t right = 0;
  rf_tensor *params[2 * MLP_MAX_LAYERS];
  RF_TOOL_CHECK(evaluate(t, test, &right));
  RF_TOOL_CHECK(replica_spread(t, spread, params));
  rf_status *st = t->job ? train_job_epoch(t, params, &right, spread) : NULL;
  for (int p = 0; p < t->m.num_params; p++) rf_tensor_release(params[p]);
  *acc = (double)right / (double)test->n;
  return st;
}

/* In cmd_train once it holds anything: keep the error, go to its cleanup. */
#define TRAIN_TRY(expr)          \
  do {                           \
    if ((st = (expr))) goto out; \
  } while (0)

int cmd_train(int argc, char **argv) {
  options o;
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc == TOOL_HELP_SHOWN ? 0 : rc;
  mlp_config cfg = {.model = o.model,
                    .num_layers = 3,
                    .sizes = {784, 512, 256, 10},
                    .lr = o.lr,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .epsilon = 1e-7,
                    .optimizer = (optimizer_kind)o.optimizer,
                    .weight_decay = o.weight_decay,
                    .momentum = o.momentum,
                    .dropout = o.dropout,
                    .ohwi = o.filter_format == 1,
                    .sync = o.sync};
  rf_session_options sopts, one_opts;
  rf_session_options_init(&sopts);
  rf_session_options_init(&one_opts);
  tool_devices_session(&o.devices, &sopts);
  if (o.bucket_mb >= 0)
    sopts.collective_bucket_bytes = (int64_t)o.bucket_mb << 20;
  sopts.collective_comm_dtype = comm_dtypes[o.comm_dtype];
  if (o.gpu_graphs) sopts.gpu_graphs = o.gpu_graphs == 2;
  if (o.group_updates) sopts.group_optimizer_updates = o.group_updates == 2;
  sopts.matmul_epilogues = o.epilogues;
  sopts.conv_epilogues = o.conv_epilogues;
  sopts.collective_timeout_ms = llround(o.collective_timeout * 1000);
  if (sopts.collective_timeout_ms < 1) sopts.collective_timeout_ms = 1;
  one_opts.collective_timeout_ms = sopts.collective_timeout_ms;
  one_opts.collective_bucket_bytes = 0; /* --check's reference: unfused */
  sopts.allow_tf32 = one_opts.allow_tf32 = o.tf32;
  train_job job;
  if ((rc = train_job_init(&job, &o.devices, &cfg))) return rc;
  bool lead = job.task == 0; /* prints, writes, checks */
  if (o.batch % cfg.num_devices)
    return tool_fail("train: --batch %d is not divisible by %d devices",
                     o.batch, cfg.num_devices);
  cfg.device_batch = o.batch / cfg.num_devices;
  /* From here on everything made is released on every path: a failed step
   * may leave a batch in flight on the prefetch thread, which reads t and
   * train (trainer_free stops it before they go). */
  dataset train = {0}, test = {0};
  idx_array im[2] = {{0}}, lb[2] = {{0}}; /* the training and test files */
  trainer t = {0}, ref = {0};
  int *idx = NULL;
  rf_status *st = NULL;
  int64_t saved_at = -1; /* the step of the last --save */
  /* a run must not end by failing to save: check the path first; likewise
   * the trace's file, written at step 10, and --graph-dir, written once the
   * data is loaded. Task 0 checks (it writes them) and tells the others
   * whether it refused: else they would wait for it in their first session
   * until the collective timeout. */
  if (o.save || o.trace || o.graph_dir) {
    rf_status *checked = NULL;
    if (o.save && lead) checked = rf_checkpoint_check_path(o.save);
    if (!checked && o.trace && lead) checked = check_trace_path(o.trace);
    if (!checked && o.graph_dir && lead) checked = tool_make_dir(o.graph_dir);
    TRAIN_TRY(train_job_start(&job, sopts.collective_timeout_ms, checked));
  }
  TRAIN_TRY(load_split(o.data_dir, "train", cfg.sizes[0], &im[0], &lb[0]));
  if (o.batch > im[0].dims[0]) { /* not one step per epoch */
    rc = tool_fail(
        "train: --batch %d is more than the %lld training rows in "
        "%s",
        o.batch, (long long)im[0].dims[0], o.data_dir);
    goto out;
  }
  TRAIN_TRY(load_split(o.data_dir, "t10k", cfg.sizes[0], &im[1], &lb[1]));
  TRAIN_TRY(make_datasets(im, lb, cfg.sizes[0], &train, &test));
  for (int k = 0; k < 2; k++) {
    idx_free(&im[k]);
    idx_free(&lb[k]);
  }
  TRAIN_TRY(trainer_start(&t, &cfg, &o, &sopts, &job, &train, lead));
  char where[320], list[256];
  tool_devices_format(&o.devices, list, sizeof list);
  if (job.ntasks > 1)
    snprintf(where, sizeof where, "%d processes x %s", job.ntasks, list);
  else
    snprintf(where, sizeof where, "%s", list);
  /* The run's steps: --epochs' passes (of whole batches: an epoch's last
   * rows that fill no batch wait for a later epoch's order), or --steps. */
  int steps_per_epoch = train.n / o.batch;
  int64_t total = (int64_t)steps_per_epoch * o.epochs, done = 0;
  bool cut = o.max_steps && o.max_steps < total;
  if (cut) total = o.max_steps;
  if (lead && !o.bench) { /* first: before --graph-dir's and --load's lines */
    printf("ringflow train: %s on %d device%s (%s), %s, global batch %d, ",
           o.model == MODEL_CNN ? "CNN 28x28x1-c32-p-c64-p-1024-10"
                                : "MLP 784-512-256-10",
           cfg.num_devices, cfg.num_devices > 1 ? "s" : "", where,
           sync_names[o.sync], o.batch);
    if (cut)
      printf("%lld step%s (--steps; %d epoch%s %s %lld)\n", (long long)total,
             total > 1 ? "s" : "", o.epochs, o.epochs > 1 ? "s" : "",
             o.epochs > 1 ? "are" : "is",
             (long long)steps_per_epoch * o.epochs);
    else
      printf("%d epoch%s (%lld steps)\n", o.epochs, o.epochs > 1 ? "s" : "",
             (long long)total);
  }
  if (o.graph_dir)
    TRAIN_TRY(write_graphs(&t, &sopts, o.graph_dir, lead, !o.quiet));
  if (o.load) {
    TRAIN_TRY(trainer_load(&t, o.load));
    if (lead) printf("loaded %s (step %lld)\n", o.load, (long long)t.step);
  }
  mlp_config one = cfg;
  bool check = o.check && lead;
  if (check) {
    one.num_devices = 1;
    one.device_batch = o.batch;
    /* the same kind of device as the first of the run, alone */
    snprintf(one.devices[0], sizeof one.devices[0], "%s", o.devices.name[0]);
    one_opts.num_cpu_devices = sopts.num_cpu_devices;
    one_opts.num_gpu_devices = sopts.num_gpu_devices;
    TRAIN_TRY(trainer_start(&ref, &one, &o, &one_opts, NULL, &train, lead));
    if (o.load) TRAIN_TRY(trainer_load(&ref, o.load));
  }
  idx = malloc(sizeof(int) * (size_t)train.n);
  if (!idx) TRAIN_TRY(rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory"));
  for (int i = 0; i < train.n; i++) idx[i] = i;
  /* One process: SIGINT and SIGTERM stop the run between steps (not under
   * mpirun, where the others would wait for this one in a collective) */
  if (job.ntasks <= 1) stop_signal_install();
  int stopped = 0;
  if (o.bench) {
    st = bench(&t, &train, &o, idx, &stopped);
    goto out;
  }
  /* Refused before training, not at the first save after it. */
  if (o.save && t.step > RF_CHECKPOINT_STEP_MAX - total)
    TRAIN_TRY(rf_status_new(
        RF_OUT_OF_RANGE,
        "--save: step %lld plus %lld steps passes the largest step a "
        "checkpoint holds (2^53 = %lld)",
        (long long)t.step, (long long)total,
        (long long)RF_CHECKPOINT_STEP_MAX));
  progress p;
  progress_init(&p, total, o.quiet || !lead);
  const char *nl = p.tty ? "\n" : ""; /* ends a progress bar's line */
  double worst_loss_diff = 0;
  /* Step t.step of the data order (0, or a --load checkpoint's: the run goes
   * on with the batches its writer would have taken next), in epoch e. */
  for (int64_t e = -1; done < total; done++) {
    if ((stopped = stop_signal_requested())) break;
    int s = (int)(t.step % steps_per_epoch);
    if (e != t.step / steps_per_epoch) {
      e = t.step / steps_per_epoch;
      epoch_order(idx, train.n, o.seed, e);
    }
    double loss, ref_loss;
    /* trace a warm step: the 10th, or the last of a shorter run */
    bool traced = o.trace && lead && done == (total > 10 ? 9 : total - 1);
    if (traced) TRAIN_TRY(rf_session_trace_next_run(t.s, o.trace));
    double lr = scheduled_lr(&o, done, total);
    const int *next = s + 1 < steps_per_epoch && done + 1 < total
                          ? idx + (size_t)(s + 1) * o.batch
                          : NULL;
    TRAIN_TRY(
        train_step(&t, &train, idx + (size_t)s * o.batch, next, lr, &loss));
    TRAIN_TRY(check_loss(&o, &t, loss));
    if (traced && !o.quiet)
      printf("%swrote a trace of step %lld to %s\n", nl, (long long)done + 1,
             o.trace);
    if (check) {
      TRAIN_TRY(train_step(&ref, &train, idx + (size_t)s * o.batch, NULL, lr,
                           &ref_loss));
      if (fabs(loss - ref_loss) > worst_loss_diff)
        worst_loss_diff = fabs(loss - ref_loss);
    }
    progress_step(&p, e + 1, done + 1, loss, o.batch);
    if (o.save_every && (done + 1) % o.save_every == 0) {
      TRAIN_TRY(trainer_save(&t, o.save, lead));
      saved_at = t.step;
      if (lead && !o.quiet)
        printf("%ssaved %s (step %lld)\n", nl, o.save, (long long)t.step);
    }
    /* the end of an epoch, or of the run: the test accuracy */
    if (s + 1 == steps_per_epoch || done + 1 == total) {
      double acc = 0, spread = 0;
      TRAIN_TRY(end_epoch(&t, &test, &acc, &spread));
      if (lead) progress_epoch(&p, e + 1, acc, spread);
    }
  }
  if (stopped) {
    tool_flush();
    fprintf(stderr,
            "%sringflow: train: stopped by %s after %lld of %lld steps (step "
            "%lld)",
            nl, stopped == SIGINT ? "SIGINT" : "SIGTERM", (long long)done,
            (long long)total, (long long)t.step);
    if (saved_at >= 0)
      fprintf(stderr, "; %s holds step %lld\n", o.save, (long long)saved_at);
    else
      fprintf(stderr, "; nothing saved\n");
    goto out;
  }
  if (o.save && saved_at != t.step) { /* else --save-every's save said it */
    TRAIN_TRY(trainer_save(&t, o.save, lead));
    if (lead) printf("saved %s (step %lld)\n", o.save, (long long)t.step);
  }
  if (check) {
    double diff;
    TRAIN_TRY(max_param_diff(&t, &ref, &diff));
    printf(
        "check against 1 device: largest loss difference %.3g, largest "
        "parameter difference %.3g\n",
        worst_loss_diff, diff);
  }
out:
  /* The error first: after a process of the job died, freeing the session
   * may take a moment (or, for a program's own MPI_Finalize, forever). */
  tool_flush();
  if (st) rc = tool_report(st);
  trainer_free(&ref);
  trainer_free(&t);
  free(idx);
  dataset_free(&train);
  dataset_free(&test);
  for (int k = 0; k < 2; k++) {
    idx_free(&im[k]);
    idx_free(&lb[k]);
  }
  return rc;
}
