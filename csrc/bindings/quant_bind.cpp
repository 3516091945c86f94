// lanes._runtime.quant: dequantization, matmul and ISA selection for tests and benchmarks.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <time.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "quant/gemm_float.h"
#include "quant/quant.h"

namespace py = pybind11;

namespace ls {
namespace {

// One persistent pool (and its scratch) per thread count, created on first use and kept for
// the process lifetime (never destroyed: no joins during interpreter shutdown). The mutex
// serialises callers because ThreadPool::run is not re-entrant.
struct PoolEntry {
  std::mutex mu;
  std::unique_ptr<ThreadPool> pool;
  MatmulScratch scratch;
};

PoolEntry& pool_for(int threads) {
  static std::mutex mu;
  static auto* pools = new std::map<int, PoolEntry*>();
  if (threads < 1) throw std::invalid_argument("threads must be >= 1");
  std::lock_guard<std::mutex> lock(mu);
  PoolEntry*& e = (*pools)[threads];
  if (!e) {
    e = new PoolEntry();
    e->pool = std::make_unique<ThreadPool>(threads);
  }
  return *e;
}

GgmlType checked_type(int type_id) {
  const GgmlType t = GgmlType(uint32_t(type_id));
  if (type_id < 0 || !ggml_type_supported(t)) throw std::invalid_argument("unsupported ggml type id " + std::to_string(type_id));
  return t;
}

const Isa kAll[] = {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni};

void check_shape(GgmlType t, int64_t n_in, int64_t n_out, size_t have) {
  const int be = ggml_type_info(t).block_elems;
  if (n_in <= 0 || n_out <= 0 || n_in % be != 0) throw std::invalid_argument("n_in must be a positive multiple of the block size");
  if (have < ggml_row_bytes(t, n_in) * size_t(n_out)) throw std::invalid_argument("weight buffer too small");
}

using FloatRows = py::array_t<float, py::array::c_style | py::array::forcecast>;

// y (rows, n_out) = x (rows, n_in) @ W.T by `run(pool entry, x, rows, y)`, called without the GIL
// and holding the entry's lock; W's row-layout size and x's shape are checked first.
template <class Run>
py::array_t<float> product(GgmlType t, const py::buffer_info& wi, int64_t n_in, int64_t n_out, const FloatRows& x,
                           int threads, Run run) {
  check_shape(t, n_in, n_out, size_t(wi.size * wi.itemsize));
  if (x.ndim() != 2 || x.shape(1) != n_in) throw std::invalid_argument("x must have shape (rows, n_in)");
  const int64_t rows = x.shape(0);
  py::array_t<float> y({rows, n_out});
  float* yp = y.mutable_data();
  const float* xp = x.data();
  PoolEntry& e = pool_for(threads);
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(e.mu);
    run(e, xp, rows, yp);
  }
  return y;
}

}  // namespace

