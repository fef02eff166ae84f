// tools/bench_gloo.cc - the Gloo baseline of `mpirun -np N ringflow bench`
// (tools/bench_job.c): Gloo's all-reduce (ring, float sum) between the same
// processes over TCP on 127.0.0.1, its rendezvous through a file store in a
// directory every process sees. Built only when CMake finds Gloo (Debian:
// libgloo-dev); C++ because Gloo is, with a C interface (bench.h) that
// never throws.
#include <cstdio>
#include <memory>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "bench.h"
}

struct bench_gloo {
  std::shared_ptr<gloo::rendezvous::Context> context;
};

extern "C" bool bench_gloo_new(int rank, int size, const char *dir,
                               bench_gloo **out, char *why, size_t why_len) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->connectFullMesh(store, device);
    *out = new bench_gloo{context};
    return true;
  } catch (const std::exception &e) {
    std::snprintf(why, why_len, "Gloo could not connect: %s", e.what());
    return false;
  }
}

extern "C" bool bench_gloo_allreduce(bench_gloo *g, const float *in,
                                     float *out, int64_t count) {
  try {
    gloo::AllreduceOptions opts(g->context);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setInput(const_cast<float *>(in), static_cast<size_t>(count));
    opts.setOutput(out, static_cast<size_t>(count));
    void (*fn)(void *, const void *, const void *, size_t) = &gloo::sum<float>;
    opts.setReduceFunction(fn);
    gloo::allreduce(opts);
    return true;
  } catch (const std::exception &) {
    return false;
  }
}

extern "C" void bench_gloo_free(bench_gloo *g) { delete g; }
