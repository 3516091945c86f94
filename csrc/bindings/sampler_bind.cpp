// Test-facing bindings of the sampler and the stop matcher (the engine uses them from C++).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/sampling_params.h"
#include "sampler/kernels.h"
#include "sampler/sampler.h"

namespace py = pybind11;

namespace ls {
namespace {

// Strict: an unknown key is a typo in a test, not something to ignore silently.
SamplingParams params_from_dict(const py::dict& d) { return sampling_from_dict(d, true); }

}  // namespace

void bind_sampler(py::module_& m) {
  py::class_<Sampler>(m, "Sampler", "Token sampler of one sequence (see csrc/sampler/sampler.h).")
      .def(py::init<int32_t>(), py::arg("n_vocab"))
      .def_property_readonly("n_vocab", &Sampler::n_vocab)
      .def(
          "reset",
          [](Sampler& s, const py::dict& params, const std::vector<int32_t>& prompt_ids,
             const std::vector<int32_t>& eog_ids) { s.reset(params_from_dict(params), prompt_ids, eog_ids); },
          py::arg("params"), py::arg("prompt_ids") = std::vector<int32_t>{},
          py::arg("eog_ids") = std::vector<int32_t>{})
      .def(
          "sample",
          [](Sampler& s, py::array_t<float, py::array::c_style | py::array::forcecast> logits,
             int32_t n_generated) {
            if (logits.ndim() != 1 || logits.shape(0) != s.n_vocab())
              throw std::invalid_argument("logits must be a 1-D array of n_vocab floats");
            // Work on a copy: sample() modifies the logits in place.
            std::vector<float> buf(logits.data(), logits.data() + logits.shape(0));
            py::gil_scoped_release release;
            return s.sample(buf.data(), n_generated);
          },
          py::arg("logits"), py::arg("n_generated") = 0)
      .def("accept", &Sampler::accept, py::arg("token"));

  py::class_<StopMatcher>(m, "StopMatcher", "Stop-string matcher over emitted UTF-8 text.")
      .def(py::init<const std::vector<std::string>&>(), py::arg("stops"))
      .def("reset", &StopMatcher::reset, py::arg("stops"))
      .def(
          "push",
          [](StopMatcher& sm, const std::string& text) {
            std::string_view out = sm.push(text);
            return py::str(out.data(), out.size());
          },
          py::arg("text"))
      .def("flush", [](StopMatcher& sm) {
        std::string_view out = sm.flush();
        return py::str(out.data(), out.size());
      })
      .def_property_readonly("stopped", &StopMatcher::stopped);

  // Test hooks: run the portable kernels on an AVX2 machine so both paths stay tested.
  m.def("_sampler_force_portable", &sampler_kernels::force_portable, py::arg("on"));
  m.def("_sampler_using_avx2", &sampler_kernels::using_avx2);
}

}  // namespace ls