void bind_quant(py::module_& parent) {
  py::module_ m = parent.def_submodule("quant", "quantized kernels (dequantize, matmul, ISA dispatch)");

  m.def("dequantize", [](int type_id, py::buffer data, int64_t n) {
    const GgmlType t = checked_type(type_id);
    const py::buffer_info bi = data.request();
    const int be = ggml_type_info(t).block_elems;
    if (n < 0 || n % be != 0) throw std::invalid_argument("n must be a multiple of the block size");
    if (size_t(bi.size * bi.itemsize) < ggml_row_bytes(t, n)) throw std::invalid_argument("data too short");
    py::array_t<float> out(n);
    dequantize_row(t, bi.ptr, out.mutable_data(), n);
    return out;
  }, py::arg("type_id"), py::arg("data"), py::arg("n"), "Dequantize n elements of ggml type type_id.");

  m.def("interleave_supported", [](int type_id, int64_t n_in, int64_t n_out) {
    return interleave_supported(checked_type(type_id), n_in, n_out);
  }, py::arg("type_id"), py::arg("n_in"), py::arg("n_out"));
  m.def("interleave", [](int type_id, py::buffer weight, int64_t n_in, int64_t n_out) {
    const GgmlType t = checked_type(type_id);
    const py::buffer_info wi = weight.request();
    check_shape(t, n_in, n_out, size_t(wi.size * wi.itemsize));
    if (!interleave_supported(t, n_in, n_out)) throw std::invalid_argument("type or shape cannot be interleaved");
    py::array_t<uint8_t> out(py::ssize_t(interleaved_bytes(t, n_in, n_out)));
    interleave_weights(t, wi.ptr, n_in, n_out, out.mutable_data());
    return out;
  }, py::arg("type_id"), py::arg("weight"), py::arg("n_in"), py::arg("n_out"),
     "The row-interleaved (16-row group) form of a weight matrix, as the model repacks it at load.");
  m.def("dequantize_weight_row", [](int type_id, py::buffer weight, int64_t n_in, int64_t n_out, int64_t row,
                                    bool interleaved) {
    const GgmlType t = checked_type(type_id);
    const py::buffer_info wi = weight.request();
    check_shape(t, n_in, n_out, interleaved ? ~size_t(0) : size_t(wi.size * wi.itemsize));
    if (row < 0 || row >= n_out) throw std::invalid_argument("row out of range");
    if (interleaved && !interleave_supported(t, n_in, n_out)) throw std::invalid_argument("not interleavable");
    if (interleaved && size_t(wi.size * wi.itemsize) < interleaved_bytes(t, n_in, n_out))
      throw std::invalid_argument("weight buffer too small");
    py::array_t<float> out(n_in);
    dequantize_weight_row(t, interleaved ? WeightLayout::Interleaved16 : WeightLayout::Rows, wi.ptr, n_in, row,
                          out.mutable_data());
    return out;
  }, py::arg("type_id"), py::arg("weight"), py::arg("n_in"), py::arg("n_out"), py::arg("row"),
     py::arg("interleaved") = false);

  m.def("matmul", [](int type_id, py::buffer weight, int64_t n_in, int64_t n_out, const FloatRows& x, int threads,
                     bool interleaved) {
    const GgmlType t = checked_type(type_id);
    const py::buffer_info wi = weight.request();
    if (interleaved && !interleave_supported(t, n_in, n_out)) throw std::invalid_argument("not interleavable");
    if (interleaved && size_t(wi.size * wi.itemsize) < interleaved_bytes(t, n_in, n_out))
      throw std::invalid_argument("weight buffer too small");
    const WeightLayout layout = interleaved ? WeightLayout::Interleaved16 : WeightLayout::Rows;
    return product(t, wi, n_in, n_out, x, threads, [&](PoolEntry& e, const float* xp, int64_t rows, float* yp) {
      matmul(*e.pool, e.scratch, t, wi.ptr, n_in, n_out, xp, rows, yp, n_out, layout);
    });
  }, py::arg("type_id"), py::arg("weight"), py::arg("n_in"), py::arg("n_out"), py::arg("x"), py::arg("threads") = 1,
     py::arg("interleaved") = false,
     "y = x @ W.T for a ggml weight W with n_out rows of n_in elements; x is (rows, n_in) float32; "
     "interleaved: W is in the form interleave() returns.");

  m.def("gemm_float", [](int type_id, py::buffer weight, int64_t n_in, int64_t n_out, const FloatRows& x,
                         int threads, bool serial) {
    const GgmlType t = checked_type(type_id);
    if (!gemm_float_supported(t)) throw std::invalid_argument("gemm_float takes F32, F16 or BF16 weights");
    const py::buffer_info wi = weight.request();
    return product(t, wi, n_in, n_out, x, threads, [&](PoolEntry& e, const float* xp, int64_t rows, float* yp) {
      if (serial) gemm_float_serial(t, wi.ptr, n_in, n_out, xp, rows, yp, n_out);
      else gemm_float(*e.pool, t, wi.ptr, n_in, n_out, xp, rows, yp, n_out);
    });
  }, py::arg("type_id"), py::arg("weight"), py::arg("n_in"), py::arg("n_out"), py::arg("x"), py::arg("threads") = 1,
     py::arg("serial") = false,
     "y = x @ W.T on the float-weight GEMM (quant/gemm_float.h): F32 / F16 / BF16 W, n_out rows of n_in; "
     "serial: gemm_float_serial (in the calling thread).");

  m.def("bench_matmul", [](int type_id, py::buffer weights, int64_t n_in, int64_t n_out, int64_t rows, int threads,
                           int iters, bool interleaved, bool float_gemm) {
    // weights holds k >= 1 matrices back to back; calls cycle through them so a buffer larger
    // than the caches measures DRAM-streaming GEMV.
    const GgmlType t = checked_type(type_id);
    const py::buffer_info wi = weights.request();
    check_shape(t, n_in, n_out, size_t(wi.size * wi.itemsize));
    if (interleaved && !interleave_supported(t, n_in, n_out)) throw std::invalid_argument("not interleavable");
    if (float_gemm && (interleaved || !gemm_float_supported(t))) throw std::invalid_argument("float_gemm: F32/F16/BF16 rows");
    const size_t mat = interleaved ? interleaved_bytes(t, n_in, n_out) : ggml_row_bytes(t, n_in) * size_t(n_out);
    const size_t k = size_t(wi.size * wi.itemsize) / mat;
    if (k == 0) throw std::invalid_argument("weight buffer too small");
    const WeightLayout layout = interleaved ? WeightLayout::Interleaved16 : WeightLayout::Rows;
    std::vector<float> x(size_t(rows * n_in)), y(size_t(rows * n_out));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) % 1000) / 500.f - 1.f;
    PoolEntry& e = pool_for(threads);
    auto run = [&](const uint8_t* wm) {
      if (float_gemm) gemm_float(*e.pool, t, wm, n_in, n_out, x.data(), rows, y.data(), n_out);
      else matmul(*e.pool, e.scratch, t, wm, n_in, n_out, x.data(), rows, y.data(), n_out, layout);
    };
    double secs, cpu;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(e.mu);
      const auto* base = static_cast<const uint8_t*>(wi.ptr);
      for (size_t j = 0; j < k; ++j) run(base + j * mat);  // warm-up: touch every matrix once
      timespec c0, c1;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run(base + size_t(i) % k * mat);
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
      cpu = (double(c1.tv_sec - c0.tv_sec) + 1e-9 * double(c1.tv_nsec - c0.tv_nsec)) / iters;
    }
    // (wall seconds, process CPU seconds) per call; CPU time (all threads, spinning included)
    // is the steadier number on a shared, oversubscribed machine.
    return py::make_tuple(secs, cpu);
  }, py::arg("type_id"), py::arg("weights"), py::arg("n_in"), py::arg("n_out"), py::arg("rows"), py::arg("threads"),
     py::arg("iters"), py::arg("interleaved") = false, py::arg("float_gemm") = false);

  m.def("active_isa", [] { return std::string(isa_name(active_isa())); });
  m.def("set_isa", [](const std::string& name) {
    for (Isa i : kAll)
      if (name == isa_name(i)) return set_isa(i);
    return false;
  }, py::arg("name"), "Force a kernel path; False if unknown or not usable here.");
  auto isas_where = [](bool (*pred)(Isa)) {
    std::vector<std::string> out;
    for (Isa i : kAll)
      if (pred(i)) out.emplace_back(isa_name(i));
    return out;
  };
  m.def("amx_available", &amx_available, "AMX-INT8 tile kernels passed the self-test and can serve avx512_vnni.");
  m.def("amx_active", &amx_active, "Interleaved products of >= 16 activation rows run on AMX tiles now.");
  m.def("set_amx", &set_amx, py::arg("on"), "Turn the AMX kernels on or off; returns amx_active().");
  m.def("usable_isas", [isas_where] { return isas_where(isa_usable); },
        "Paths whose CPU features are present and whose start-up self-test passed.");
  m.def("supported_isas", [isas_where] { return isas_where(isa_supported); },
        "Paths this CPU's features allow, whether or not their self-test passed.");
}

}  // namespace ls
