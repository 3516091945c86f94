// matmul(): quantize the activations once into scratch, then split output rows over the pool.
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
            const float* x, int64_t n_rows, float* y, int64_t y_stride) {
  quant::matmul_with(quant::active_kernels(), &pool, scratch, wt, w, n_in, n_out, x, n_rows, y, y_stride);
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
};
}  // namespace

void matmul_with(const KernelTable& k, ThreadPool* pool, MatmulScratch& scratch, GgmlType wt, const void* w,
                 int64_t n_in, int64_t n_out, const float* x, int64_t n_rows, float* y, int64_t y_stride) {
  const GgmlTypeInfo& info = ggml_type_info(wt);
  RowsFn rows = ggml_type_supported(wt) ? k.rows[slot(wt)] : nullptr;
  if (!rows || n_in <= 0 || n_in % info.block_elems != 0)
    throw std::invalid_argument(std::string("matmul: unsupported weight type or n_in for ") + info.name);
  if (n_out <= 0 || n_rows <= 0) return;

  MatmulJob job{};
  job.quantize = k.quantize;
  job.wt = wt;
  job.x = x;
  job.n_in = n_in;
  job.lay = act_layout(wt, n_in);
  job.rows = rows;
  job.w = static_cast<const uint8_t*>(w);
  job.w_stride = ggml_row_bytes(wt, n_in);
  job.y = y;
  job.y_stride = y_stride;
  job.view.n_in = n_in;
  job.view.n_rows = n_rows;
  if (act_format(wt).kind == ActKind::F32) {
    job.view.xf = x;
  } else {
    scratch.reserve(job.lay.row_bytes * size_t(n_rows));
    job.act = scratch.data;
    job.view.base = scratch.data;
    job.view.row_bytes = job.lay.row_bytes;
    job.view.sc_off = job.lay.sc_off;
    job.view.bias_off = job.lay.bias_off;
    if (pool && n_rows > 1) {
      pool->parallel_for(n_rows, 1, [&job](int64_t r0, int64_t r1) {
        job.quantize(job.wt, job.x, job.n_in, r0, r1, job.act, job.lay);
      });
    } else {
      k.quantize(wt, x, n_in, 0, n_rows, job.act, job.lay);
    }
  }
  if (pool) {
    pool->parallel_for(n_out, 8, [&job](int64_t o0, int64_t o1) {
      job.rows(job.w, job.w_stride, o0, o1, job.view, job.y, job.y_stride);
    });
  } else {
    rows(job.w, job.w_stride, 0, n_out, job.view, y, y_stride);
  }
}

}  // namespace quant
}  // namespace ls
