// Test- and benchmark-facing binding of engine/logprobs.h (the engine calls it from C++).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <vector>

#include "bindings/bindings.h"
#include "engine/logprobs.h"

namespace py = pybind11;

namespace ls {

void bind_logprobs(py::module_& m) {
  m.def(
      "score_logprobs",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> logits, int32_t token, int32_t num_top) {
        if (logits.ndim() != 1 || logits.shape(0) < 1) throw std::invalid_argument("logits must be a 1-D array");
        const auto n_vocab = int32_t(logits.shape(0));
        if (token < 0 || token >= n_vocab) throw std::invalid_argument("token out of range");
        if (num_top < 0 || num_top > kMaxTopLogprobs) throw std::invalid_argument("num_top out of range");
        std::vector<TokenLogprob> out(size_t(1 + num_top));
        {
          py::gil_scoped_release nogil;
          score_logprobs(logits.data(), n_vocab, token, num_top, out.data());
        }
        py::list top;
        for (int32_t j = 1; j <= num_top; ++j) top.append(py::make_tuple(out[j].token, out[j].logprob));
        return py::make_tuple(py::make_tuple(out[0].token, out[0].logprob), top);
      },
      py::arg("logits"), py::arg("token"), py::arg("num_top"),
      "((token, logprob), [(alt, logprob) x num_top]) of one raw logits row, as the engine reports them "
      "(alternatives best first, ties to the lower id; token -1 / NaN where fewer exist).");
}

}  // namespace ls
