// matmul(): quantize the activations once into scratch, then split output rows over the pool.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "quant/quant_internal.h"

namespace ls {

void MatmulScratch::reserve(size_t bytes) {
  if (bytes <= capacity_bytes) return;
  std::free(data);
  const size_t cap = (bytes + 4095) & ~size_t(4095);
  data = static_cast<uint8_t*>(std::aligned_alloc(64, cap));
  if (!data) {
    capacity_bytes = 0;
    throw std::bad_alloc();
  }
  capacity_bytes = cap;
}

MatmulScratch::~MatmulScratch() { std::free(data); }

size_t matmul_scratch_bytes(GgmlType wt, int64_t n_in, int64_t n_rows) {
  return quant::act_layout(wt, n_in).row_bytes * size_t(n_rows < 0 ? 0 : n_rows);
}

void matmul(ThreadPool& pool, MatmulScratch& scratch, GgmlType wt, const void* w, int64_t n_in, int64_t n_out,
            const float* x, int64_t n_rows, float* y, int64_t y_stride, WeightLayout layout, const SideTasks* side) {
  quant::matmul_with(quant::active_kernels(), &pool, scratch, wt, w, n_in, n_out, x, n_rows, y, y_stride, layout,
                     side);
}

namespace quant {

namespace {
// Everything a parallel task needs, captured by one reference so the std::function built by
// parallel_for stores the lambda inline (no allocation per call).
struct MatmulJob {
  QuantFn quantize;
  GgmlType wt;
  const float* x;
  int64_t n_in;
  uint8_t* act;
  ActLayout lay;
  RowsFn rows;
  const uint8_t* w;
  size_t w_stride;
  ActView view;
  float* y;
  int64_t y_stride;
  int64_t grain;  // output rows per parallel grain (a whole interleaved group)
};
}  // namespace

namespace {
// Quantizes x once into scratch (for integer-dot weight types) and fills the job fields every
// output shares. Returns false when there is nothing to do.
bool prepare_job(const KernelTable& k, ThreadPool* pool, MatmulScratch& scratch, GgmlType wt, int64_t n_in,
                 const float* x, int64_t n_rows, WeightLayout layout, MatmulJob& job) {
  const GgmlTypeInfo& info = ggml_type_info(wt);
  const bool il = layout == WeightLayout::Interleaved16;
  RowsFn rows = ggml_type_supported(wt) ? (il ? k.il_rows[slot(wt)] : k.rows[slot(wt)]) : nullptr;
  if (!rows || n_in <= 0 || n_in % info.block_elems != 0)
    throw std::invalid_argument(std::string("matmul: unsupported weight type, layout or n_in for ") + info.name);
  job.grain = il ? kInterleaveRows : 8;
  if (n_rows <= 0) return false;
  job.wt = wt;
  job.x = x;
  job.n_in = n_in;
  job.lay = act_layout(wt, n_in);
  job.rows = rows;
  job.w_stride = ggml_row_bytes(wt, n_in);
  job.view.n_in = n_in;
  job.view.n_rows = n_rows;
  if (act_format(wt).kind == ActKind::F32) {
    job.view.xf = x;
    return true;
  }
  scratch.reserve(job.lay.row_bytes * size_t(n_rows));
  job.act = scratch.data;
  job.view.base = scratch.data;
  job.view.row_bytes = job.lay.row_bytes;
  job.view.sc_off = job.lay.sc_off;
  job.view.bias_off = job.lay.bias_off;
  job.quantize = k.quantize;  // SIMD quantizers are bit-identical to the scalar one
  if (pool && n_rows > 1) {
    pool->parallel_for(n_rows, 1, [&job](int64_t r0, int64_t r1) {
      job.quantize(job.wt, job.x, job.n_in, r0, r1, job.act, job.lay);
    });
  } else {
    job.quantize(wt, x, n_in, 0, n_rows, job.act, job.lay);
  }
  return true;
}

// Several outputs over one quantized activation: output rows are numbered consecutively across
// the outputs and split over the pool in one dispatch.
struct MultiJob {
  const MatmulJob* job;
  const MatmulOut* outs;
  int n_outs;
};

// One dispatch over n_rows output rows (grain by grain) and the side tasks. While both last, unit k is
// "side task k, then base grain k" on one thread, so every thread alternates its own memory-bound side work
// with compute-bound base rows and the lighter base-only units are left for the end of the dispatch.
// (Measured against alternating separate side and base grains: SmolLM2, 4 adapters at c8, 0.795x -> 0.80-0.81x
// of the base model's tok/s.) rows(o0, o1) runs a range of rows.
template <class Rows>
void dispatch_rows(ThreadPool* pool, int64_t n_rows, int64_t grain, const SideTasks* side, const Rows& rows) {
  const int64_t n_side = side ? side->n : 0;
  if (!pool) {
    if (n_rows > 0) rows(int64_t(0), n_rows);
    for (int64_t k = 0; k < n_side; ++k) side->run(side->ctx, k);
    return;
  }
  if (n_side == 0) {
    pool->parallel_for(n_rows, grain, [&rows](int64_t o0, int64_t o1) { rows(o0, o1); });
    return;
  }
  const int64_t n_base = (n_rows + grain - 1) / grain;
  auto units = [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      if (u < n_side) side->run(side->ctx, u);
      if (u < n_base) rows(u * grain, std::min(n_rows, (u + 1) * grain));
    }
  };
  // One captured reference: the std::function parallel_for builds stays allocation-free.
  pool->parallel_for(std::max(n_side, n_base), 1, [&units](int64_t u0, int64_t u1) { units(u0, u1); });
}

void run_multi_rows(const MultiJob& m, int64_t o0, int64_t o1) {
  int64_t base = 0;
  for (int k = 0; k < m.n_outs && base < o1; ++k) {
    const MatmulOut& out = m.outs[k];
    const int64_t b = std::max(o0, base), e = std::min(o1, base + out.n_out);
    if (b < e && out.n_rows != 0) {
      ActView view = m.job->view;
      if (out.n_rows > 0) {  // rows [row0, row0 + n_rows) of the activation
        view.n_rows = out.n_rows;
        if (view.base) view.base += size_t(out.row0) * view.row_bytes;
        else view.xf += out.row0 * view.n_in;
      }
      m.job->rows(static_cast<const uint8_t*>(out.w), m.job->w_stride, b - base, e - base, view, out.y,
                  out.y_stride);
    }
    base += out.n_out;
  }
}
}  // namespace

void matmul_with(const KernelTable& k, ThreadPool* pool, MatmulScratch& scratch, GgmlType wt, const void* w,
                 int64_t n_in, int64_t n_out, const float* x, int64_t n_rows, float* y, int64_t y_stride,
                 WeightLayout layout, const SideTasks* side) {
  MatmulJob job{};
  if (layout == WeightLayout::Interleaved16 && !interleave_supported(wt, n_in, n_out))
    throw std::invalid_argument("matmul: interleaved weights need n_out a multiple of 16");
  if (!prepare_job(k, pool, scratch, wt, n_in, x, n_rows, layout, job) || n_out <= 0) {
    dispatch_rows(pool, 0, job.grain, side, [](int64_t, int64_t) {});
    return;
  }
  job.w = static_cast<const uint8_t*>(w);
  job.y = y;
  job.y_stride = y_stride;
  dispatch_rows(pool, n_out, job.grain, side,
                [&job](int64_t o0, int64_t o1) { job.rows(job.w, job.w_stride, o0, o1, job.view, job.y, job.y_stride); });
}

}  // namespace quant

void matmul_multi(ThreadPool& pool, MatmulScratch& scratch, GgmlType wt, int64_t n_in, const float* x,
                  int64_t n_rows, const MatmulOut* outs, int n_outs, WeightLayout layout, const SideTasks* side) {
  quant::MatmulJob job{};
  for (int k = 0; k < n_outs && layout == WeightLayout::Interleaved16; ++k)
    if (!interleave_supported(wt, n_in, outs[k].n_out))
      throw std::invalid_argument("matmul_multi: interleaved weights need n_out a multiple of 16");
  if (!quant::prepare_job(quant::active_kernels(), &pool, scratch, wt, n_in, x, n_rows, layout, job)) {
    quant::dispatch_rows(&pool, 0, job.grain, side, [](int64_t, int64_t) {});
    return;
  }
  int64_t total = 0;
  for (int k = 0; k < n_outs; ++k) total += outs[k].n_out;
  const quant::MultiJob multi{&job, outs, n_outs};
  // Every out is a whole number of grains, so grain-aligned chunks never split a group.
  quant::dispatch_rows(&pool, total, job.grain, side,
                       [&multi](int64_t o0, int64_t o1) { quant::run_multi_rows(multi, o0, o1); });
}

}  // namespace ls
