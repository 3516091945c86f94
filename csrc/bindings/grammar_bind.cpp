// Grammar support: loading llguidance into the process (lanes and in-process users call it once
// with the wheel's library path, see lanes/grammar.py) and a compile check for tests.
#include <pybind11/pybind11.h>

#include "bindings/bindings.h"
#include "grammar/llg_api.h"

namespace py = pybind11;

namespace ls {

void bind_grammar(py::module_& m) {
  m.def(
      "load_llguidance",
      [](const std::string& path) {
        const llg::Api& api = llg::Api::load(path);
        return std::string(api.get_version());
      },
      py::arg("path"),
      "Loads llguidance's shared library for grammar-constrained decoding (idempotent); returns its version.");
  m.def(
      "defer_llguidance", [](const std::string& path) { llg::Api::defer(path); }, py::arg("path"),
      "Names llguidance's library; it is loaded by the first grammar-constrained request.");
  m.def(
      "llguidance_loaded", [] { return llg::Api::loaded() != nullptr; },
      "Whether grammar-constrained decoding is available in this process.");
}

}  // namespace ls
